#!/usr/bin/env python3
"""Times two builds of libflashattn on the FlashAttention-paper grid in one run, back to back.

    python3 tools/compare_builds.py --bench build/bench/flashattn_bench \\
        --base .deps/before --out results/ [--rounds 2] [--window-ms 200] [--dtype bf16] \\
        [--head-dims 64,128,256]  (192:128: value head dim 128)

One benchmark binary times its own build's library and the one in --base (a directory holding
libflashattn.so.0, loaded through LD_LIBRARY_PATH; the binary's DT_RUNPATH lets that win). Each
pass times the whole grid with one build; passes go base, this, this, base, ... (a linear clock
drift over the run falls on both alike); each timing launches the built-in choice back to back
for --window-ms.
Prints each point's TFLOP/s per build, their ratio (this / base) and the geometric mean, and
writes compare.csv to --out. A check that a change leaves speed alone (e.g. a refactor).
"""
import argparse
import csv
import io
import os
import subprocess
import sys

from bench_report import geomean

SEQLENS = [512, 1024, 2048, 4096, 8192, 16384]


def run(args, lib):
    """One pass over the grid with the library in `lib` ("": the binary's own)."""
    env = dict(os.environ)
    if lib:
        env["LD_LIBRARY_PATH"] = lib + os.pathsep + env.get("LD_LIBRARY_PATH", "")
    cmd = [args.bench, "--csv", "--dtype", args.dtype, "--window-ms", str(args.window_ms),
           "--head-dims", args.head_dims, "--causal", "0,1",
           "--seqlens", ",".join(map(str, SEQLENS))]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    points = {}
    for r in csv.DictReader(io.StringIO(out)):
        d, dv = r["head_dim"], r.get("head_dim_v") or r["head_dim"]
        dims = d if dv == d else f"{d}:{dv}"
        points[(dims, int(r["causal"]), int(r["seqlen"]))] = (float(r["tflops"]), r["kernel"])
    return points


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", required=True)
    ap.add_argument("--base", required=True, help="directory holding the other libflashattn.so.0")
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--window-ms", type=float, default=200)
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--head-dims", default="64,128,256",
                    help="the bench's --head-dims (D or D:DV, comma-separated)")
    args = ap.parse_args()
    if not os.path.exists(os.path.join(args.base, "libflashattn.so.0")):
        sys.exit(f"compare_builds.py: no libflashattn.so.0 in {args.base}")
    header = subprocess.run([args.bench, "--head-dims", "64", "--causal", "0", "--seqlens", "512",
                             "--window-ms", "1"], check=True, capture_output=True, text=True,
                            env=dict(os.environ, LD_LIBRARY_PATH=args.base)).stdout.splitlines()[0]
    print("base:", header)
    os.makedirs(args.out, exist_ok=True)
    passes = {"base": [], "this": []}
    for r in range(args.rounds):
        for name in (("base", "this") if r % 2 == 0 else ("this", "base")):
            passes[name].append(run(args, args.base if name == "base" else ""))
    rows, ratios = [], []
    print(f"{'d':>7} {'causal':>6} {'seqlen':>6} {'base':>8} {'this':>8} {'ratio':>6}  kernel (this)")
    for key in sorted(passes["this"][0], key=lambda k: (int(k[0].split(":")[0]), k[0], *k[1:])):
        b = sum(p[key][0] for p in passes["base"]) / args.rounds
        t = sum(p[key][0] for p in passes["this"]) / args.rounds
        ratios.append(t / b)
        rows.append([*key, f"{b:.1f}", f"{t:.1f}", f"{t / b:.3f}", passes["base"][0][key][1],
                     passes["this"][0][key][1]])
        print(f"{key[0]:>7} {key[1]:>6} {key[2]:>6} {b:>8.1f} {t:>8.1f} {t / b:>6.3f}  "
              f"{passes['this'][0][key][1]}", flush=True)
    print(f"Geometric mean ratio (this / base): {geomean(ratios):.4f}; "
          f"min {min(ratios):.3f}, max {max(ratios):.3f}")
    with open(os.path.join(args.out, "compare.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["head_dim", "causal", "seqlen", "base_tflops", "this_tflops", "ratio",
                    "base_kernel", "this_kernel"])
        w.writerows(rows)


if __name__ == "__main__":
    main()
