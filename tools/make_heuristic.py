#!/usr/bin/env python3
"""Derives the kernel-choice table from a tuning sweep (tools/device_sweep.sh's sweep.csv).

    python3 tools/make_heuristic.py docs/data/sweep-h200-bf16.csv [later.csv ...] --arch 90 \
        --out src/cuda/heuristic_sm90.txt

Several sweeps may be given: a later one's (head dims, causal) pairs replace every point of
those pairs in the earlier ones (a re-run of some pairs with newer code). A sweep's head_dim_v
column (flashattn_bench --head-dims 192:128) keys its points apart from those of head_dim_v =
head_dim: their rows name the head dims "192:128", and the choice takes them for problems with
that value head dim (and the fallback rows of the head dim: none are written for such pairs). The table's header
records the sweeps and the options, so that the same command regenerates it exactly.
--keep-earlier D:C keeps a pair's points from the first sweep that has it, where a later sweep's
picks for that pair timed slower through the choice than the sweep predicted (sweep noise:
30 ms windows put two passes of one kernel 0.90-1.15x apart).

For each (head dim, causal, sequence length) of the sweep the fastest kernel becomes the pick for
sequences up to that length, and, where that is an sm90 kernel, the fastest mma.sync kernel the
fallback (for devices or builds without the sm90 family, and problems it does not run); per
(head dims, causal) the --candidates kernels with the best geometric mean over the lengths are
kept as extra autotuning candidates. The output is a plain table that tools/generate_kernels.py
reads: it compiles every kernel named there into the default build and emits the table as the
library's choice. Times within --tie (relative; 0.02 by default, the value the shipped sm_90
table was made with) of the best count as a tie, which goes to the kernel already picked at the
previous length, so that sweep noise does not add kernels to the build.

A sweep's points at a head dim below its kernels' own (flashattn_bench --all-kernels at a padded
dim, e.g. 72 on d 128's kernels) make the "pad" rows of that kernels' head dim: of the sm90
kernels the table names for the head dim (its picks and candidates), the --pad-kernels (2) whose
best at each point has the best geometric mean over every padded dim, mask and length (ratios
to the fastest kernel timed at the point), and per (mask, length) the one of them with the best
geometric mean over the padded dims (ties as above). The choice takes those rows for problems
below a table head dim (or its value head dim), and tools/generate_kernels.py gives the narrow
pairs (src/cuda/sm90/narrow.hpp) to those kernels only: a pair is one more instantiation of a
kernel, 42% of the sm90 compile when every kernel carried them (docs/performance.md).
"""
import argparse
import collections
import csv
import itertools
import math


def strip_dtype(name):
    """'(BF16, 128, ...): ...' -> '128, ...): ...' (the table applies to both 16-bit dtypes)."""
    return name.split(", ", 1)[1]


def kernel_head_dim(kernel):
    """'128, 128, 64, 12): ...' (dtype stripped) -> 128."""
    return int(kernel.split(",", 1)[0])


def geomean(values):
    return math.exp(sum(map(math.log, values)) / len(values))


def code_of(kernel):
    """The code a table's kernel runs padded dims on: a 16-bit sm90 kernel below d 192 without
    `persistent` runs its narrow pairs on its persistent twin's (src/cuda/sm90/config.hpp's
    pairs_persistent; the tables are 16-bit), so the twins carry the pairs as one."""
    if "sm90" in kernel and int(kernel.split(",")[0]) < 192 and \
            not kernel.endswith("+persistent"):
        return kernel + "+persistent"
    return kernel


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sweeps", nargs="+", metavar="sweep",
                    help="CSV written by flashattn_bench --all-kernels --csv")
    ap.add_argument("--arch", type=int, required=True, help="compute capability, e.g. 90")
    ap.add_argument("--out", required=True)
    ap.add_argument("--candidates", type=int, default=3)
    ap.add_argument("--tie", type=float, default=0.02)
    ap.add_argument("--pad-kernels", type=int, default=2,
                    help="kernels per head dim for the head dims below it (the pad rows)")
    ap.add_argument("--keep-earlier", action="append", default=[], metavar="D:C",
                    help="(head dim, causal) pair that later sweeps do not replace")
    ap.add_argument("--exclude", action="append", default=[], metavar="KERNEL",
                    help="a kernel (its name without the dtype, as the table writes it) left out "
                         "of every sweep: one the build no longer has")
    args = ap.parse_args()
    excluded, seen = set(args.exclude), set()
    keep = set()
    for pair in args.keep_earlier:
        try:
            d, causal = (int(x) for x in pair.split(":"))
        except ValueError:
            ap.error(f"--keep-earlier {pair!r}: expected HEAD_DIM:CAUSAL, e.g. 128:1")
        keep.add((d, causal))
    if args.pad_kernels < 1:
        ap.error(f"--pad-kernels {args.pad_kernels}: at least 1")

    # (d, dv, causal, seqlen) -> {kernel: tflops}; a "pair" below is (d, dv, causal).
    by_point = collections.defaultdict(dict)
    # (kernels' head dim, causal, seqlen, padded head dim) -> {kernel: tflops}: a later sweep's
    # points of a head dim replace the earlier's.
    pad_points = {}
    for sweep in args.sweeps:
        points = collections.defaultdict(dict)
        padded = collections.defaultdict(dict)
        with open(sweep) as f:
            for r in csv.DictReader(f):
                d = int(r["head_dim"])
                dv = int(r.get("head_dim_v") or d)
                kernel = strip_dtype(r["kernel"])
                if kernel in excluded:
                    seen.add(kernel)
                    continue
                if kernel_head_dim(kernel) != d:
                    if dv == d:
                        key = (kernel_head_dim(kernel), int(r["causal"]), int(r["seqlen"]), d)
                        padded[key][kernel] = float(r["tflops"])
                    continue
                key = (d, dv, int(r["causal"]), int(r["seqlen"]))
                points[key][kernel] = float(r["tflops"])
        for key in [k for k in pad_points if k[0] in {k[0] for k in padded}]:
            del pad_points[key]
        pad_points.update(padded)
        held = {k[:3] for k in by_point} & {(d, d, c) for d, c in keep}
        pairs = {k[:3] for k in points} - held
        for key in [k for k in by_point if k[:3] in pairs]:
            del by_point[key]
        by_point.update({k: v for k, v in points.items() if k[:3] in pairs})
    unseen = excluded - seen
    if unseen:
        ap.error("--exclude names no kernel of the sweeps: " + "; ".join(sorted(unseen)))

    lines = [f"# Kernel choice for sm_{args.arch}, derived by tools/make_heuristic.py from",
             *(f"#   {sweep}" for sweep in args.sweeps),
             f"# with --tie {args.tie} --candidates {args.candidates}"
             + f" --pad-kernels {args.pad_kernels}"
             + "".join(f" --keep-earlier {d}:{c}" for d, c in sorted(keep))
             + " (a later sweep's",
             "# (head_dims, causal) pairs replace the earlier's)"
             + ("" if excluded else "; regenerate, do not edit. Columns:"),
             *(f"# --exclude '{kernel}'" for kernel in sorted(excluded)),
             *(["# (kernels the build no longer has); regenerate, do not edit. Columns:"]
               if excluded else []),
             "#   pick <head_dim>[:<head_dim_v>] <causal> <max_seqlen> | <config without dtype>",
             "#     the kernel for max(seqlen_q, seqlen_k) <= max_seqlen (the last row of a",
             "#     (head_dims, causal) also serves longer sequences)",
             "#   fallback <head_dim> <causal> <max_seqlen> | <config>: the mma.sync kernel where",
             "#     the pick is of the sm90 family and cannot run (head_dim_v = head_dim only)",
             "#   candidate <head_dim>[:<head_dim_v>] <causal> | <config>: also built, also timed",
             "#     by fa_autotune()",
             "#   pad <head_dim> <causal> <max_seqlen> | <config>: the kernel for head dims (or",
             "#     value head dims) below the row's that take its rows, from points at such",
             "#     dims; its kernels alone carry the narrow pairs"]

    def rows(kind, d, dv, causal, seqlens, keep):
        previous, out = None, []
        dims = str(d) if dv == d else f"{d}:{dv}"
        for s in seqlens:
            times = {k: t for k, t in by_point[(d, dv, causal, s)].items() if keep(k)}
            best = max(times, key=times.get)
            if previous in times and times[previous] >= times[best] * (1 - args.tie):
                best = previous
            out.append(f"{kind} {dims} {causal} {s} | {best}")
            previous = best
        return out

    def pad_rows(d, causal, kernels):
        """The pad rows of (d, causal): per length the best of `kernels` over the padded dims."""
        previous, out = None, []
        for s in sorted({k[2] for k in pad_points if k[:2] == (d, causal)}):
            dims = [k for k in pad_points if k[:3] == (d, causal, s)]
            score = {kernel: geomean([pad_points[k][kernel] / max(pad_points[k].values())
                                      for k in dims]) for kernel in kernels}
            best = max(kernels, key=lambda kernel: (score[kernel], kernel))
            if previous is not None and score[previous] >= score[best] * (1 - args.tie):
                best = previous
            out.append(f"pad {d} {causal} {s} | {best}")
            previous = best
        return out

    def pad_kernels(d, named):
        """Of the sm90 kernels `named` for head dim d, timed at every padded point of d, those of
        the --pad-kernels codes (code_of: twins compiled as one) whose best per point has the
        best geometric mean (then minimum)."""
        keys = [k for k in pad_points if k[0] == d]
        timed = sorted(k for k in named if "sm90" in k and all(k in pad_points[p] for p in keys))
        codes = collections.defaultdict(list)
        for k in timed:
            codes[code_of(k)].append(k)
        best = None
        for group in itertools.combinations(sorted(codes), min(args.pad_kernels, len(codes))):
            kernels = [k for code in group for k in codes[code]]
            ratios = [max(pad_points[p][k] for k in kernels) / max(pad_points[p].values())
                      for p in keys]
            score = (geomean(ratios), min(ratios))
            if best is None or score > best[0]:
                best = (score, kernels)
        return tuple(sorted(best[1])) if best else ()

    blocks = []
    for d, dv, causal in sorted({k[:3] for k in by_point}, key=lambda k: (k[0], -k[1], k[2])):
        block = []
        seqlens = sorted(k[3] for k in by_point if k[:3] == (d, dv, causal))
        picks = rows("pick", d, dv, causal, seqlens, lambda k: True)
        block += picks
        # Fallback rows for head_dim_v = head_dim only: the mma.sync kernels hold V in d_head
        # columns, so a smaller value head dim runs best where the head dim's does, and the
        # choice takes those rows for it (a sweep of the sm90 set times only the mma.sync
        # decode tiles).
        if any("sm90" in p for p in picks) and dv == d:
            block += rows("fallback", d, dv, causal, seqlens, lambda k: "sm90" not in k)
        scores = collections.defaultdict(list)
        for s in seqlens:
            top = max(by_point[(d, dv, causal, s)].values())
            for kernel, t in by_point[(d, dv, causal, s)].items():
                scores[kernel].append(t / top)
        ranked = sorted((math.exp(sum(map(math.log, v)) / len(v)), k)
                        for k, v in scores.items() if len(v) == len(seqlens))
        dims = str(d) if dv == d else f"{d}:{dv}"
        for _, kernel in reversed(ranked[-args.candidates:]):
            block.append(f"candidate {dims} {causal} | {kernel}")
        blocks.append(((d, dv, causal), block))
    # The pad rows' kernels: of those the rows of (d, d) name, either mask.
    named = collections.defaultdict(set)
    for (d, dv, _), block in blocks:
        if dv == d:
            named[d].update(line.split(" | ")[1] for line in block
                            if line.startswith(("pick", "candidate")))
    chosen = {d: pad_kernels(d, named[d]) for d in {k[0] for k in pad_points}}
    for (d, dv, causal), block in blocks:
        lines += block
        if dv == d and chosen.get(d):
            lines += pad_rows(d, causal, chosen[d])
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
