#!/usr/bin/env python3
"""Kernels side by side from an Nsight Compute report, read from its raw page.

    ncu -i REPORT.ncu-rep --page raw --csv > raw.csv      # on the GPU machine, or any with ncu
    python3 tools/ncu_compare.py raw.csv [--names ours,fa4] [--differ 10] [--markdown]

One column per profiled kernel, in the report's order (--names labels them). The rows are the
figures that say where a kernel's time goes: its duration, cycles and clock; its launch
(grid, registers, shared memory); DRAM, L2 and tensor-pipe utilisation; the issue rate; and
each stall reason as warps stalled per issued instruction (the reasons' sum is the cycles
between a warp's instructions), largest first by the first kernel's value. --differ P then lists
every other numeric metric of the report whose values differ by more than P percent between
the first kernel and any other (largest relative difference first), which is where a metric
the table leaves out shows up. Needs no GPU and nothing but Python (the report's CSV export:
a header row of metric names, a row of units, then one row per kernel).
"""
import argparse
import csv
import sys

# (label, metric, format): the summary rows, in order.
SUMMARY = [
    ("duration (us)", "gpu__time_duration.sum", "{:.1f}"),
    ("elapsed cycles", "gpc__cycles_elapsed.max", "{:.0f}"),
    ("clock (GHz)", "gpc__cycles_elapsed.max.per_second", "{:.3f}"),
    ("grid (blocks)", "launch__grid_size", "{:.0f}"),
    ("block (threads)", "launch__block_size", "{:.0f}"),
    ("registers per thread", "launch__registers_per_thread", "{:.0f}"),
    ("shared memory per block (KB)", "launch__shared_mem_per_block", "{:.1f}"),
    ("DRAM active (% of elapsed)", "dram__cycles_active.avg.pct_of_peak_sustained_elapsed", "{:.1f}"),
    ("L2 throughput (% of elapsed)", "lts__throughput.avg.pct_of_peak_sustained_elapsed", "{:.1f}"),
    ("L2 tag requests (% of elapsed)", "lts__t_tag_requests.avg.pct_of_peak_sustained_elapsed",
     "{:.1f}"),
    ("tensor pipe active (% of active)", "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
     "{:.1f}"),
    ("issue active (% of active)", "smsp__issue_active.avg.pct_of_peak_sustained_active", "{:.1f}"),
    ("warps active (% of active)", "sm__warps_active.avg.pct_of_peak_sustained_active", "{:.1f}"),
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


def summary_rows(kernels):
    """[(label, [text per kernel])]: the SUMMARY metrics the report has, then the stall reasons
    (warps per issued instruction, largest first by the first kernel's value)."""
    rows = []
    for label, metric, fmt in SUMMARY:
        values = [number(k.get(metric, "")) for k in kernels]
        if all(v is None for v in values):
            continue
        rows.append((label, ["-" if v is None else fmt.format(v) for v in values]))
    stalls = []
    for metric in kernels[0]:
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


def differing(names, units, kernels, percent):
    """[(metric, unit, [value per kernel], relative difference)]: numeric metrics outside the
    summary whose values differ from the first kernel's by more than `percent` percent."""
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
        if any(v is None for v in values):
            continue
        base = values[0]
        scale = max(abs(v) for v in values)
        if scale == 0:
            continue
        diff = max(abs(v - base) for v in values[1:]) / scale
        if diff * 100 > percent:
            out.append((metric, units.get(metric, ""), values, diff))
    out.sort(key=lambda d: (-d[3], d[0]))
    return out


def table(header, rows, markdown):
    """Rows of cells as a markdown table or aligned text."""
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(lines)
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()
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
    print(table(["metric"] + labels,
                [[label] + cells for label, cells in summary_rows(kernels)], args.markdown))
    if args.differ is not None:
        rows = [[m, u] + [f"{v:g}" for v in vals] + [f"{d * 100:.0f}%"]
                for m, u, vals, d in differing(names, units, kernels, args.differ)]
        print()
        print(table(["metric", "unit"] + labels + ["difference"], rows, args.markdown))


if __name__ == "__main__":
    main()
