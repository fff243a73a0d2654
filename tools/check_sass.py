#!/usr/bin/env python3
"""Checks the SASS of the sm90 forward kernels for what the source cannot show: that each
overlapped kernel's softmax runs while its warpgroup's previous P V is on the tensor cores, that
the kernels of head dims up to 128 step their wgmma descriptors in uniform registers, and that no
kernel touches local memory (spills).

In the key loop of an overlapped kernel (src/cuda/sm90/mainloop_mma.cuh) a warpgroup waits for
block it + 1's Q K^T (`WARPGROUP.DEPBAR.LE gsb0, 0x1`), runs that block's softmax, then waits for
block it's P V (`WARPGROUP.DEPBAR.LE gsb0, 0x0`). ptxas is free to move the second wait up: it
did, to the top of the basic block holding the softmax, and every overlapped kernel ran its
exponentials after its own P V without a test noticing (docs/performance.md, "the softmax under
the same warpgroup's P V"). Here, per kernel and in address order, the `MUFU.EX2` instructions
between a `0x1` wait and the next `0x0` wait are counted, and those after such a `0x0` wait
before the next HGMMA or QGMMA (an FP8 kernel's); an overlapped kernel fails with fewer than
B_c / 2 of them in the first place (a thread's share of one key block's exponentials; twice
that where soft-capping's tanhf adds its own) or any in the second. The FP8 d 256 tiles' plain
instantiation splits its softmax on purpose (kernel.cuh's kSplitSoftmax: the row maxima before
the wait for P V, the exponentials and P's packing after it; 1.018x on the H200,
docs/performance.md session 65): it fails with fewer than B_c / 2 FMNMX (the maxima) between
the two waits or fewer than B_c / 2 exponentials after the second.
At d 64 and 128 the consumers build each block's descriptors once and step them by constants
(mainloop_mma.cuh's Slot::kStepped), in uniform registers. ptxas may instead keep them in
vector registers and move each into a uniform one (R2UR) before its HGMMA: a per-tile Q
buffer address did that to most descriptors of the key loop, V's included, and ran d 64 at
2k-16k 5-7.5% slower with no spill or test to show it (docs/performance.md, "a second Q
buffer").
Here every HGMMA but the first of its group (after WARPGROUP.ARRIVE) that an R2UR precedes
since the previous HGMMA is counted; a kernel of d <= 128 fails with any (d 192 and 256 build a
descriptor per step by design: counted, not failed). Each kernel's stack frame (`cuobjdump
-res-usage`: bytes of spills and local arrays) is reported beside it, with its local-memory
instructions (STL, LDL: spills) counted per side of the register split: the consumer warpgroups'
code comes first in a kernel's SASS and the producer's starts at its `USETMAXREG.DEALLOC`
(kernel.cuh). A kernel with any fails: since session 72 no sm90 kernel of the default build
touches local memory (nvcc 13.0's ptxas: 0 bytes of spills and stack in all 182 bf16, fp16 and
e4m3 functions; docs/performance.md, sessions 70-72), and a spill in a key loop costs a store
and a load per block (1.11x from session 70's cuts on soft-capped and ALiBi problems).
--allow-local-memory counts it without failing, for kernel sets and toolkits that were not
measured so (the `sm90_sass` test passes it outside the default set and nvcc 13.0).
Nor may a kernel's products be serialized: where ptxas finds a wgmma's accumulators defined by
other instructions while it may run, or too few registers, it waits for each wgmma before the
next one (ptxas's C7515 and C7512 "Potential Performance Loss", which the build prints only
under -v) and the kernel runs correct but slow. Three forms of a change in session 78 compiled
so (docs/performance.md). In SASS each HGMMA or QGMMA is then followed by a
`WARPGROUP.DEPBAR` before the next one: a kernel fails where more than half of the gaps between
consecutive ones hold such a wait (at most 15% in the 308 sm90 forward functions of the default
build's fp16, bf16 and e4m3 at d 64-256: only the gaps between groups; 39 of 39 in a serialized
d 128 kernel).
tests/tools/test_check_sass.py checks this reading on listings written in cuobjdump's format.

    python3 tools/check_sass.py build/libflashattn.so.0 [more libraries or cubins] [--csv FILE]
        [--allow-local-memory]

cuobjdump (and the nvdisasm it runs) come from FA_CUOBJDUMP, PATH, or the CUDA Toolkit of the
nvcc on PATH (a toolkit without them, as on a compile-only machine, can take both from NVIDIA's
wheels: `pip download --no-deps nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm`, unzip them into
one folder, FA_CUOBJDUMP=<folder>/nvidia/cu13/bin/cuobjdump, as `tools/setup.sh test` does; the
cubins of tools/compile_sm90.py, which compiles the instantiations without a GPU, are then
checked the same way); the exit status is 0 when every kernel passes the four checks, 1 when
one fails, 2 when no sm90 forward kernel or no cuobjdump was found.
"""

import argparse
import csv
import os
import re
import shutil
import subprocess
import sys

# forward_kernel<Tile<DType, D, B_c, stages, consumers, overlap, pingpong, persistent>,
#                kGeneral, kQkCols, kVCols (0, 0: the kernel's own dims; else a narrow pair), kE4M3>
#                (src/cuda/sm90/kernel.cuh, tile.cuh), as mangled.
KERNEL = re.compile(
    r"_ZN2fa4cuda4sm9014forward_kernelINS1_4TileILNS_5DTypeE(\d)ELi(\d+)ELi(\d+)ELi(\d+)ELi(\d+)"
    r"ELb([01])ELb([01])ELb([01])EEELb([01])ELi(\d+)ELi(\d+)ELb([01])E")
DTYPES = {"1": "fp16", "2": "bf16", "4": "e4m3"}
WAIT = re.compile(r"WARPGROUP\.DEPBAR\.LE\s+gsb0,\s*0x(\d)")


def find_cuobjdump():
    """The cuobjdump binary to run, or None."""
    candidates = [os.environ.get("FA_CUOBJDUMP"), shutil.which("cuobjdump")]
    nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc"
                                    if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
    if nvcc:
        candidates.append(os.path.join(os.path.dirname(os.path.realpath(nvcc)), "cuobjdump"))
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def describe(match):
    """A kernel's config from its mangled name, in the registry's spelling where it can."""
    dt, d, bc, stages, consumers, overlap, pingpong, persistent, general, qk_cols, v_cols, e4m3 = \
        match.groups()
    knobs = ["sm90", "stages_" + stages] + [k for k, on in (
        ("overlap", overlap), ("pingpong", pingpong), ("persistent", persistent)) if on == "1"]
    variant = "e4m3" if e4m3 == "1" else f"narrow {qk_cols}:{v_cols}" if qk_cols != "0" else \
        "general" if general == "1" else "plain"
    rows = 64 * int(consumers)
    return {
        "d": int(d),
        "kernel": "(%s, %s, %d, %s, %d): %s" % (DTYPES.get(dt, "dtype" + dt).upper(), d, rows, bc,
                                                4 * (int(consumers) + 1), "+".join(knobs)),
        "variant": variant,
        "transforms": general == "1",  # the general instantiation (e4m3: with kGeneral too)
        # kernel.cuh's kSplitSoftmax: the FP8 d 256 tiles' plain instantiation
        "split": dt == "4" and d == "256" and variant == "plain",
        "overlap": overlap == "1",
        "b_c": int(bc),
    }


def per_function(text, header, value):
    """{function: the match of `value` on the first line after its header}, for each function a
    line matching `header` (group 1: its name) opens in `text` (a tool's per-function report)."""
    found, name = {}, None
    for line in text.splitlines():
        m = re.search(header, line)
        if m:
            name = m.group(1)
            continue
        m = re.search(value, line)
        if m and name:
            found[name] = m
            name = None
    return found


def stack_frames(res_usage):
    """Each function's stack frame in bytes, from `cuobjdump -res-usage` output."""
    return {name: int(m.group(1)) for name, m in
            per_function(res_usage, r"^\s*Function (\S+):", r"STACK:(\d+)").items()}


# A store of O (stmatrix, a TMA store, or a thread's global store): the tile's epilogue.
EPILOGUE_STORE = re.compile(r"\b(STSM|UTMASTG|STG)\b")


def maxima_under(lines):
    """The fewest FMNMX between a 0x1 wait and the next 0x0 wait, over the key loop's copies
    (0 where there is none): a split softmax's row maxima, which must stay under P V."""
    spans, inside, n = [], False, 0
    for line in lines:
        w = WAIT.search(line)
        if w:
            if w.group(1) == "1":
                inside, n = True, 0
            elif inside:
                spans.append(n)
                inside = False
        elif inside and re.search(r"\bFMNMX\b", line):
            n += 1
    return min(spans) if spans else 0


def overlap_counts(lines):
    """In address order: the MUFU.EX2 count between each 0x1 wait and the next 0x0 wait, and the
    MUFU.EX2 count after such a closing 0x0 wait up to the next HGMMA or QGMMA or 0x1 wait (the
    key loop runs its softmax there when the wait for P V has been moved above it).
    Exponentials followed by a store of O before that are the epilogue's (an attention sink's
    terms after the last P V: the FP8 tile's general instantiation lays them out right after
    the loop's wait) and are not counted."""
    spans, after, inside, closed, n, pending = [], 0, False, False, 0, 0
    for line in lines:
        w = WAIT.search(line)
        if w:
            if w.group(1) == "1":
                after += pending
                inside, closed, n, pending = True, False, 0, 0
            elif inside:
                spans.append(n)
                inside, closed = False, True
        elif "HGMMA" in line or "QGMMA" in line:  # the next issue (QGMMA: e4m3 products)
            after += pending
            closed, pending = False, 0
        elif closed and EPILOGUE_STORE.search(line):
            closed, pending = False, 0
        elif "MUFU.EX2" in line:
            if inside:
                n += 1
            elif closed:
                pending += 1
    return spans, after + pending


def descriptor_moves(lines):
    """The HGMMAs (QGMMAs in an FP8 kernel), past the first of each group (a group starts at
    WARPGROUP.ARRIVE), and how many of them an R2UR precedes since the previous one: (moved,
    counted)."""
    moved = counted = 0
    first, r2ur = True, False
    for line in lines:
        if "WARPGROUP.ARRIVE" in line:
            first, r2ur = True, False
        elif "R2UR" in line:
            r2ur = True
        elif "HGMMA" in line or "QGMMA" in line:
            if not first:
                counted += 1
                moved += r2ur
            first, r2ur = False, False
    return moved, counted


def serialized_gaps(lines):
    """Between consecutive HGMMAs (QGMMAs in an FP8 kernel): (gaps holding a WARPGROUP.DEPBAR,
    gaps). A kernel whose wgmmas ptxas serialized waits in nearly every gap; a pipelined one
    only between its groups."""
    waited = gaps = 0
    seen, wait = False, False
    for line in lines:
        if "HGMMA" in line or "QGMMA" in line:
            if seen:
                gaps += 1
                waited += wait
            seen, wait = True, False
        elif WAIT.search(line):
            wait = True
    return waited, gaps


def expected_under(row):
    """The fewest MUFU.EX2 an overlapped kernel's key loop has between its two waits: a thread's
    B_c / 2 exponentials of the softmax, and in the instantiations with score transforms
    (general, e4m3) as many again for soft-capping's tanhf, whose path the address order
    puts in the same span (at 0e61fba those kernels had exactly B_c / 2 there, all tanh)."""
    return row["b_c"] // 2 * (2 if row["transforms"] else 1)


LOCAL = re.compile(r"\b(STL|LDL)(\.\w+)*\s")


def local_accesses(lines):
    """Local-memory instructions (spills, local arrays) before and from the producer's register
    release (USETMAXREG.DEALLOC): (consumer side, producer side). The lines before the consumers'
    USETMAXREG.TRY_ALLOC, the block's set-up, count with the consumers."""
    consumer = producer = 0
    in_producer = False
    for line in lines:
        if "USETMAXREG.DEALLOC" in line:
            in_producer = True
        elif LOCAL.search(line):
            if in_producer:
                producer += 1
            else:
                consumer += 1
    return consumer, producer


def kernel_rows(sass, frames, allow_local=False):
    """One row per sm90 forward kernel in `cuobjdump -sass` output, with its stack frame from
    `frames` (-1 where unknown); local memory fails a kernel unless `allow_local`."""
    rows, name, body = [], None, []

    def flush():
        m = KERNEL.search(name) if name else None
        if not m:
            return
        row = describe(m)
        spans, after = overlap_counts(body)
        row["exp_under_pv"] = min(spans) if spans else 0
        row["exp_after_pv"] = after
        row["stack_bytes"] = frames.get(name, -1)
        row["hgmma_r2ur"], row["hgmma_counted"] = descriptor_moves(body)
        row["local_consumer"], row["local_producer"] = local_accesses(body)
        row["max_under_pv"] = maxima_under(body)
        row["hgmma_waited"], row["hgmma_gaps"] = serialized_gaps(body)
        if row["split"]:
            row["softmax_ok"] = not row["overlap"] or (row["max_under_pv"] >= row["b_c"] // 2 and
                                                       after >= row["b_c"] // 2)
        else:
            row["softmax_ok"] = not row["overlap"] or (
                row["exp_under_pv"] >= expected_under(row) and after == 0)
        row["uniform_ok"] = row["d"] > 128 or row["hgmma_r2ur"] == 0
        row["local_ok"] = allow_local or (row["local_consumer"] == 0 and
                                          row["local_producer"] == 0)
        row["serial_ok"] = 2 * row["hgmma_waited"] <= row["hgmma_gaps"]
        row["ok"] = row["softmax_ok"] and row["uniform_ok"] and row["local_ok"] and row["serial_ok"]
        rows.append(row)

    for line in sass.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            flush()
            name, body = m.group(1), []
        elif name is not None:
            body.append(line)
    flush()
    return rows


def check(cuobjdump, path, allow_local=False):
    """One row per sm90 forward kernel of one file."""
    def run(option):
        return subprocess.run([cuobjdump, option, path], capture_output=True, text=True,
                              check=True).stdout

    return kernel_rows(run("-sass"), stack_frames(run("-res-usage")), allow_local)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", help="libflashattn.so.0 or cubins")
    ap.add_argument("--csv", help="write every kernel's row here")
    ap.add_argument("--allow-local-memory", action="store_true",
                    help="count local-memory instructions without failing a kernel on them")
    args = ap.parse_args()
    cuobjdump = find_cuobjdump()
    if cuobjdump is None:
        print("check_sass: no cuobjdump (set FA_CUOBJDUMP, or put the CUDA Toolkit's bin/ on "
              "PATH)", file=sys.stderr)
        return 2
    rows = []
    for path in args.files:
        try:
            found = check(cuobjdump, path, args.allow_local_memory)
        except subprocess.CalledProcessError as e:
            print("check_sass: %s failed on %s: %s" % (cuobjdump, path, e.stderr.strip()),
                  file=sys.stderr)
            return 2
        for row in found:
            row["file"] = os.path.basename(path)
            rows.append(row)
    if not rows:
        print("check_sass: no sm90 forward kernel in " + ", ".join(args.files), file=sys.stderr)
        return 2
    fields = ["file", "kernel", "variant", "transforms", "overlap", "b_c", "max_under_pv",
              "exp_under_pv", "exp_after_pv", "hgmma_r2ur", "hgmma_counted", "hgmma_waited",
              "hgmma_gaps", "stack_bytes", "local_consumer", "local_producer", "ok"]
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
            w.writeheader()
            w.writerows(rows)
    for r in rows:
        print("%-4s %-70s %-7s MUFU.EX2 under / after P V %4s %4s  HGMMA after R2UR %3d of %3d  "
              "waited for %3d of %3d  stack %4d B  STL/LDL consumers %3d producer %3d" % (
                  "ok" if r["ok"] else "FAIL", r["kernel"], r["variant"],
                  r["exp_under_pv"] if r["overlap"] else "-",
                  r["exp_after_pv"] if r["overlap"] else "-", r["hgmma_r2ur"],
                  r["hgmma_counted"], r["hgmma_waited"], r["hgmma_gaps"], r["stack_bytes"],
                  r["local_consumer"], r["local_producer"]))
    print("%d sm90 forward kernels, %d overlapped; %d with the softmax out of place, %d of d <= "
          "128 with descriptors moved into uniform registers per HGMMA, %d with their wgmmas "
          "serialized; local memory in %d (consumers %d, producer %d)" % (
              len(rows), sum(r["overlap"] for r in rows),
              sum(not r["softmax_ok"] for r in rows), sum(not r["uniform_ok"] for r in rows),
              sum(not r["serial_ok"] for r in rows),
              sum(bool(r["local_consumer"] or r["local_producer"]) for r in rows),
              sum(bool(r["local_consumer"]) for r in rows),
              sum(bool(r["local_producer"]) for r in rows)))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
