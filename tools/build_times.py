#!/usr/bin/env python3
"""Where a build's CUDA compile time goes, from nvcc's --time log (issue 18: the default build
within 10 minutes on CI's 2 cores).

    CUDAFLAGS="--time /tmp/nvcc-time.csv" cmake -S . -B build && cmake --build build -j 2
    python3 tools/build_times.py /tmp/nvcc-time.csv [--top N] [--markdown]

nvcc --time appends one CSV row per compilation phase of each .cu it compiles (parallel jobs
append to the same file): the source, the phase ("cicc", "ptxas", "gcc (preprocessing 4)",
...), its input and output, the arch (compute_90, sm_90a, or empty for host phases), the tool,
the time and its unit (ms). Prints three tables, seconds of one core each:

- phase: per phase (its name cut at " (") and arch, the seconds summed over every file and the
  share of all; the generated kernel files compile each family once per arch (the mma.sync family
  for sm_80 and sm_90, the sm90 family for sm_90a), so cicc and ptxas appear once per arch.
- kernel files: the generated files fa_fwd_<family>_hd<dim>_<n>.cu (fa_fwd_<family>_<dtype>_hd<dim>_<n>.cu
  before 2026-11-29) grouped by family
  and head dim: files, seconds, and the cicc and ptxas seconds in them; other sources as "other".
- files: the --top N (default 10) sources by seconds, with their cicc and ptxas seconds.

A build's wall time on J cores is at least the total over J. Exit status 0, or 1 when the log
holds no timed rows.
"""

import argparse
import collections
import csv
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ncu_compare import table  # noqa: E402 (tools/, beside this file)

KERNEL_FILE = re.compile(r"fa_fwd_(?P<family>[a-z0-9]+)_(?:(?P<dtype>[a-z0-9]+)_)?hd(?P<dim>\d+)_\d+\.cu$")
SCALE = {"ms": 1e-3, "s": 1.0, "us": 1e-6}


def read_rows(path):
    """[(source basename, phase, arch, seconds)] of the log's timed rows (header rows skipped)."""
    rows = []
    with open(path, newline="") as f:
        for cells in csv.reader(f):
            cells = [c.strip() for c in cells]
            if len(cells) < 8 or cells[7] not in SCALE:
                continue
            try:
                seconds = float(cells[6]) * SCALE[cells[7]]
            except ValueError:
                continue
            rows.append((os.path.basename(cells[0]) or "(nvcc)", cells[1].split(" (")[0],
                         cells[4], seconds))
    return rows


def summarise(rows, top):
    """The three tables as (title, header, rows of cells)."""
    total = sum(r[3] for r in rows)
    by_phase = collections.Counter()
    per_file = collections.defaultdict(collections.Counter)
    for source, phase, arch, seconds in rows:
        by_phase[(phase, arch)] += seconds
        per_file[source][phase] += seconds
        per_file[source]["all"] += seconds
    phase_rows = [[phase, arch or "-", f"{s:.1f}", f"{100 * s / total:.1f}%"]
                  for (phase, arch), s in sorted(by_phase.items(), key=lambda kv: -kv[1])]
    groups = collections.defaultdict(collections.Counter)
    for source, times in per_file.items():
        m = KERNEL_FILE.search(source)
        key = (m["family"], int(m["dim"])) if m else ("other", 0)
        groups[key]["files"] += 1
        for phase in ("all", "cicc", "ptxas"):
            groups[key][phase] += times[phase]
    group_rows = [[family, str(dim) if dim else "-", str(g["files"]), f"{g['all']:.1f}",
                   f"{g['cicc']:.1f}", f"{g['ptxas']:.1f}"]
                  for (family, dim), g in sorted(groups.items(), key=lambda kv: -kv[1]["all"])]
    file_rows = [[source, f"{t['all']:.1f}", f"{t['cicc']:.1f}", f"{t['ptxas']:.1f}"]
                 for source, t in sorted(per_file.items(), key=lambda kv: -kv[1]["all"])[:top]]
    return total, [
        ("phase", ["phase", "arch", "seconds", "share"], phase_rows),
        ("kernel files", ["family", "head dim", "files", "seconds", "cicc", "ptxas"], group_rows),
        (f"files (top {top})", ["file", "seconds", "cicc", "ptxas"], file_rows),
    ]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("log", help="the CSV that nvcc --time wrote")
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args(argv)
    try:
        rows = read_rows(args.log)
    except OSError as e:
        sys.exit(str(e))
    if not rows:
        print(f"{args.log}: no timed rows", file=sys.stderr)
        return 1
    total, tables = summarise(rows, args.top)
    print(f"{len({r[0] for r in rows})} sources, {total:.1f} s of compile time (one core)")
    for title, header, cells in tables:
        print(f"\n{title}:\n{table(header, cells, args.markdown)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
