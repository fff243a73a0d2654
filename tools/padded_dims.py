#!/usr/bin/env python3
"""Head dims run by a larger compiled one, against that one: reads a flashattn_bench CSV
(`--csv`, every dim at the same shapes: `--heads N`) and prints, for each head dim that is not
in --compiled, its TFLOP/s over the TFLOP/s of the smallest compiled dim at or above it at each
(causal, seqlen) point both hold, with their geometric mean and minimum (issue 18's bar: 0.85).

    flashattn_bench --head-dims 8,16,...,256 --heads 32 --csv > dims.csv
    python3 tools/padded_dims.py dims.csv --compiled 16,32,48,64,80,96,112,128,144,160,176,192,224,256

The compiled dims of the sm90 family are its kernels' head dims and their narrow pairs
(src/cuda/sm90/narrow.hpp's Narrow). Rows whose head_dim_v differs from head_dim are left out.
--csv-out writes one row per padded dim and point.
"""
import argparse
import collections
import csv
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_report import geomean  # noqa: E402


def parse_dims(text):
    dims = []
    for part in filter(None, text.split(",")):
        if not part.isdigit() or int(part) < 1:
            raise ValueError(f"bad --compiled entry '{part}' (expected positive integers)")
        dims.append(int(part))
    if not dims:
        raise ValueError("--compiled names no head dim")
    return sorted(set(dims))


def read_points(path):
    """{head_dim: {(causal, seqlen): tflops}} of the rows whose value head dim is the head dim."""
    points = collections.defaultdict(dict)
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            d = int(row["head_dim"])
            if int(row.get("head_dim_v") or d) != d:
                continue
            points[d][(int(row["causal"]), int(row["seqlen"]))] = float(row["tflops"])
    return points


def ratios(points, compiled):
    """[(dim, compiled dim, [(causal, seqlen, ratio), ...])] for every padded dim in `points`
    with a compiled dim at or above it that `points` holds too."""
    out = []
    for d in sorted(points):
        if d in compiled:
            continue
        above = [c for c in compiled if c > d]
        if not above or above[0] not in points:
            continue
        c = above[0]
        shared = sorted(set(points[d]) & set(points[c]))
        out.append((d, c, [(causal, s, points[d][(causal, s)] / points[c][(causal, s)])
                           for causal, s in shared]))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", help="flashattn_bench --csv output")
    ap.add_argument("--compiled", required=True,
                    help="comma-separated head dims the build compiles (kernels and narrow pairs)")
    ap.add_argument("--csv-out", help="write one row per padded dim and point here")
    args = ap.parse_args(argv)
    try:
        compiled = parse_dims(args.compiled)
    except ValueError as e:
        ap.error(str(e))
    table = ratios(read_points(args.csv), compiled)
    if not table:
        sys.exit(f"padded_dims.py: {args.csv} holds no dim below a compiled one it also holds")
    print("head_dim  compiled  points  geomean  min    (TFLOP/s over the compiled dim's)")
    for d, c, rows in table:
        rs = [r for _, _, r in rows]
        print(f"{d:<9} {c:<9} {len(rs):<7} {geomean(rs):<8.3f} {min(rs) if rs else float('nan'):.3f}")
    if args.csv_out:
        with open(args.csv_out, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["head_dim", "compiled", "causal", "seqlen", "ratio"])
            for d, c, rows in table:
                for causal, s, r in rows:
                    w.writerow([d, c, causal, s, f"{r:.4f}"])


if __name__ == "__main__":
    main()
