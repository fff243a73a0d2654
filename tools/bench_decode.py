#!/usr/bin/env python3
"""Decode bandwidth of libflashattn against PyTorch SDPA's flash backend (FlashAttention-2), in one run.

    python3 tools/bench_decode.py --bench build/bench/decode_bench --out results/

The grid is the one an LLM generates tokens on: bf16, head dim 128, 32 query heads sharing 8 K/V
heads, one query row per sequence, batch 1/8/32/64, KV length 4k..128k (skipping points whose
cache exceeds --max-gib). libflashattn runs through decode_bench (a KV-cache plan, split-KV as
the library chooses); PyTorch runs scaled_dot_product_attention(q, k, v, enable_gqa=True) with the
flash backend forced, on tensors of the same shapes, timed the same way (3 warm-ups, median of
--iters CUDA-event timings of back-to-back calls, each window >= 200 ms). Bandwidth = (K + V of every row + Q +
O bytes) / time for both, and the device-to-device copy bandwidth is measured too, as the
ceiling. Writes decode.csv, decode.md and, with matplotlib, decode.png.
"""
import argparse
import csv
import io
import os
import subprocess
import sys

from bench_report import pyplot

BATCHES = [1, 8, 32, 64]
KV_LENS = [4096, 8192, 16384, 32768, 65536, 131072]
HQ, HKV, D = 32, 8, 128
# Milliseconds per timing window, for both libraries: a decode step is about as short as the
# host's issue time, which one launch between two events would count; back to back for >= 200 ms
# (decode_bench does the same) the host's work overlaps the GPU's.
WINDOW_MS = 200.0


def kv_gib(batch, length):
    return 2.0 * batch * length * HKV * D * 2 / 2**30


def run_ours(args, points):
    rows = {}
    for batch in BATCHES:
        lens = [l for (b, l) in points if b == batch]
        if not lens:
            continue
        cmd = [args.bench, "decode", "--batches", str(batch), "--kv-lens", ",".join(map(str, lens)),
               "--iters", str(args.iters)]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        for r in csv.DictReader(io.StringIO(out)):
            rows[(int(r["batch"]), int(r["kv_len"]))] = (float(r["us"]), float(r["gbps"]),
                                                          int(r["splits"]), r["kernel"])
    return rows


def copy_bandwidth(args):
    out = subprocess.run([args.bench, "copy"], check=True, capture_output=True, text=True).stdout
    return float(out.split(",")[1].split()[0])


def run_torch(args, points):
    try:
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        print("PyTorch not found: reporting libflashattn alone", file=sys.stderr)
        return {}
    results = {}
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for batch, length in points:
        q = torch.randn(batch, HQ, 1, D, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(batch, HKV, length, D, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)
        try:
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                call = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)
                for _ in range(3):
                    call()

                def window(n):
                    start.record()
                    for _ in range(n):
                        call()
                    stop.record()
                    torch.cuda.synchronize()
                    return start.elapsed_time(stop) / n

                n = max(10, int(WINDOW_MS / window(10)) + 1)
                times = [window(n) for _ in range(args.iters)]
        except RuntimeError as e:
            print(f"torch flash failed at {batch} x {length}: {e}", file=sys.stderr)
            continue
        ms = sorted(times)[len(times) // 2]
        nbytes = 2.0 * k.numel() * 2 + 2.0 * q.numel() * 2
        results[(batch, length)] = (ms * 1e3, nbytes / (ms * 1e-3) / 1e9)
        del q, k, v
        torch.cuda.empty_cache()
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--max-gib", type=float, default=40.0)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    points = [(b, l) for b in BATCHES for l in KV_LENS if kv_gib(b, l) <= args.max_gib]
    copy = copy_bandwidth(args)
    ours = run_ours(args, points)
    torch_rows = run_torch(args, points)
    with open(os.path.join(args.out, "decode.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["batch", "kv_len", "kv_mib", "ours_us", "ours_gbps", "splits", "kernel",
                    "fa2_us", "fa2_gbps", "copy_gbps"])
        for p in points:
            o = ours.get(p)
            t = torch_rows.get(p, (float("nan"), float("nan")))
            if o:
                w.writerow([p[0], p[1], round(kv_gib(*p) * 1024), o[0], o[1], o[2], o[3], t[0], t[1], copy])
    lines = [f"Device copy: {copy:.0f} GB/s (read + write). bf16, d {D}, heads {HQ}/{HKV}, Sq 1.", "",
             "| batch x KV | K+V MiB | libflashattn GB/s (splits) | FA2 GB/s | vs FA2 | of copy |",
             "|---|---|---|---|---|---|"]
    for p in points:
        if p not in ours:
            continue
        o = ours[p]
        t = torch_rows.get(p)
        ratio = f"{o[1] / t[1]:.2f}x" if t else "n/a"
        lines.append(f"| {p[0]} x {p[1] // 1024}k | {kv_gib(*p) * 1024:.0f} | {o[1]:.0f} ({o[2]}) | "
                     f"{t[1]:.0f} | {ratio} | {o[1] / copy:.0%} |" if t else
                     f"| {p[0]} x {p[1] // 1024}k | {kv_gib(*p) * 1024:.0f} | {o[1]:.0f} ({o[2]}) | n/a | n/a | {o[1] / copy:.0%} |")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, "decode.md"), "w") as f:
        f.write(text)
    print(text)
    plt = pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(9, 4.5))
    labels = [f"{b}x{l // 1024}k" for (b, l) in points if (b, l) in ours]
    xs = range(len(labels))
    ax.bar([x - 0.2 for x in xs], [ours[p][1] for p in points if p in ours], 0.4, label="libflashattn")
    ax.bar([x + 0.2 for x in xs], [torch_rows.get(p, (0, 0))[1] for p in points if p in ours], 0.4,
           label="PyTorch SDPA flash (FA2)")
    ax.axhline(copy, color="gray", linestyle="--", label="device copy")
    ax.set_xticks(list(xs))
    ax.set_xticklabels(labels, rotation=60, fontsize=8)
    ax.set_ylabel("GB/s")
    ax.set_title("Decode on H200: bf16, d128, 32/8 heads, one query row")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "decode.png"), dpi=120)


if __name__ == "__main__":
    main()
