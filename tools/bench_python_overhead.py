#!/usr/bin/env python3
"""Host time of one Python call: flashattn.forward against PyTorch's scaled_dot_product_attention.

Run on a GPU machine with PyTorch (CUDA) and the library built, from the repository root:

    FLASHATTN_LIBRARY=build/libflashattn.so.0 PYTHONPATH=bindings/python \\
        python3 tools/bench_python_overhead.py [--json results.json]

Method. One process, one tiny problem (default batch 1, seq 16, heads 2, head_dim 64, bf16), so
the GPU finishes each kernel long before the host issues the next and the time measured is the
host's: time.perf_counter_ns() around each call, --iters calls per repeat after --warmup calls,
the median of each repeat, and the median of --repeats repeats (min and max of the repeats
shown too). The methods take turns repeat by repeat, so drift in clocks or load hits all of
them alike. Nothing synchronises inside a timed call; between calls, outside the timed region,
the host waits for the GPU every --sync-every calls, so a queue that grew anyway (a kernel
slower than its launch) never fills and blocks a launch.

Rows:
  flashattn.forward            bshd tensors, output allocated by the call
  flashattn.forward out=       the same into a preallocated output
  flashattn.forward bhsd       SDPA's (batch, heads, seq, dim) tensors, layout="bhsd"
  torch SDPA                   torch.nn.functional.scaled_dot_product_attention, same tensors
  C fa_plan_run via ctypes     the library call alone (a plan made once, pointers as ints): the
                               floor under any Python binding
"""
import argparse
import ctypes
import json
import platform
import statistics
import sys
import time
from pathlib import Path

try:
    import flashattn
except ImportError:  # not installed: this checkout's package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bindings" / "python"))
    import flashattn


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seqlen", type=int, default=16)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--dtype", choices=["bfloat16", "float16"], default="bfloat16")
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--iters", type=int, default=2000, help="timed calls per repeat")
    p.add_argument("--warmup", type=int, default=200, help="untimed calls before each repeat")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--sync-every", type=int, default=64,
                   help="wait for the GPU after this many calls (outside the timed region)")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    return p.parse_args()


def plan_run_floor(torch, q, k, v, o):
    """A callable running fa_plan_run through ctypes with everything prepared: the C call's own
    cost plus ctypes' argument conversion."""
    from flashattn import _ffi
    lib = _ffi.lib()
    cfg = _ffi.fa_config()
    flashattn.errors.check(lib.fa_config_init(ctypes.byref(cfg)))
    cfg.dtype = _ffi.FA_DTYPE_BF16 if q.dtype == torch.bfloat16 else _ffi.FA_DTYPE_FP16
    cfg.batch, cfg.seqlen_q, cfg.heads_q, cfg.head_dim = q.shape
    cfg.seqlen_k, cfg.heads_kv = k.shape[1], k.shape[2]
    ctx = flashattn.Context(q.get_device())
    plan = _ffi.fa_plan_p()
    flashattn.errors.check(lib.fa_plan_create(ctx._handle, ctypes.byref(cfg), ctypes.byref(plan)))
    plan = flashattn._Plan(plan.value, ctx._owner)  # destroyed before its context
    run = _ffi.raw("fa_plan_run")
    args = (plan.handle, q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), None, None, 0,
            torch.cuda.current_stream(q.device).cuda_stream)

    def call():
        return run(*args)

    call.plan = plan  # lives as long as the callable
    return call


def time_repeat(fn, args, torch):
    for _ in range(args.warmup):
        fn()
    torch.cuda.synchronize()
    samples = []
    clock = time.perf_counter_ns
    for i in range(args.iters):
        t0 = clock()
        fn()
        samples.append(clock() - t0)
        if i % args.sync_every == args.sync_every - 1:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    return statistics.median(samples) / 1000.0


def main():
    args = parse_args()
    try:
        import torch
    except ImportError:
        sys.exit("bench_python_overhead.py needs PyTorch")
    if not torch.cuda.is_available():
        sys.exit("bench_python_overhead.py needs a CUDA GPU visible to PyTorch")

    device = torch.device("cuda", args.device)
    torch.cuda.set_device(device)
    dtype = getattr(torch, args.dtype)
    b, s, h, d = args.batch, args.seqlen, args.heads, args.head_dim
    gen = torch.Generator(device=device).manual_seed(0)
    q, k, v = (torch.randn(b, s, h, d, device=device, dtype=dtype, generator=gen)
               for _ in range(3))
    out = torch.empty_like(q)
    qt, kt, vt = (x.transpose(1, 2).contiguous() for x in (q, k, v))  # (b, h, s, d) for SDPA
    sdpa = torch.nn.functional.scaled_dot_product_attention

    ref = sdpa(qt, kt, vt).transpose(1, 2).float()
    err = (flashattn.forward(q, k, v).float() - ref).abs().max().item()
    err_bhsd = (flashattn.forward(qt, kt, vt, layout="bhsd").transpose(1, 2).float() -
                ref).abs().max().item()

    methods = {
        "flashattn.forward": lambda: flashattn.forward(q, k, v),
        "flashattn.forward out=": lambda: flashattn.forward(q, k, v, out=out),
        "flashattn.forward bhsd": lambda: flashattn.forward(qt, kt, vt, layout="bhsd"),
        "torch SDPA": lambda: sdpa(qt, kt, vt),
        "C fa_plan_run via ctypes": plan_run_floor(torch, q, k, v, out),
    }
    medians = {name: [] for name in methods}
    for _ in range(args.repeats):
        for name, fn in methods.items():
            medians[name].append(time_repeat(fn, args, torch))

    sdpa_us = statistics.median(medians["torch SDPA"])
    rows = []
    for name, values in medians.items():
        us = statistics.median(values)
        rows.append({"method": name, "median_us": us, "min_us": min(values),
                     "max_us": max(values), "vs_sdpa": us / sdpa_us})

    print(f"Host time per call, {torch.cuda.get_device_name(device)}, "
          f"q/k/v ({b}, {s}, {h}, {d}) {args.dtype}: median of {args.repeats} repeats of the "
          f"median of {args.iters} calls")
    print(f"| {'method':<26} | median us | min us | max us | vs SDPA |")
    print(f"|{'-' * 28}|----------:|-------:|-------:|--------:|")
    for r in rows:
        print(f"| {r['method']:<26} | {r['median_us']:9.1f} | {r['min_us']:6.1f} | "
              f"{r['max_us']:6.1f} | {r['vs_sdpa']:6.2f}x |")
    print(f"max |flashattn - SDPA|: {err:.3g} (bshd), {err_bhsd:.3g} (bhsd)")

    if args.json:
        result = {
            "problem": {"batch": b, "seqlen": s, "heads": h, "head_dim": d, "dtype": args.dtype},
            "method": {"iters": args.iters, "warmup": args.warmup, "repeats": args.repeats,
                       "sync_every": args.sync_every},
            "device": torch.cuda.get_device_name(device),
            "torch": torch.__version__,
            "flashattn": flashattn.__version__,
            "library": flashattn.version(),
            "python": platform.python_version(),
            "max_abs_diff_vs_sdpa": {"bshd": err, "bhsd": err_bhsd},
            "rows": rows,
        }
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
