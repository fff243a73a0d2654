#!/usr/bin/env python3
"""Compiles the sm90 kernel instantiations to cubins on a machine without a GPU and reports
ptxas's register spills per kernel, so register work (issue 17: no spills in the default build)
is measured before any device time is spent; with --compare, against another tree's run.

    python3 tools/compile_sm90.py --out /tmp/sm90-this [--src .] [--dtypes bf16]
        [--head-dims "64;128;192;256"] [--jobs 2]
    python3 tools/compile_sm90.py --out /tmp/sm90-main --src /path/to/main/checkout
    python3 tools/compile_sm90.py --out /tmp/sm90-this --compare /tmp/sm90-main

Generates the instantiations as the build does (tools/generate_kernels.py with the default
narrow pairs and the sm_90 choice table), compiles each sm_90a file with nvcc -cubin and
-Xptxas=-v (the build's flags: C++20, -O3, --expt-relaxed-constexpr, -DNDEBUG; about 5 s per
kernel), and writes spills.csv (kernel, spill store and load bytes, stack frame) beside the
cubins, which tools/check_sass.py reads (FA_CUOBJDUMP: its per-warpgroup STL / LDL counts say
whether the producer or the consumers spill). --compare prints the kernels whose spills
changed and whether each cubin is byte for byte the other run's. Exit status 0, or 1 when a
compile failed.
"""

import argparse
import concurrent.futures
import csv
import filecmp
import glob
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_sass  # noqa: E402 (tools/, beside this file: its reader of per-function reports)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLAGS = ["-std=c++20", "-O3", "--expt-relaxed-constexpr", "-DNDEBUG",
         "-gencode", "arch=compute_90a,code=sm_90a", "-cubin", "-Xptxas=-v"]


def ptxas_spills(log):
    """{function: (spill store bytes, spill load bytes, stack frame bytes)} from ptxas -v."""
    found = check_sass.per_function(
        log, r"Function properties for (\S+)",
        r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
    return {name: (int(m.group(2)), int(m.group(3)), int(m.group(1)))
            for name, m in found.items()}


def read_csv(path):
    with open(path, newline="") as f:
        return {r["function"]: r for r in csv.DictReader(f)}


def summary(rows):
    """(functions, spilling functions, spill store bytes)."""
    stores = [int(r["spill_stores"]) for r in rows.values()]
    return len(stores), sum(1 for s in stores if s), sum(stores)


def compile_one(src, cu, out):
    cubin = os.path.join(out, os.path.basename(cu)[:-3] + ".cubin")
    cmd = (["nvcc"] + FLAGS + ["-o", cubin, "-I" + os.path.join(src, "include"),
                               "-I" + os.path.join(src, "src"), cu])
    r = subprocess.run(cmd, capture_output=True, text=True)
    with open(cubin[:-6] + ".ptxas.log", "w") as f:
        f.write(r.stdout + r.stderr)
    return cu, r.returncode, r.stdout + r.stderr


def build(args):
    src = os.path.abspath(args.src)
    gen = os.path.join(args.out, "generated")
    os.makedirs(gen, exist_ok=True)
    subprocess.run([sys.executable, os.path.join(src, "tools", "generate_kernels.py"),
                    "--out", gen, "--dtypes", args.dtypes, "--head-dims", args.head_dims,
                    "--per-file", "4", "--sm90", "--choice-tables",
                    os.path.join(src, "src", "cuda", "heuristic_sm90.txt")],
                   check=True, capture_output=True)
    files = sorted(glob.glob(os.path.join(gen, "fa_fwd_sm90a_*.cu")))
    if not files:
        print("compile_sm90: no sm_90a kernel file generated", file=sys.stderr)
        return 1
    failed = 0
    rows = {}
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        for cu, rc, log in pool.map(lambda f: compile_one(src, f, args.out), files):
            if rc:
                failed += 1
                print("compile_sm90: %s failed:\n%s" % (cu, log[-2000:]), file=sys.stderr)
                continue
            for fn, (st, ld, frame) in ptxas_spills(log).items():
                rows[fn] = {"function": fn, "file": os.path.basename(cu)[:-3] + ".cubin",
                            "spill_stores": st, "spill_loads": ld, "stack_bytes": frame}
    with open(os.path.join(args.out, "spills.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["function", "file", "spill_stores", "spill_loads",
                                          "stack_bytes"])
        w.writeheader()
        w.writerows(rows[k] for k in sorted(rows))
    n, spilling, stores = summary({k: {"spill_stores": v["spill_stores"]}
                                   for k, v in rows.items()})
    print("%d files, %d kernels: %d spill, %d bytes of spill stores (%s)" % (
        len(files), n, spilling, stores, os.path.join(args.out, "spills.csv")))
    return 1 if failed else 0


def compare(out, base):
    this = read_csv(os.path.join(out, "spills.csv"))
    other = read_csv(os.path.join(base, "spills.csv"))
    for name in sorted(set(this) | set(other)):
        a, b = other.get(name), this.get(name)
        if a is None or b is None or a["spill_stores"] != b["spill_stores"]:
            print("%6s -> %-6s %s" % (a["spill_stores"] if a else "-",
                                      b["spill_stores"] if b else "-", name))
    print("base: %d kernels, %d spill, %d bytes; this: %d kernels, %d spill, %d bytes" % (
        summary(other) + summary(this)))
    same = [os.path.basename(p) for p in sorted(glob.glob(os.path.join(out, "*.cubin")))
            if os.path.exists(os.path.join(base, os.path.basename(p))) and
            filecmp.cmp(p, os.path.join(base, os.path.basename(p)), shallow=False)]
    print("cubins byte for byte the base's: " + (", ".join(same) if same else "none"))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="directory for the cubins, logs and spills.csv")
    ap.add_argument("--src", default=ROOT, help="the source tree to compile (default: this one)")
    ap.add_argument("--dtypes", default="bf16", help="';'-separated: fp16, bf16, e4m3")
    ap.add_argument("--head-dims", default="64;128;192;256")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--compare", metavar="BASE_OUT",
                    help="only compare --out's spills.csv and cubins with this earlier run's")
    args = ap.parse_args()
    if args.compare:
        return compare(args.out, args.compare)
    return build(args)


if __name__ == "__main__":
    sys.exit(main())
