#!/usr/bin/env python3
"""Our kernels' SM clock and board power at each point, per dtype, beside their speed: where a
dtype's gap to another is the chip's power cap and where it is the kernel's work per cycle
(issue 19's FP8 over bf16 prefill; session 55's fp16 over bf16 used tools/dtype_clocks.py,
which times through PyTorch and has no e4m3 inputs).

    python3 tools/bench_clocks.py --bench build/bench/flashattn_bench --out DIR \\
        [--points 128:2048:0,128:8192:0,...] [--dtypes bf16,e4m3] [--rounds 2] \\
        [--window-ms 1500] [--settle-ms 1000] [--sms 132]

Points are d:seqlen:causal on flashattn_bench's FA-paper grid (its heads and batch). At each
point the dtypes take turns, --rounds times; each turn is one flashattn_bench call (`--iters 2
--window-ms W`: after its calibration and warm-up launches, two back-to-back windows of W ms)
while nvidia-smi samples the SM clock, board power and throttle reasons every 20 ms
(dtype_clocks.sampling). A call's clock and power are the means of the samples from --settle-ms
into its timed windows (the last 2 x W ms before the call returned) to 100 ms before it
returned: nvidia-smi's power.draw is an average that lags the load (from an idle gap it climbs
for about 0.8 s). Writes DIR/results.csv (a row per call, with the span its means cover in
seconds since the epoch) and DIR/nvidia-smi.csv, and prints per point and dtype (medians over
the rounds): TFLOP/s, MHz, W, the speed, clock
and speed-per-clock over the first dtype's, and the share of the dtype's tensor peak per clock
reached (TFLOP/s over MHz x --sms x 4096 FLOP a cycle for 16-bit types, 8192 for e4m3: Hopper's
dense rates per SM).
"""
import argparse
import csv
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dtype_clocks import samples, sampling, window_stats  # noqa: E402

PEAK_FLOP_PER_CYCLE = {"bf16": 4096, "fp16": 4096, "e4m3": 8192}  # per SM, dense, sm_90


def parse_points(text):
    """[(head_dim, seqlen, causal)] of "d:seqlen:causal,..."; ValueError naming a bad entry."""
    points = []
    for part in filter(None, text.split(",")):
        fields = part.split(":")
        if len(fields) != 3 or not all(f.isdigit() for f in fields) or fields[2] not in ("0", "1"):
            raise ValueError(f"bad point '{part}' (expected d:seqlen:causal, causal 0 or 1)")
        points.append((int(fields[0]), int(fields[1]), int(fields[2])))
    if not points:
        raise ValueError("--points names no point")
    return points


def bench_tflops(stdout):
    """(TFLOP/s, kernel) of a flashattn_bench --csv call's one point: its last CSV row."""
    rows = list(csv.DictReader(line for line in stdout.splitlines() if "," in line))
    if not rows or "tflops" not in rows[-1]:
        raise ValueError("no flashattn_bench CSV row in the call's output")
    return float(rows[-1]["tflops"]), rows[-1]["kernel"]


def sampled_span(t0, t1, window_ms, settle_ms):
    """(from, to) in seconds since the epoch: the part of a call (started t0, returned t1) whose
    samples count: its two timed windows, the last 2 x window_ms before t1, less their first
    settle_ms and the call's last 100 ms (the process's exit, the GPU idle); never before t0,
    and at least 50 ms long."""
    end = t1 - 0.1
    start = max(t0, t1 - 2 * window_ms / 1e3 + settle_ms / 1e3)
    return min(start, end - 0.05), end


def summary(rows, dtypes, sms):
    """Per (point, dtype) present in `rows` (results.csv's dicts): medians over the rounds and
    the ratios to the first dtype's; a list of dicts in points' then dtypes' order."""
    out = []
    points = list(dict.fromkeys((r["head_dim"], r["seqlen"], r["causal"]) for r in rows))
    for point in points:
        med = {}
        for dt in dtypes:
            sel = [r for r in rows if (r["head_dim"], r["seqlen"], r["causal"]) == point
                   and r["dtype"] == dt and r["sm_mhz"] != ""]
            if sel:
                med[dt] = {k: statistics.median(float(r[k]) for r in sel)
                           for k in ("tflops", "sm_mhz", "watts")}
        base = med.get(dtypes[0])
        for dt, m in med.items():
            peak = m["sm_mhz"] * 1e6 * sms * PEAK_FLOP_PER_CYCLE[dt] / 1e12
            row = dict(point=point, dtype=dt, tflops=m["tflops"], sm_mhz=m["sm_mhz"],
                       watts=m["watts"], of_peak_per_clock=m["tflops"] / peak)
            if base:
                row["speed"] = m["tflops"] / base["tflops"]
                row["clock"] = m["sm_mhz"] / base["sm_mhz"]
                row["per_clock"] = row["speed"] / row["clock"]
            out.append(row)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bench", required=True, help="flashattn_bench's path")
    ap.add_argument("--out", required=True)
    ap.add_argument("--points", default="128:2048:0,128:8192:0,128:8192:1,128:16384:0,"
                                         "256:2048:0,256:8192:0")
    ap.add_argument("--dtypes", default="bf16,e4m3")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--window-ms", type=float, default=1500.0)
    ap.add_argument("--settle-ms", type=float, default=1000.0,
                    help="leave out each call's first MS of timed windows (power.draw lags)")
    ap.add_argument("--sms", type=int, default=132, help="the GPU's SMs (H100 and H200 SXM: 132)")
    args = ap.parse_args()
    try:
        points = parse_points(args.points)
    except ValueError as e:
        sys.exit(str(e))
    if args.rounds < 1:
        sys.exit(f"--rounds {args.rounds}: at least 1")
    dtypes = args.dtypes.split(",")
    bad = [d for d in dtypes if d not in PEAK_FLOP_PER_CYCLE]
    if bad:
        sys.exit(f"unknown dtype '{bad[0]}' (expected one of {', '.join(PEAK_FLOP_PER_CYCLE)})")

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    smi_path = out / "nvidia-smi.csv"
    calls = []  # (round, point, dtype, tflops, kernel, t0, t1)
    with sampling(smi_path):
        for r in range(args.rounds):
            for d, s, causal in points:
                for dt in dtypes:
                    t0 = time.time()
                    run = subprocess.run(
                        [args.bench, "--dtype", dt, "--head-dims", str(d), "--causal",
                         str(causal), "--seqlens", str(s), "--window-ms", str(args.window_ms),
                         "--iters", "2", "--csv"], capture_output=True, text=True)
                    t1 = time.time()
                    if run.returncode != 0:
                        sys.exit(f"{args.bench} failed at {d}:{s}:{causal} {dt}:\n{run.stderr}")
                    tf, kernel = bench_tflops(run.stdout)
                    calls.append((r, (d, s, causal), dt, tf, kernel, t0, t1))
                    print(f"round {r} {d}:{s}:{causal} {dt}: {tf:.1f} TFLOP/s", flush=True)
    got = samples(smi_path)
    rows = []
    for r, (d, s, causal), dt, tf, kernel, t0, t1 in calls:
        start, end = sampled_span(t0, t1, args.window_ms, args.settle_ms)
        # window_stats starts 50 ms after its first bound (dtype_clocks' tail of the call before).
        mhz, watts, n, reasons = window_stats(got, start - 0.05, end)
        rows.append(dict(round=r, head_dim=d, seqlen=s, causal=causal, dtype=dt, tflops=tf,
                         sm_mhz=mhz, watts=watts, samples=n, reasons=reasons, kernel=kernel,
                         sampled_from=round(start, 3), sampled_to=round(end, 3)))
    with open(out / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    print(f"\nmedians over {args.rounds} rounds; ratios to {dtypes[0]}; clock and power over "
          f"each call's timed windows past their first {args.settle_ms:.0f} ms")
    print("| d, keys, causal | dtype | TFLOP/s | SM MHz | W | speed | clock | per clock | "
          "of peak per clock |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in summary(rows, dtypes, args.sms):
        d, s, causal = row["point"]
        ratios = " | ".join(f"{row[k]:.3f}" if k in row else "" for k in
                            ("speed", "clock", "per_clock"))
        print(f"| {d}, {s}, {causal} | {row['dtype']} | {row['tflops']:.1f} | "
              f"{row['sm_mhz']:.0f} | {row['watts']:.0f} | {ratios} | "
              f"{row['of_peak_per_clock']:.3f} |")


if __name__ == "__main__":
    main()
