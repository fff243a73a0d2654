#!/usr/bin/env python3
"""Where kernels' instructions and warp stall samples go, per main-loop iteration, from an Nsight
Compute report's SASS source page.

    ncu -i REPORT.ncu-rep --page source --csv --print-source sass > sass.csv   # where ncu is
    python3 tools/ncu_source.py sass.csv [--names ours,fa4] [--top N] [--markdown]

The page holds, for each profiled kernel in the report's order, a "Kernel Name" line, a header
row and one row per SASS instruction (its address, its text, the warp instructions it executed,
the warp stall samples that landed on it, split by reason in the stall_* columns). One column per
kernel in each table (--names labels them; by default the first 60 characters of the name):

- kernel: warp instructions executed, warp stall samples and static instructions, then the main
  loop: the instructions whose executed count is the one most instructions share among those
  executed at least 10% as often as the most executed one (of equal shares, the larger count),
  looked for among the consumer warpgroups' instructions where the kernel reallocates registers
  (see warp roles below: an e4m3 cache's converters wait in a loop that outruns the key loop).
  That count is the loop's iterations (warp-iterations: per warp, summed over warps); the table
  gives it, the loop's static instructions and the share of the kernel's samples in the loop.
- opcode: per opcode (the instruction's first word after any predicate such as @!P0, cut at the
  first ".": HGMMA.64x80x16.F32.BF16 is HGMMA), warp instructions per loop iteration over the
  whole kernel (all it executed over the loop count, so code outside the loop counts amortised)
  and its share of the kernel's samples. The --top N (default 30) opcodes most frequent in the
  first kernel, then "all"; an opcode a kernel lacks shows 0.
- stall reason: each stall_* column's share of the kernel's samples, largest first by the first
  kernel. The page has no column for some reasons (samples waiting on a wgmma land in none), so
  the shares need not add up to 100: "(no stall_ column)" is the rest.
- loop phase (one table per kernel whose loop holds wgmma: HGMMA, or QGMMA in FP8 kernels): the
  loop's instructions in address order, split at wgmma groups. "before first wgmma group" runs
  up to the first wgmma; a group starts at a wgmma whose shape (64x80x16) differs from the
  previous one's, or that follows a wgmma carrying gsb0 (which closes a group), and is named by
  its shape ("64x80x16 group"); the instructions after a group's closing wgmma, up to the next
  group, are "after 64x80x16 group". A name can recur when the loop issues two groups of a
  shape. Each phase's static instructions and share of the kernel's samples.
- warp roles (one table per kernel that reallocates registers): the code from a
  USETMAXREG.TRY_ALLOC to the next USETMAXREG is the consumer warpgroups', from a
  USETMAXREG.DEALLOC the producer's, before the first one the prologue; per role its warp stall
  samples, then each stall reason's samples (largest first over the kernel), so the consumers'
  waits read apart from a producer's (whose warps take samples as any other warp does).

--markdown prints Markdown tables, otherwise aligned text. Needs no GPU and nothing but Python.
"""
import argparse
import csv
import sys
from dataclasses import dataclass, field

from ncu_compare import table  # the same tables as the raw page's tool

ADDRESS = "Address"
SOURCE = "Source"
EXECUTED = "Instructions Executed"
SAMPLES = "Warp Stall Sampling (All Samples)"
STALL_PREFIX = "stall_"
LOOP_FLOOR = 0.10  # of the most executed instruction's count: below it, not loop candidates
OTHER_STALLS = "(no stall_ column)"
REALLOC = "USETMAXREG"  # setmaxnreg: TRY_ALLOC in the consumers, DEALLOC in the producer
# wgmma's SASS opcodes: 16-bit (HGMMA), e4m3/e5m2 (QGMMA), 8-bit integer (IGMMA), 1-bit (BGMMA).
WGMMA = ("HGMMA", "QGMMA", "IGMMA", "BGMMA")


@dataclass
class Instruction:
    """One SASS instruction's row of the page."""
    address: int
    source: str
    executed: int
    samples: int
    stalls: dict  # reason (without "stall_") -> samples

    @property
    def mnemonic(self):
        """The first word after any predicate (@P0, @!PT): "HGMMA.64x80x16.F32.BF16"."""
        words = self.source.split()
        if words and words[0].startswith("@"):
            words = words[1:]
        return words[0] if words else ""

    @property
    def opcode(self):
        """The mnemonic up to its first ".": "HGMMA"."""
        return self.mnemonic.split(".")[0]


@dataclass
class Kernel:
    """One kernel's block of the page: its name and its instructions in the page's order."""
    name: str
    instructions: list = field(default_factory=list)


def count(text):
    """A page's count as an int: thousands separators dropped, "-" or empty as 0."""
    text = text.replace(",", "").strip()
    return int(float(text)) if text and text != "-" else 0


def read_page(path):
    """The source page's kernels in report order, each with its instructions."""
    kernels = []
    header = None
    with open(path, newline="") as f:
        for line, row in enumerate(csv.reader(f), 1):
            if not any(cell.strip() for cell in row):
                continue
            if row[0] == "Kernel Name":
                kernels.append(Kernel(row[1] if len(row) > 1 else f"kernel {len(kernels)}"))
                header = None
            elif row[0] == ADDRESS:
                missing = [c for c in (SOURCE, EXECUTED, SAMPLES) if c not in row]
                if missing or not kernels:
                    raise ValueError(f"{path}:{line}: not a source page's header row "
                                     f"(no kernel name before it, or lacks {missing})")
                header = row
            elif header is None:
                raise ValueError(f"{path}:{line}: an instruction row without a header row")
            else:
                kernels[-1].instructions.append(instruction(dict(zip(header, row))))
    kernels = [k for k in kernels if k.instructions]
    if not kernels:
        raise ValueError(f"{path}: no kernel with instructions found")
    for k in kernels:
        if not any(i.executed for i in k.instructions):  # no loop to count iterations of
            raise ValueError(f"{path}: kernel {k.name[:60]} executed no instructions")
    return kernels


def instruction(cells):
    """One instruction from its row ({column: text}). The "(Not Issued)" stall columns count a
    subset of the same samples again, so only the plain ones are kept."""
    stalls = {c[len(STALL_PREFIX):]: count(v) for c, v in cells.items()
              if c.startswith(STALL_PREFIX) and not c.endswith("(Not Issued)")}
    return Instruction(int(cells[ADDRESS], 16), cells[SOURCE].strip(), count(cells[EXECUTED]),
                       count(cells[SAMPLES]), stalls)


def roles(kernel):
    """{"prologue", "consumers", "producer": instructions in address order} split at the
    kernel's USETMAXREG instructions, or {} without any. Each starts a role that runs, in address
    order, to the next one: a TRY_ALLOC the consumers', any other (DEALLOC) the producer's. That
    is how ptxas lays out this library's sm90 kernels (the consumers' code after their
    TRY_ALLOC, the producer's after its DEALLOC); code it placed elsewhere, out of line, counts
    with the role before it."""
    out, role = {}, None
    for i in sorted(kernel.instructions, key=lambda i: i.address):
        if i.opcode == REALLOC:
            role = "consumers" if "TRY_ALLOC" in i.mnemonic else "producer"
        out.setdefault(role or "prologue", []).append(i)
    return out if role else {}


def main_loop(kernel):
    """(iterations, the loop's instructions in address order): the executed count most
    instructions share among those executed at least LOOP_FLOOR as often as the most executed
    (of equal shares, the larger count), among the consumers' instructions where roles() finds
    them."""
    pool = roles(kernel).get("consumers") or kernel.instructions  # (its TRY_ALLOC executed)
    top = max(i.executed for i in pool)
    shared = {}
    for i in pool:
        if i.executed >= LOOP_FLOOR * top:
            shared[i.executed] = shared.get(i.executed, 0) + 1
    iterations = max(shared, key=lambda c: (shared[c], c))
    loop = sorted((i for i in pool if i.executed == iterations), key=lambda i: i.address)
    return iterations, loop


def share(part, whole):
    """part as a percentage of whole, 0 where whole is."""
    return 100.0 * part / whole if whole else 0.0


def summary(kernel):
    """{figure: value} for the kernel table."""
    iterations, loop = main_loop(kernel)
    samples = sum(i.samples for i in kernel.instructions)
    return {
        "warp instructions executed": sum(i.executed for i in kernel.instructions),
        "warp stall samples": samples,
        "static instructions": len(kernel.instructions),
        "loop iterations (warp-iterations)": iterations,
        "loop static instructions": len(loop),
        "loop samples, of kernel (%)": share(sum(i.samples for i in loop), samples),
    }


def opcodes(kernel):
    """{opcode: (warp instructions per loop iteration, % of the kernel's samples)}."""
    iterations, _ = main_loop(kernel)
    samples = sum(i.samples for i in kernel.instructions)
    executed, sampled = {}, {}
    for i in kernel.instructions:
        executed[i.opcode] = executed.get(i.opcode, 0) + i.executed
        sampled[i.opcode] = sampled.get(i.opcode, 0) + i.samples
    return {op: (executed[op] / iterations, share(sampled[op], samples)) for op in executed}


def stalls(kernel):
    """{reason: % of the kernel's samples}, OTHER_STALLS being the samples in no stall_ column."""
    samples = sum(i.samples for i in kernel.instructions)
    per_reason = {}
    for i in kernel.instructions:
        for reason, n in i.stalls.items():
            per_reason[reason] = per_reason.get(reason, 0) + n
    out = {reason: share(n, samples) for reason, n in per_reason.items()}
    out[OTHER_STALLS] = share(samples - sum(per_reason.values()), samples)
    return out


def phases(loop, samples):
    """[(phase, static instructions, % of the kernel's `samples`)] of the loop's instructions in
    address order (see the module's manual), or [] where the loop holds no wgmma."""
    if not any(i.opcode in WGMMA for i in loop):
        return []
    split = [["before first wgmma group", 0, 0]]
    shape, closed = None, False
    for i in loop:
        if i.opcode in WGMMA:
            this = i.mnemonic.split(".")[1]  # HGMMA.64x80x16.F32.BF16, QGMMA.64x192x32.F32.E4M3
            if this != shape or closed:
                split.append([f"{this} group", 0, 0])
            shape, closed = this, "gsb0" in i.source
        elif closed and split[-1][0] != f"after {shape} group":
            split.append([f"after {shape} group", 0, 0])
        split[-1][1] += 1
        split[-1][2] += i.samples
    return [(name, n, share(s, samples)) for name, n, s in split if n]


def role_rows(kernel):
    """(role names, rows) of the warp-role table: "samples", then each stall reason's samples per
    role, largest first over the kernel, OTHER_STALLS last; (None, None) without roles."""
    split = roles(kernel)
    if not split:
        return None, None
    names = list(split)
    per_role = {}
    for name, instructions in split.items():
        per_role[name] = {}
        for i in instructions:
            for reason, n in i.stalls.items():
                per_role[name][reason] = per_role[name].get(reason, 0) + n
    reasons = sorted(set().union(*per_role.values()),
                     key=lambda r: (-sum(t.get(r, 0) for t in per_role.values()), r))
    samples = {name: sum(i.samples for i in split[name]) for name in names}
    rows = [["samples"] + [str(samples[n]) for n in names]]
    rows += [[r] + [str(per_role[n].get(r, 0)) for n in names] for r in reasons]
    rows.append([OTHER_STALLS] + [str(samples[n] - sum(per_role[n].values())) for n in names])
    return names, rows


def opcode_rows(kernels, top):
    """Rows of the opcode table: the `top` opcodes most executed per iteration by the first
    kernel (then by the others'), then "all"."""
    per_kernel = [opcodes(k) for k in kernels]
    names = set().union(*per_kernel)
    order = sorted(names, key=lambda op: ([-t.get(op, (0, 0))[0] for t in per_kernel], op))
    rows = []
    for op in order[:top]:
        cells = [op]
        for t in per_kernel:
            per_iteration, sampled = t.get(op, (0.0, 0.0))
            cells += [f"{per_iteration:.2f}", f"{sampled:.1f}"]
        rows.append(cells)
    cells = ["all"]
    for t in per_kernel:
        cells += [f"{sum(v[0] for v in t.values()):.2f}",
                  f"{sum(v[1] for v in t.values()):.1f}"]
    rows.append(cells)
    return rows


def stall_rows(kernels):
    """Rows of the stall table, largest share first by the first kernel."""
    per_kernel = [stalls(k) for k in kernels]
    reasons = set().union(*per_kernel)
    order = sorted(reasons, key=lambda r: ([-t.get(r, 0.0) for t in per_kernel], r))
    return [[r] + [f"{t.get(r, 0.0):.1f}" for t in per_kernel] for r in order]


def report(kernels, labels, top, markdown):
    """The tables, separated by blank lines, as one text."""
    figures = [summary(k) for k in kernels]
    rows = [[name] + [f"{f[name]:.1f}" if isinstance(f[name], float) else str(f[name])
                      for f in figures] for name in figures[0]]
    out = [table(["kernel"] + labels, rows, markdown)]
    pairs = [c for label in labels for c in (f"{label} per iteration", f"{label} samples %")]
    out.append(table(["opcode"] + pairs, opcode_rows(kernels, top), markdown))
    out.append(table(["stall reason"] + [f"{label} samples %" for label in labels],
                     stall_rows(kernels), markdown))
    for kernel, label, f in zip(kernels, labels, figures):
        split = phases(main_loop(kernel)[1], f["warp stall samples"])
        if split:
            out.append(table([f"{label} loop phase", "static instructions", "samples %"],
                             [[name, str(n), f"{s:.1f}"] for name, n, s in split], markdown))
    for kernel, label in zip(kernels, labels):
        names, rows = role_rows(kernel)
        if names:
            out.append(table([f"{label} warp role"] + names, rows, markdown))
    return "\n\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sass_csv", help="`ncu -i REPORT --page source --csv --print-source sass`")
    ap.add_argument("--names", help="comma-separated column labels, one per kernel")
    ap.add_argument("--top", type=int, default=30, metavar="N", help="opcode rows (default 30)")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args(argv)
    try:
        kernels = read_page(args.sass_csv)
        labels = args.names.split(",") if args.names else [k.name[:60] for k in kernels]
        if len(labels) != len(kernels):
            raise ValueError(f"{args.sass_csv}: --names gives {len(labels)} labels for "
                             f"{len(kernels)} kernels")
        print(report(kernels, labels, args.top, args.markdown))
    except (OSError, ValueError) as e:
        sys.exit(str(e))


if __name__ == "__main__":
    main()
