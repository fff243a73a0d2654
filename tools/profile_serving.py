#!/usr/bin/env python3
"""One call of each backend at a few serving points (chunked prefill or decode on a KV cache,
paged or not), for a profiler to compare them.

    ncu --profile-from-start off --clock-control none [--section ...] \\
        python3 tools/profile_serving.py 128:4:512:8192:1,128:4:512:8192:0 [libflashattn,fa4] \\
        [--dtype bf16]

Points are d:batch:sq:context:page (page 0: a contiguous cache), with bench_serving.py's heads
(32 query, 8 K/V), its random-normal cache and its shuffled page tables, so a profile shows the
kernels its timing measured. The backends are bench_serving.py's (libflashattn, fa4); each is
called three times first (FA4 compiles on its first call) and checked against the first
backend's output as bench_serving.py checks it, then the profiler is started, each point's
backends run once in the order given, and the profiler is stopped, so `--profile-from-start off`
captures exactly one step of each (one launch for a chunked prefill that does not split keys).
"""
import argparse
import sys

from bench_report import profile_steps
from bench_serving import Point, backends


def parse_points(text):
    points = []
    for item in filter(None, text.split(",")):
        fields = item.split(":")
        if len(fields) != 5 or not all(f.isdigit() for f in fields):
            raise ValueError(f"bad point '{item}' (expected d:batch:sq:context:page, integers)")
        d, batch, sq, context, page = map(int, fields)
        if min(d, batch, sq, context) < 1:
            raise ValueError(f"bad point '{item}' (d, batch, sq and context must be >= 1)")
        points.append((d, batch, sq, context, page))
    if not points:
        raise ValueError("no point given")
    return points


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("points", help="comma-separated d:batch:sq:context:page")
    ap.add_argument("backends", nargs="?", default="libflashattn,fa4")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    args = ap.parse_args()
    try:
        points = parse_points(args.points)
    except ValueError as e:
        ap.error(str(e))
    import torch

    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    wanted = args.backends.split(",")
    found = backends(torch)
    if missing := [name for name in wanted if name not in found]:
        sys.exit(f"backends not available: {', '.join(missing)}")
    gen = torch.Generator(device="cuda").manual_seed(1234)
    steps = []
    for d, batch, sq, context, page in points:
        pt = Point(torch, dtype, d, batch, sq, context, page, gen)  # the steps hold it
        reference = None
        for name in wanted:
            step, out = found[name](pt)  # the first call
            step()
            step()
            torch.cuda.synchronize()
            if reference is None:
                reference = out.float()
            elif (diff := (out.float() - reference).abs().max().item()) >= 0.05:
                sys.exit(f"{name} differs from {wanted[0]} by {diff:.3g} at "
                         f"d {d}, {batch} x {sq} against {context}, page {page}")
            steps.append(step)
    profile_steps(torch, steps)


if __name__ == "__main__":
    main()
