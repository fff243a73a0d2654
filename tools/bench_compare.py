#!/usr/bin/env python3
"""Times libflashattn against PyTorch SDPA's flash (FlashAttention-2) and cuDNN backends in one run.

    python3 tools/bench_compare.py --bench build/bench/flashattn_bench --out results/

Times flashattn_bench (the library's own kernel choice) on the FA-paper grid (hidden 2048,
batch = 16384 / seqlen, seqlen 512..16384, head dims 64/128/256, causal off and on) and, where
PyTorch is installed, torch.nn.functional.scaled_dot_product_attention with each backend forced,
the same way (3 warm-up calls, median of --iters CUDA-event timings), point by point: each
point's three timings are taken back to back, so a GPU that a previous job left hot (clocks
throttled for tens of seconds, which cost up to 19% in a 13-second pass of the grid after the GPU
tests) slows all three alike.
Writes results.csv, performance.md (the table, with ratios and geometric means) and, where
matplotlib is installed, chart.png. PyTorch and matplotlib are optional: only this script uses
them, and without them it reports libflashattn alone.
"""
import argparse
import csv
import io
import os
import subprocess
import sys

from bench_report import geomean, grid_chart

SEQLENS = [512, 1024, 2048, 4096, 8192, 16384]
HEAD_DIMS = [64, 128, 256]
TOKENS, HIDDEN = 16384, 2048


def flops(batch, heads, seqlen, d, causal):
    return 4.0 * batch * heads * seqlen * seqlen * d / (2.0 if causal else 1.0)


def run_ours(args, d, causal, seqlen):
    cmd = [args.bench, "--csv", "--dtype", args.dtype, "--iters", str(args.iters),
           "--head-dims", str(d), "--causal", str(causal), "--seqlens", str(seqlen)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    rows = {}
    for r in csv.DictReader(io.StringIO(out)):
        rows[(int(r["head_dim"]), int(r["causal"]), int(r["seqlen"]))] = (float(r["tflops"]),
                                                                          r["kernel"])
    return rows


def torch_timer(args):
    """A function timing SDPA's backends on one point, or None without PyTorch."""
    try:
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        print("PyTorch not found: reporting libflashattn alone", file=sys.stderr)
        return None
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    backends = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def time_point(d, causal, s):
        results = {}
        b, h = TOKENS // s, HIDDEN // d
        # SDPA takes (batch, heads, seq, dim); a transposed (batch, seq, heads, dim) tensor is
        # the layout libflashattn reads.
        q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=dtype).transpose(1, 2)
                   for _ in range(3))
        for name, backend in backends.items():
            try:
                with sdpa_kernel(backend):
                    for _ in range(3):
                        torch.nn.functional.scaled_dot_product_attention(q, k, v,
                                                                         is_causal=bool(causal))
                    times = []
                    for _ in range(args.iters):
                        start.record()
                        torch.nn.functional.scaled_dot_product_attention(q, k, v,
                                                                         is_causal=bool(causal))
                        stop.record()
                        stop.synchronize()
                        times.append(start.elapsed_time(stop))
                ms = sorted(times)[len(times) // 2]
                results[(name, d, causal, s)] = flops(b, h, s, d, causal) / (ms * 1e-3) / 1e12
            except RuntimeError as e:
                print(f"torch {name} d={d} causal={causal} s={s}: {e}", file=sys.stderr)
        return results

    return time_point


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", required=True, help="path to flashattn_bench")
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--head-dims", type=lambda t: [int(x) for x in t.split(",")], default=HEAD_DIMS)
    ap.add_argument("--seqlens", type=lambda t: [int(x) for x in t.split(",")], default=SEQLENS)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    ours, ref = {}, {}
    time_torch = torch_timer(args)
    for d in args.head_dims:
        for causal in (0, 1):
            for s in args.seqlens:
                ours.update(run_ours(args, d, causal, s))
                if time_torch is not None:
                    ref.update(time_torch(d, causal, s))

    with open(os.path.join(args.out, "results.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["head_dim", "causal", "seqlen", "libflashattn", "torch_flash", "torch_cudnn",
                    "kernel"])
        for (d, c, s), (tf, kernel) in sorted(ours.items()):
            w.writerow([d, c, s, tf, ref.get(("flash", d, c, s), ""), ref.get(("cudnn", d, c, s), ""),
                        kernel])

    lines = [f"TFLOP/s, {args.dtype}, FLOPs = 4·B·H·S²·D (halved for causal), batch = 16384/S, "
             "heads = 2048/D; median of CUDA-event timings.", "",
             "| D | causal | S | libflashattn | SDPA flash (FA2) | SDPA cuDNN | vs FA2 | vs cuDNN "
             "| kernel |",
             "|---|---|---|---|---|---|---|---|---|"]
    ratios, cudnn_ratios = [], []
    for (d, c, s), (tf, kernel) in sorted(ours.items()):
        fa2, cud = ref.get(("flash", d, c, s)), ref.get(("cudnn", d, c, s))
        ratio = tf / fa2 if fa2 else None
        vs_cudnn = tf / cud if cud else None
        if ratio:
            ratios.append(ratio)
        if vs_cudnn:
            cudnn_ratios.append(vs_cudnn)
        lines.append(f"| {d} | {c} | {s} | {tf:.1f} | {fa2 or float('nan'):.1f} | "
                     f"{cud or float('nan'):.1f} | {ratio or float('nan'):.3f} | "
                     f"{vs_cudnn or float('nan'):.3f} | `{kernel}` |")
    if ratios:
        lines += ["", f"Geometric mean of libflashattn / SDPA flash over {len(ratios)} points: "
                      f"**{geomean(ratios):.3f}**; minimum {min(ratios):.3f}."]
    if cudnn_ratios:
        lines += ["", f"Geometric mean of libflashattn / SDPA cuDNN over {len(cudnn_ratios)} "
                      f"points: **{geomean(cudnn_ratios):.3f}**; minimum {min(cudnn_ratios):.3f}."]
    with open(os.path.join(args.out, "performance.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))

    def draw(ax, d, c):
        series = [("libflashattn", [ours.get((d, c, s), (0, ""))[0] for s in args.seqlens])]
        for name, label in (("flash", "SDPA flash (FA2)"), ("cudnn", "SDPA cuDNN")):
            if ref:
                series.append((label, [ref.get((name, d, c, s), 0) for s in args.seqlens]))
        width = 0.8 / len(series)
        for i, (label, ys) in enumerate(series):
            ax.bar([j + i * width for j in range(len(args.seqlens))], ys, width, label=label)
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(args.seqlens))])
        ax.set_xticklabels([str(s) for s in args.seqlens])

    grid_chart(os.path.join(args.out, "chart.png"), args.head_dims, draw, dpi=90)

if __name__ == "__main__":
    main()
