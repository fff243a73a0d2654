#!/usr/bin/env python3
"""Times two builds of libflashattn in one run, back to back: the FlashAttention-paper grid, or
(--serving) chunked prefill and decode on contiguous and paged caches.

    python3 tools/compare_builds.py --bench build/bench/flashattn_bench \\
        --base .deps/before --out results/ [--rounds 2] [--window-ms 200] [--dtype bf16] \\
        [--head-dims 64,128,256]  (192:128: value head dim 128) [--heads 32]
    python3 tools/compare_builds.py --serving --bench build/bench/decode_bench \\
        --base .deps/before --out results/ [--rounds 2] [--pages 0,1,16,64] [--iters 2] \\
        [--kinds prefill,decode] [--head-dims 64,128,256]  (every point by default)
        [--kv-dtypes bf16,e4m3]  (the caches' element types; bf16 by default)

One benchmark binary times its own build's library and the one in --base (a directory holding
libflashattn.so.0, loaded through LD_LIBRARY_PATH; the binary's DT_RUNPATH lets that win). Each
pass times every point with one build; passes go base, this, this, base, ... (a linear clock
drift over the run falls on both alike).

Grid: each timing launches the built-in choice back to back for --window-ms; prints each
point's TFLOP/s per build, their ratio (this / base) and the geometric mean, and writes
compare.csv to --out.

--serving: `decode_bench decode` (bf16 queries and cache, 32/8 heads, causal where sq > 1, the
built-in choice with the workspace its plan asks, shuffled page tables) at issue 16's
chunked-prefill shapes (d 128: 4 x 512 against 8k and 32k, 4 x 2048 against 16k, 16 x 256
against 8k, 1 x 4096 against 32k; d 64 and 256: 4 x 512 against 16k) and decode steps (d 128, sq
1: batch 1, 8 and 64 against 8k and 64k), each at every --pages size (0: contiguous); each point
is the median of --iters windows of >= 200 ms. Prints each point's microseconds per build, the
speed ratio (base time / this time), each build's paged / contiguous speed, the geometric mean
per kind (and cache type, with --kv-dtypes), and writes compare-serving.csv to --out. --kinds
(prefill, decode) and --head-dims (64, 128, 256) keep a subset of the points: the whole set at
pages 0, 16, 64 and 256 took 299 s of an H200 (two rounds), chunked prefill at d 128 alone about
a third of it. --kv-dtypes bf16,e4m3 times every point with both caches (decode_bench
--kv-dtype; e4m3: FP8 K and V, bf16 queries) and adds each build's e4m3 over bf16 cache speed
(issue 19's chunked-prefill and decode ratios) to the e4m3 rows (empty where bf16 was not
timed); both builds must run e4m3 caches (a base from before them fails its first call, by
name).

A check that a change leaves speed alone (e.g. a refactor), or how much it moves it.
"""
import argparse
import csv
import io
import os
import subprocess
import sys

from bench_report import geomean

SEQLENS = [512, 1024, 2048, 4096, 8192, 16384]
# --serving: (d, batches, sq, kv lens), one decode_bench call each.
SERVING = [(128, "4", 512, "8192,32768"), (128, "4", 2048, "16384"), (128, "16", 256, "8192"),
           (128, "1", 4096, "32768"), (64, "4", 512, "16384"), (256, "4", 512, "16384"),
           (128, "1,8,64", 1, "8192,65536")]


def run(args, lib):
    """One pass over the grid with the library in `lib` ("": the binary's own)."""
    env = dict(os.environ)
    if lib:
        env["LD_LIBRARY_PATH"] = lib + os.pathsep + env.get("LD_LIBRARY_PATH", "")
    cmd = [args.bench, "--csv", "--dtype", args.dtype, "--window-ms", str(args.window_ms),
           "--head-dims", args.head_dims or "64,128,256", "--causal", "0,1",
           "--seqlens", ",".join(map(str, SEQLENS))]
    if args.heads:
        cmd += ["--heads", str(args.heads)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    points = {}
    for r in csv.DictReader(io.StringIO(out)):
        d, dv = r["head_dim"], r.get("head_dim_v") or r["head_dim"]
        dims = d if dv == d else f"{d}:{dv}"
        points[(dims, int(r["causal"]), int(r["seqlen"]))] = (float(r["tflops"]), r["kernel"])
    return points


def alternate(args, run_pass):
    """--rounds passes of each build, base, this, this, base, ...: {"base": [...], "this": [...]},
    each pass run_pass(args, lib) with lib the base directory or "" (the binary's own)."""
    passes = {"base": [], "this": []}
    for r in range(args.rounds):
        for name in (("base", "this") if r % 2 == 0 else ("this", "base")):
            passes[name].append(run_pass(args, args.base if name == "base" else ""))
    return passes


def run_serving(args, lib):
    """One pass over the serving points with the library in `lib` ("": the binary's own):
    {(d, batch, sq, kv_len, page, kv_dtype): (us, kernel)}."""
    env = dict(os.environ)
    if lib:
        env["LD_LIBRARY_PATH"] = lib + os.pathsep + env.get("LD_LIBRARY_PATH", "")
    points = {}
    for d, batches, sq, kv_lens in serving_points(args):
        cmd = [args.bench, "decode", "--head-dim", str(d), "--batches", batches, "--sq", str(sq),
               "--kv-lens", kv_lens, "--pages", args.pages, "--iters", str(args.iters)]
        if args.kv_dtypes != "bf16":  # (a decode_bench from before e4m3 caches lacks the option)
            cmd += ["--kv-dtype", args.kv_dtypes]
        run = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if run.returncode != 0:
            tail = run.stderr.strip().splitlines()[-1:] or ["(no message)"]
            sys.exit(f"compare_builds.py: {' '.join(cmd)} failed with "
                     f"{'the base build ' + lib if lib else 'this build'}: {tail[0]}")
        for r in csv.DictReader(io.StringIO(run.stdout)):
            key = (d, int(r["batch"]), int(r["sq"]), int(r["kv_len"]), int(r["page"]),
                   r.get("kv_dtype", "bf16"))
            points[key] = (float(r["us"]), r["kernel"])
    return points


def serving_points(args):
    """The SERVING points --kinds and --head-dims keep (all of them by default)."""
    kinds = set(args.kinds.split(","))
    dims = None if args.head_dims is None else {int(x) for x in args.head_dims.split(",")}
    return [pt for pt in SERVING
            if ("prefill" if pt[2] > 1 else "decode") in kinds and (dims is None or pt[0] in dims)]


def serving(args):
    """--serving: both builds at every serving point; prints and writes compare-serving.csv."""
    passes = alternate(args, run_serving)
    mean = {name: {key: sum(p[key][0] for p in runs) / len(runs) for key in runs[0]}
            for name, runs in passes.items()}
    rows, ratios = [], {}
    print(f"{'d':>4} {'batch':>5} {'sq':>5} {'kv':>6} {'page':>4} {'cache':>5} {'base us':>9} "
          f"{'this us':>9} {'speed':>6} {'paged/contig base':>17} {'this':>6} "
          f"{'e4m3/bf16 base':>14} {'this':>6}  kernel (this)")
    fmt = lambda x: f"{x:.3f}" if x else ""
    for key in sorted(mean["this"]):
        b, t = mean["base"][key], mean["this"][key]
        contig = key[:4] + (0, key[5])
        bf16 = key[:5] + ("bf16",)
        # A build's paged speed over its contiguous speed, and an e4m3 cache's speed over the
        # bf16 cache's (time ratios), where both were run.
        rel = {n: mean[n][contig] / mean[n][key] if contig in mean[n] and key[4] else None
               for n in ("base", "this")}
        fp8 = {n: mean[n][bf16] / mean[n][key] if bf16 in mean[n] and key[5] != "bf16" else None
               for n in ("base", "this")}
        ratios.setdefault(("prefill" if key[2] > 1 else "decode", key[5]), []).append(b / t)
        rows.append([*key, f"{b:.2f}", f"{t:.2f}", f"{b / t:.3f}", fmt(rel["base"]),
                     fmt(rel["this"]), fmt(fp8["base"]), fmt(fp8["this"]),
                     passes["base"][0][key][1], passes["this"][0][key][1]])
        print(f"{key[0]:>4} {key[1]:>5} {key[2]:>5} {key[3]:>6} {key[4]:>4} {key[5]:>5} "
              f"{b:>9.2f} {t:>9.2f} {b / t:>6.3f} {fmt(rel['base']):>17} {fmt(rel['this']):>6} "
              f"{fmt(fp8['base']):>14} {fmt(fp8['this']):>6}  {passes['this'][0][key][1]}",
              flush=True)
    # Per kind, and per cache type where a run had more than bf16's.
    typed = args.kv_dtypes != "bf16"
    for kind in ("prefill", "decode"):
        for dtype in args.kv_dtypes.split(","):
            xs = ratios.get((kind, dtype))
            if xs:
                label = f"{kind}, {dtype} cache" if typed else kind
                print(f"Geometric mean speed (this / base), {label}: {geomean(xs):.4f}; "
                      f"min {min(xs):.3f}, max {max(xs):.3f}")
    with open(os.path.join(args.out, "compare-serving.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["head_dim", "batch", "sq", "kv_len", "page", "kv_dtype", "base_us", "this_us",
                    "speed", "base_paged_over_contiguous", "this_paged_over_contiguous",
                    "base_e4m3_over_bf16", "this_e4m3_over_bf16", "base_kernel", "this_kernel"])
        w.writerows(rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", required=True)
    ap.add_argument("--base", required=True, help="directory holding the other libflashattn.so.0")
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--window-ms", type=float, default=200)
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--head-dims",
                    help="the bench's --head-dims (D or D:DV, comma-separated; default "
                         "64,128,256); with --serving, the head dims (D only) of the points to "
                         "time, among 64, 128 and 256 (default: every point)")
    ap.add_argument("--heads", type=int,
                    help="the bench's --heads: the same heads at every head dim (default: "
                         "hidden 2048, 32 where the dim does not divide it), e.g. 32 to set "
                         "padded head dims beside their compiled ones")
    ap.add_argument("--serving", action="store_true",
                    help="--bench is decode_bench: chunked prefill and decode points")
    ap.add_argument("--pages", default="0,1,16,64", help="--serving: page sizes (0: contiguous)")
    ap.add_argument("--iters", type=int, default=2, help="--serving: windows per point")
    ap.add_argument("--kinds", default="prefill,decode",
                    help="--serving: the points to time, prefill (sq > 1) and / or decode")
    ap.add_argument("--kv-dtypes",
                    help="--serving: the caches' element types, bf16 and / or e4m3 (default bf16)")
    args = ap.parse_args()
    if args.heads is not None and (args.serving or args.heads < 1):
        sys.exit("compare_builds.py: --heads takes a positive count, without --serving")
    if args.kv_dtypes is None:
        args.kv_dtypes = "bf16"
    elif not args.serving:
        sys.exit("compare_builds.py: --kv-dtypes is a --serving option")
    dtypes = args.kv_dtypes.split(",")
    if any(t not in ("bf16", "e4m3") for t in dtypes) or len(set(dtypes)) < len(dtypes):
        sys.exit(f"compare_builds.py: --kv-dtypes takes bf16 and / or e4m3, each once, not "
                 f"{args.kv_dtypes!r}")
    unknown = [k for k in args.kinds.split(",") if k not in ("prefill", "decode")]
    if unknown:
        sys.exit(f"compare_builds.py: --kinds takes prefill and decode, not {unknown}")
    if args.serving and args.head_dims is not None:
        if not all(x.isdigit() for x in args.head_dims.split(",")):
            sys.exit(f"compare_builds.py: with --serving, --head-dims takes head dims D only, "
                     f"not {args.head_dims!r}")
        if not serving_points(args):
            sys.exit(f"compare_builds.py: no serving point at --kinds {args.kinds} "
                     f"--head-dims {args.head_dims}")
    if not os.path.exists(os.path.join(args.base, "libflashattn.so.0")):
        sys.exit(f"compare_builds.py: no libflashattn.so.0 in {args.base}")
    if args.rounds < 1:
        sys.exit("compare_builds.py: --rounds must be at least 1")
    os.makedirs(args.out, exist_ok=True)
    if args.serving:
        serving(args)
        return
    header = subprocess.run([args.bench, "--head-dims", "64", "--causal", "0", "--seqlens", "512",
                             "--window-ms", "1"], check=True, capture_output=True, text=True,
                            env=dict(os.environ, LD_LIBRARY_PATH=args.base)).stdout.splitlines()[0]
    print("base:", header)
    passes = alternate(args, run)
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
