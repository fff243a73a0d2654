#!/usr/bin/env python3
"""Kernels side by side from an Nsight Compute report, read from its raw page.

    ncu -i REPORT.ncu-rep --page raw --csv > raw.csv      # on the GPU machine, or any with ncu
    python3 tools/ncu_compare.py raw.csv [--names ours,fa4] [--differ 10] [--markdown]

One column per profiled kernel, in the report's order (--names labels them). The rows are the
figures that say where a kernel's time goes, each with the unit the report gives it: its
duration, cycles and clock; its launch (grid, registers, shared memory); DRAM, L2 and
tensor-pipe utilisation; the issue rate; and each stall reason as warps stalled per issued
instruction (the issuing warp's own "selected" left out), largest first by the first kernel's
value. --differ P (two kernels or more) then lists the report's other metrics whose value for
some kernel is more than P percent above or below the first kernel's (as a ratio r, max(r, 1/r)
> 1 + P/100), each with its ratios to the first kernel, largest first; one roll-up per metric
(the average, or the sum where there is no average), and a metric a kernel lacks shows as "-"
and counts as differing. That is where a metric the table leaves out shows up. Needs no GPU and
nothing but Python (the report's CSV export: a header row of metric names, a row of units, then
one row per kernel).
"""
import argparse
import csv
import sys

# (label, metric, format): the summary rows, in order; the label gains the report's unit.
SUMMARY = [
    ("duration", "gpu__time_duration.sum", "{:.1f}"),
    ("elapsed cycles", "gpc__cycles_elapsed.max", "{:.0f}"),
    ("clock", "gpc__cycles_elapsed.max.per_second", "{:.3f}"),
    ("grid", "launch__grid_size", "{:.0f}"),
    ("block", "launch__block_size", "{:.0f}"),
    ("registers per thread", "launch__registers_per_thread", "{:.0f}"),
    ("shared memory per block", "launch__shared_mem_per_block", "{:.1f}"),
    ("DRAM active, of elapsed", "dram__cycles_active.avg.pct_of_peak_sustained_elapsed", "{:.1f}"),
    ("L2 throughput, of elapsed", "lts__throughput.avg.pct_of_peak_sustained_elapsed", "{:.1f}"),
    ("L2 tag requests, of elapsed", "lts__t_tag_requests.avg.pct_of_peak_sustained_elapsed",
     "{:.1f}"),
    ("tensor pipe active, of active",
     "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active", "{:.1f}"),
    ("issue active, of active", "smsp__issue_active.avg.pct_of_peak_sustained_active", "{:.1f}"),
    ("warps active, of active", "sm__warps_active.avg.pct_of_peak_sustained_active", "{:.1f}"),
]
STALL_PREFIX = "smsp__average_warps_issue_stalled_"
STALL_SUFFIX = "_per_issue_active.ratio"


def number(text):
    """A report value as a float (thousands separators dropped), or None when it is not one."""
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def read_report(path):
    """The raw page's CSV: (metric names, units, one {metric: text} dict per kernel)."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if len(rows) < 3:
        raise ValueError(f"{path}: expected a header row, a units row and kernel rows")
    names, units = rows[0], rows[1]
    kernels = [dict(zip(names, row)) for row in rows[2:] if any(cell.strip() for cell in row)]
    if not kernels:
        raise ValueError(f"{path}: no kernel rows")
    return names, dict(zip(names, units)), kernels


def summary_rows(names, units, kernels):
    """[(label, [text per kernel])]: the SUMMARY metrics the report has (label and the report's
    unit), then the stall reasons (warps per issued instruction, largest first by the first
    kernel's value)."""
    rows = []
    for label, metric, fmt in SUMMARY:
        values = [number(k.get(metric, "")) for k in kernels]
        if all(v is None for v in values):
            continue
        unit = units.get(metric, "").strip()
        rows.append((f"{label} ({unit})" if unit else label,
                     ["-" if v is None else fmt.format(v) for v in values]))
    stalls = []
    for metric in names:
        if metric.startswith(STALL_PREFIX) and metric.endswith(STALL_SUFFIX):
            reason = metric[len(STALL_PREFIX):-len(STALL_SUFFIX)]
            if reason == "selected":  # the issuing warp itself: 1 per instruction by definition
                continue
            values = [number(k.get(metric, "")) for k in kernels]
            stalls.append((values[0] or 0.0, reason, values))
    stalls.sort(key=lambda s: -s[0])
    for _, reason, values in stalls:
        rows.append((f"stall: {reason}",
                     ["-" if v is None else f"{v:.2f}" for v in values]))
    return rows


def spread(values):
    """The largest factor between the first value and another, max(r, 1/r) of their ratio r:
    1 where all equal, infinite where one is zero and the other not or a value is missing."""
    base = values[0]
    worst = 1.0
    for v in values[1:]:
        if base is None or v is None:
            return float("inf")
        if base == v:
            continue
        if base == 0 or v == 0 or (base < 0) != (v < 0):
            return float("inf")
        r = v / base
        worst = max(worst, r, 1 / r)
    return worst


def differing(names, units, kernels, percent):
    """[(metric, unit, [value or None per kernel], spread)]: metrics outside the summary whose
    value for some kernel is more than `percent` percent above or below the first kernel's
    (spread() > 1 + percent / 100), largest spread first. Needs two kernels or more."""
    if len(kernels) < 2:
        raise ValueError("comparing metrics needs two kernels or more")
    shown = {metric for _, metric, _ in SUMMARY}
    present = set(names)
    out = []
    for metric in names:
        parts = metric.split(".")
        # The kernel's columns (ID, Kernel Name, ...) are not metrics (a metric's name has "__");
        # of a metric's roll-ups only the average is listed (its .sum where it has no .avg).
        if "__" not in metric or metric in shown or metric.startswith(STALL_PREFIX):
            continue
        if "min" in parts or "max" in parts:
            continue
        if "sum" in parts and ".".join("avg" if p == "sum" else p for p in parts) in present:
            continue
        values = [number(k.get(metric, "")) for k in kernels]
        if all(v is None for v in values):
            continue  # text, not a number (a name, a policy)
        factor = spread(values)
        if factor > 1 + percent / 100:
            out.append((metric, units.get(metric, ""), values, factor))
    out.sort(key=lambda d: (-d[3], d[0]))
    return out


def table(header, rows, markdown):
    """Rows of cells as a markdown table or aligned text."""
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(lines)
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()
                     for r in [header] + rows)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("raw_csv", help="`ncu -i REPORT --page raw --csv` output")
    ap.add_argument("--names", help="comma-separated column labels, one per kernel")
    ap.add_argument("--differ", type=float, metavar="P",
                    help="also list other metrics differing by more than P percent")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args(argv)
    try:
        names, units, kernels = read_report(args.raw_csv)
    except (OSError, ValueError) as e:
        sys.exit(str(e))
    labels = args.names.split(",") if args.names else [
        k.get("Kernel Name", f"kernel {i}")[:40] for i, k in enumerate(kernels)]
    if len(labels) != len(kernels):
        sys.exit(f"--names gives {len(labels)} labels for {len(kernels)} kernels")
    if args.differ is not None and len(kernels) < 2:
        sys.exit(f"--differ compares kernels: {args.raw_csv} has one")
    print(table(["metric"] + labels,
                [[label] + cells for label, cells in summary_rows(names, units, kernels)],
                args.markdown))
    if args.differ is not None:
        ratios = [f"{label} / {labels[0]}" for label in labels[1:]]
        rows = []
        for metric, unit, values, _ in differing(names, units, kernels, args.differ):
            cells = ["-" if v is None else f"{v:g}" for v in values]
            base = values[0]
            for v in values[1:]:
                cells.append("-" if base in (None, 0) or v is None else f"{v / base:.2f}")
            rows.append([metric, unit] + cells)
        print()
        print(table(["metric", "unit"] + labels + ratios, rows, args.markdown))

if __name__ == "__main__":
    main()
