#!/usr/bin/env python3
"""Both kernel families against PyTorch SDPA's flash (FlashAttention-2) and cuDNN backends.

    python3 tools/compare_families.py --sweep out/sweep-bf16.csv \
        --compare out/compare/results.csv --out results/

Reads a sweep of every registered kernel (flashattn_bench --all-kernels --csv, as
tools/device_check.sh's sweep step writes it) and the SDPA timings of tools/bench_compare.py's
results.csv from the same run, and reports per point of the FA-paper grid the fastest kernel of
each family (mma.sync, sm90), the SDPA backends, and the ratios of the better family to cuDNN and
FA2, with geometric means. Writes families.md and, where matplotlib is installed, families.png.
"""
import argparse
import collections
import csv
import math
import os

from bench_report import geomean, grid_chart


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweep", required=True, help="flashattn_bench --all-kernels --csv output")
    ap.add_argument("--compare", required=True, help="tools/bench_compare.py's results.csv")
    ap.add_argument("--out", required=True, help="output directory")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    best = collections.defaultdict(dict)  # point -> family -> (tflops, kernel)
    for r in csv.DictReader(open(args.sweep)):
        point = (int(r["head_dim"]), int(r["causal"]), int(r["seqlen"]))
        family = "sm90" if "sm90" in r["kernel"] else "mma.sync"
        tf = float(r["tflops"])
        if tf > best[point].get(family, (0.0, ""))[0]:
            best[point][family] = (tf, r["kernel"])
    sdpa = {}
    for r in csv.DictReader(open(args.compare)):
        point = (int(r["head_dim"]), int(r["causal"]), int(r["seqlen"]))
        sdpa[point] = (float(r["torch_flash"] or "nan"), float(r["torch_cudnn"] or "nan"))

    lines = ["| D | causal | S | sm90 family | mma.sync family | SDPA flash (FA2) | SDPA cuDNN "
             "| best / cuDNN | best / FA2 |", "|---|---|---|---|---|---|---|---|---|"]
    vs_cudnn, vs_fa2 = [], []
    for point in sorted(best):
        fams = best[point]
        sm90 = fams.get("sm90", (float("nan"), ""))[0]
        mma = fams.get("mma.sync", (float("nan"), ""))[0]
        top = max(x for x in (sm90, mma) if not math.isnan(x))
        fa2, cudnn = sdpa.get(point, (float("nan"), float("nan")))
        if not math.isnan(cudnn):
            vs_cudnn.append(top / cudnn)
        if not math.isnan(fa2):
            vs_fa2.append(top / fa2)
        d, c, s = point
        lines.append(f"| {d} | {c} | {s} | {sm90:.1f} | {mma:.1f} | {fa2:.1f} | {cudnn:.1f} | "
                     f"{top / cudnn:.3f} | {top / fa2:.3f} |")
    lines += ["", f"Best family / SDPA cuDNN: geometric mean **{geomean(vs_cudnn):.3f}**, minimum "
                  f"{min(vs_cudnn):.3f}; / SDPA flash (FA2): geometric mean "
                  f"**{geomean(vs_fa2):.3f}**, minimum {min(vs_fa2):.3f} ({len(vs_cudnn)} points)."]
    with open(os.path.join(args.out, "families.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))

    def draw(ax, d, c):
        seqlens = sorted(p[2] for p in best if p[:2] == (d, c))
        series = [
            ("sm90 family", [best[(d, c, s)].get("sm90", (math.nan,))[0] for s in seqlens]),
            ("mma.sync family", [best[(d, c, s)].get("mma.sync", (math.nan,))[0] for s in seqlens]),
            ("SDPA cuDNN", [sdpa.get((d, c, s), (math.nan, math.nan))[1] for s in seqlens]),
            ("SDPA flash (FA2)", [sdpa.get((d, c, s), (math.nan, math.nan))[0] for s in seqlens]),
        ]
        for label, ys in series:
            ax.plot(range(len(seqlens)), ys, marker="o", label=label)
        ax.set_xticks(range(len(seqlens)))
        ax.set_xticklabels([str(s) for s in seqlens])

    grid_chart(os.path.join(args.out, "families.png"), sorted({p[0] for p in best}), draw)

if __name__ == "__main__":
    main()
