#!/usr/bin/env python3
"""One call of each backend at a few FA-paper grid points, for a profiler to compare them.

    ncu --profile-from-start off --clock-control none [--section ...] \\
        python3 tools/profile_prefill.py 128:8192:0,64:8192:0 [ours,fa4,cudnn] [--dtype bf16]

Points are d:seqlen:causal (hidden 2048: heads = 2048 / d, batch = 16384 / seqlen). Every
backend runs the same random-normal q, k, v of shape (batch, seqlen, heads, d); each is called
three times first (FA4 compiles on its first call), then the profiler is started, each point's
backends run once in the order given, and the profiler is stopped, so `--profile-from-start off`
captures exactly one launch of each. Backends: ours (`flashattn.forward`, the built-in choice),
fa4 (FlashAttention-4's `flash_attn.cute.flash_attn_func`, installed with
../shared/tools/fa4-baseline) and cudnn (PyTorch SDPA with the cuDNN backend forced).
"""
import argparse
import sys
from pathlib import Path

try:
    import flashattn
except ImportError:  # not installed: this checkout's package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bindings" / "python"))
    import flashattn


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("points", help="comma-separated d:seqlen:causal")
    ap.add_argument("backends", nargs="?", default="ours,fa4,cudnn")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    args = ap.parse_args()
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    calls = []
    for point in args.points.split(","):
        d, seqlen, causal = (int(x) for x in point.split(":"))
        heads, batch = 2048 // d, 16384 // seqlen
        q, k, v = (torch.randn(batch, seqlen, heads, d, device="cuda", dtype=dtype)
                   for _ in range(3))
        out = torch.empty_like(q)
        for name in args.backends.split(","):
            if name == "ours":
                def call(q=q, k=k, v=v, out=out, causal=bool(causal)):
                    flashattn.forward(q, k, v, causal=causal, out=out)
            elif name == "fa4":
                from flash_attn.cute import flash_attn_func

                def call(q=q, k=k, v=v, causal=bool(causal)):
                    flash_attn_func(q, k, v, causal=causal)
            elif name == "cudnn":
                qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))

                def call(qt=qt, kt=kt, vt=vt, causal=bool(causal)):
                    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                        torch.nn.functional.scaled_dot_product_attention(qt, kt, vt,
                                                                         is_causal=causal)
            else:
                sys.exit(f"unknown backend {name!r} (ours, fa4, cudnn)")
            for _ in range(3):
                call()
            calls.append(call)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for call in calls:
        call()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


if __name__ == "__main__":
    main()
