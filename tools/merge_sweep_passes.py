#!/usr/bin/env python3
"""Merges passes of one tuning sweep into one sweep: each point's mean time and TFLOP/s.

    python3 tools/merge_sweep_passes.py pass1.csv pass2.csv [...] --out sweep.csv

Each pass is the CSV `flashattn_bench --all-kernels --csv` writes, run back to back on one
machine with the same arguments. Two passes of short windows put one kernel 0.90-1.15x apart
(docs/performance.md), and make_heuristic.py's later-sweep-replaces rule would keep only the
last; their mean is what the table should be derived from. The passes must hold the same points
(kernel, dtype, head dim, causal, length, batch, heads, and the value head dim where the passes
have that column): a point missing from one pass is a failed or cut-short run, and the tool
refuses it by name rather than averaging fewer samples.
Rows keep the first pass's order; ms is written to 4 decimals and TFLOP/s to 1, as the bench does.
"""
import argparse
import csv
import sys

_KEY = ("kernel", "dtype", "head_dim", "causal", "seqlen", "batch", "heads")
_COLUMNS = (*_KEY, "ms", "tflops")
_VALUE_DIM = "head_dim_v"  # written after tflops by benches that time head_dim_v != head_dim


def read_pass(path):
    """(points keyed by _KEY and, where the pass has it, head_dim_v; whether it has it)"""
    points = {}
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in _COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: no column {', '.join(missing)} "
                             f"(expected {','.join(_COLUMNS)})")
        value_dim = _VALUE_DIM in reader.fieldnames
        key_columns = (*_KEY, _VALUE_DIM) if value_dim else _KEY
        for line, row in enumerate(reader, start=2):
            if None in row.values() or None in row:
                raise ValueError(f"{path}:{line}: the row has {len(row)} fields where "
                                 f"{len(reader.fieldnames)} are named (a cut-short pass?)")
            key = tuple(row[c] for c in key_columns)
            if key in points:
                raise ValueError(f"{path}:{line}: the point {key} appears twice")
            try:
                points[key] = (float(row["ms"]), float(row["tflops"]))
            except ValueError:
                raise ValueError(f"{path}:{line}: ms {row['ms']!r} or tflops {row['tflops']!r} "
                                 "is not a number") from None
    return points, value_dim


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("passes", nargs="+", metavar="pass", help="CSV of one pass")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    if len(args.passes) < 2:
        ap.error("give two passes or more (one pass is already a sweep)")
    try:
        read = [read_pass(p) for p in args.passes]
    except (OSError, ValueError) as e:
        print(f"merge_sweep_passes.py: {e}", file=sys.stderr)
        return 2
    value_dim = read[0][1]
    for path, (_, has) in zip(args.passes[1:], read[1:]):
        if has != value_dim:
            print(f"merge_sweep_passes.py: {path} {'has' if has else 'lacks'} the column "
                  f"{_VALUE_DIM}, which {args.passes[0]} {'lacks' if has else 'has'}",
                  file=sys.stderr)
            return 2
    passes = [points for points, _ in read]
    first = passes[0]
    for path, points in zip(args.passes[1:], passes[1:]):
        lacks, extra = first.keys() - points.keys(), points.keys() - first.keys()
        if lacks or extra:
            key, verb = (min(lacks), "lacks") if lacks else (min(extra), "has")
            print(f"merge_sweep_passes.py: {path} {verb} {key}, which {args.passes[0]} "
                  f"{'has' if lacks else 'lacks'}", file=sys.stderr)
            return 2
    with open(args.out, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")  # as the bench writes its CSV
        w.writerow((*_COLUMNS, _VALUE_DIM) if value_dim else _COLUMNS)
        for key in first:
            ms = sum(p[key][0] for p in passes) / len(passes)
            tflops = sum(p[key][1] for p in passes) / len(passes)
            w.writerow([*key[:len(_KEY)], f"{ms:.4f}", f"{tflops:.1f}", *key[len(_KEY):]])
    return 0


if __name__ == "__main__":
    sys.exit(main())
