#!/usr/bin/env python3
"""One call of each backend at a few FA-paper grid points, for a profiler to compare them.

    ncu --profile-from-start off --clock-control none [--section ...] \\
        python3 tools/profile_prefill.py 128:8192:0,64:8192:0 [libflashattn,fa4,cudnn] \\
        [--dtype bf16]

Points are d:seqlen:causal (hidden 2048: heads = 2048 / d, batch = 16384 / seqlen). The backends
are bench_compare.py's (libflashattn, fa4, cudnn, fa2), on the same random-normal q, k, v of
shape (batch, seqlen, heads, d); each is called three times first (FA4 compiles on its first
call), then the profiler is started, each point's backends run once in the order given, and the
profiler is stopped, so `--profile-from-start off` captures exactly one launch of each.
"""
import argparse
import sys

from bench_compare import backends
from bench_report import profile_steps


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("points", help="comma-separated d:seqlen:causal")
    ap.add_argument("backends", nargs="?", default="libflashattn,fa4,cudnn")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    args = ap.parse_args()
    import torch

    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    wanted = args.backends.split(",")
    found = backends(torch, wanted)
    if missing := [name for name in wanted if name not in found]:
        sys.exit(f"backends not available: {', '.join(missing)}")
    steps = []
    for point in args.points.split(","):
        d, seqlen, causal = (int(x) for x in point.split(":"))
        heads, batch = 2048 // d, 16384 // seqlen
        q, k, v = (torch.randn(batch, seqlen, heads, d, device="cuda", dtype=dtype)
                   for _ in range(3))
        for name in wanted:
            step, _ = found[name](q, k, v, bool(causal))  # the first call
            step()
            step()
            steps.append(step)
    profile_steps(torch, steps)


if __name__ == "__main__":
    main()
