#!/usr/bin/env python3
"""fp16 beside bf16 at the same points, with the GPU's SM clock and board power sampled while
each runs: is fp16's gap to bf16 (issue 17 asks within 3%) in the kernels or in the chip?

    FLASHATTN_LIBRARY=build/libflashattn.so.0 PYTHONPATH=bindings/python \\
        python3 tools/dtype_clocks.py --out DIR [--points 128:8192:1,...] \\
        [--backends libflashattn,cudnn] [--window-ms 1000] [--rounds 2]

Points are d:seqlen:causal on the FA-paper grid, heads and batch as bench_compare.py sets them
(2048 / d heads, 32 where d does not divide 2048; batch 16384 / seqlen). At each point and backend (bench_compare.py's) three inputs are made from one
random-normal draw: `bf16`; `fp16`; and `fp16-bf16vals`, fp16 holding the bf16 values (exact: a
bf16 value in fp16's normal range is an fp16 value whose 3 low mantissa bits are zero). The three
are timed back to back, --window-ms each (bench_report.window_ms), taking turns, --rounds times,
while nvidia-smi samples the SM clock and power every 20 ms; a window's clock and power are the
means of the samples inside it. The kernels run the same instructions on `fp16` and
`fp16-bf16vals`, so a gap between those two is the data's (the multipliers' switching and so
the power limit), not the code's; the softmax's P is full-width fp16 in both.

Writes results.csv (a row per window) and prints, per point and backend, each input's TFLOP/s,
clock and power (medians over the rounds) and the two ratios to bf16.
"""
import argparse
import contextlib
import csv
import datetime
import statistics
import subprocess
import sys
import time
from pathlib import Path

FIELDS = "timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active"
VARIANTS = ["bf16", "fp16", "fp16-bf16vals"]


def sampler(path):
    """nvidia-smi writing a sample every 20 ms to path; without the throttle-reason field where
    this driver does not know it."""
    for fields in (FIELDS, FIELDS.rsplit(",", 1)[0]):
        f = open(path, "w")
        proc = subprocess.Popen(["nvidia-smi", f"--query-gpu={fields}",
                                 "--format=csv,noheader,nounits", "-lms", "20"],
                                stdout=f, stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        if proc.poll() is None:
            return proc
        f.close()
    sys.exit("nvidia-smi could not sample the GPU")


@contextlib.contextmanager
def sampling(path):
    """nvidia-smi sampling into `path` (sampler) for the `with` block's duration, stopped 0.2 s
    after it ends (the last call's tail in the file), also when the block raises."""
    smi = sampler(path)
    try:
        yield
    finally:
        time.sleep(0.2)
        smi.terminate()
        smi.wait()


def samples(path):
    """[(seconds since the epoch, SM MHz, watts, throttle reasons or '')] from the sampler's
    file; lines it cannot read (a header, '[N/A]') are left out."""
    rows = []
    for line in Path(path).read_text().splitlines():
        parts = [p.strip() for p in line.split(",")]
        try:
            t = datetime.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            rows.append((t, float(parts[1]), float(parts[2]), parts[4] if len(parts) > 4 else ""))
        except (ValueError, IndexError):
            continue
    return rows


def window_stats(got, t0, t1):
    """(mean SM MHz, mean watts, samples, throttle reasons) of the samples `got` (samples())
    taken from 50 ms after t0 (the previous input's tail) to t1; ('', '', 0, '') when none."""
    inside = [g for g in got if t0 + 0.05 <= g[0] <= t1]
    if not inside:
        return "", "", 0, ""
    return (round(statistics.mean(g[1] for g in inside), 1),
            round(statistics.mean(g[2] for g in inside), 1), len(inside),
            " ".join(sorted({g[3] for g in inside if g[3]})))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--points", default="128:8192:1,128:16384:0,64:4096:1,256:4096:1,128:1024:1")
    ap.add_argument("--backends", default="libflashattn,cudnn")
    ap.add_argument("--window-ms", type=float, default=1000.0)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    import torch
    from bench_compare import TOKENS, backends, flops, heads_for
    from bench_report import window_ms

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    wanted = args.backends.split(",")
    found = backends(torch, wanted)
    gpu = torch.cuda.get_device_name()
    print(f"GPU: {gpu}", flush=True)
    smi_path = out / "nvidia-smi.csv"
    windows = []  # (point, backend, variant, round, ms, tflops, t0, t1)
    gen = torch.Generator(device="cuda").manual_seed(2027)
    with sampling(smi_path):
        for point in args.points.split(","):
            d, s, causal = (int(x) for x in point.split(":"))
            h, b = heads_for(d), TOKENS // s
            x = [torch.randn(b, s, h, d, device="cuda", generator=gen) for _ in range(3)]
            inputs = {"bf16": [t.bfloat16() for t in x], "fp16": [t.half() for t in x],
                      "fp16-bf16vals": [t.bfloat16().half() for t in x]}
            del x
            for name in wanted:
                if name not in found:
                    continue
                steps = {v: found[name](*inputs[v], bool(causal))[0] for v in VARIANTS}
                torch.cuda.synchronize()
                for r in range(args.rounds):
                    for v in VARIANTS:
                        t0 = time.time()
                        ms = window_ms(torch, steps[v], args.window_ms)
                        t1 = time.time()
                        tf = flops(b, h, s, d, d, causal) / (ms * 1e-3) / 1e12
                        windows.append((point, name, v, r, ms, tf, t0, t1))
                        print(f"{point} {name} {v} round {r}: {tf:.1f} TFLOP/s", flush=True)
                del steps
            del inputs
            torch.cuda.empty_cache()
    got = samples(smi_path)
    rows = []
    for point, name, v, r, ms, tf, t0, t1 in windows:
        mhz, watts, n, reasons = window_stats(got, t0, t1)
        rows.append(dict(gpu=gpu, point=point, backend=name, input=v, round=r,
                         us=round(ms * 1e3, 2), tflops=round(tf, 1), sm_mhz=mhz, watts=watts,
                         samples=n, reasons=reasons))
    with open(out / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    print(f"\n{gpu}; medians over {args.rounds} windows of {args.window_ms:.0f} ms")
    print("| point | backend | input | TFLOP/s | / bf16 | SM MHz | W |")
    print("|---|---|---|---|---|---|---|")
    for point in args.points.split(","):
        for name in wanted:
            med = {}
            for v in VARIANTS:
                sel = [r for r in rows if r["point"] == point and r["backend"] == name
                       and r["input"] == v]
                if not sel:
                    continue
                med[v] = {k: statistics.median(float(r[k]) for r in sel if r[k] != "")
                          for k in ("tflops", "sm_mhz", "watts")
                          if any(r[k] != "" for r in sel)}
            for v, m in med.items():
                ratio = m["tflops"] / med["bf16"]["tflops"] if "bf16" in med else float("nan")
                print(f"| {point} | {name} | {v} | {m['tflops']:.1f} | {ratio:.3f} | "
                      f"{m.get('sm_mhz', float('nan')):.0f} | {m.get('watts', float('nan')):.0f} |")


if __name__ == "__main__":
    main()
