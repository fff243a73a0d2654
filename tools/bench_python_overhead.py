#!/usr/bin/env python3
"""Host time of one Python call: every flashattn entry point against PyTorch's
scaled_dot_product_attention, in a clean process and with hundreds of other plans cached.

Run on a GPU machine with PyTorch (CUDA) and the library built, from the repository root:

    FLASHATTN_LIBRARY=build/libflashattn.so.0 PYTHONPATH=bindings/python \\
        python3 tools/bench_python_overhead.py [--warm-plans 300] [--json results.json]

Method. One process, one tiny problem (default batch 1, seq 16, heads 2, head_dim 64, bf16), so
the GPU finishes each kernel long before the host issues the next and the time measured is the
host's: time.perf_counter_ns() around each call, --iters calls per repeat after --warmup calls,
the median of each repeat, and the median of --repeats repeats (min and max of the repeats
shown too). The methods take turns repeat by repeat, so drift in clocks or load hits all of
them alike. Nothing synchronises inside a timed call; between calls, outside the timed region,
the host waits for the GPU every --sync-every calls, so a queue that grew anyway (a kernel
slower than its launch) never fills and blocks a launch.

Two phases, one table each: "clean" first, in this fresh process; then "warm", after the
process has made --warm-plans other plans (forward, forward_varlen and forward_kvcache with and
without a block table on other sizes, in turn), as a serving process holds them. 0 skips it.

Rows:
  flashattn.forward            bshd tensors, output allocated by the call
  flashattn.forward out=       the same into a preallocated output
  flashattn.forward bhsd       SDPA's (batch, heads, seq, dim) tensors, layout="bhsd"
  forward_varlen               q, k, v packed (batch * seq rows), cu_seqlens for batch sequences
  forward_kvcache              decode: seqlen_q 1 against a contiguous cache of seq rows
  forward_kvcache paged        the same cache in pages of --page-size rows, through a block table
  forward_kvcache paged ws=    the same with the caller's workspace (no allocation in the call)
  merge_states                 two (out, lse) pairs of the forward problem into new outputs
  torch SDPA                   torch.nn.functional.scaled_dot_product_attention, bhsd tensors
  C fa_plan_run via ctypes     the library call alone (a plan made once, pointers as ints): the
                               floor under any Python binding
Each entry point is checked against SDPA (or forward()) before timing; the largest differences
are printed and written to the JSON.
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
    p.add_argument("--page-size", type=int, default=16)
    p.add_argument("--dtype", choices=["bfloat16", "float16"], default="bfloat16")
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--iters", type=int, default=2000, help="timed calls per repeat")
    p.add_argument("--warmup", type=int, default=200, help="untimed calls before each repeat")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--sync-every", type=int, default=64,
                   help="wait for the GPU after this many calls (outside the timed region)")
    p.add_argument("--warm-plans", type=int, default=300,
                   help="other plans made before the second phase (0: clean phase only)")
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


def problem(torch, args, device):
    """The tensors of every method, and the largest difference of each entry point from its
    reference (SDPA, or forward() where SDPA has no equal)."""
    dtype = getattr(torch, args.dtype)
    b, s, h, d, page = args.batch, args.seqlen, args.heads, args.head_dim, args.page_size
    gen = torch.Generator(device=device).manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, device=device, dtype=dtype, generator=gen)

    t = {"q": randn(b, s, h, d), "k": randn(b, s, h, d), "v": randn(b, s, h, d)}
    t["out"] = torch.empty_like(t["q"])
    t["qt"], t["kt"], t["vt"] = (t[n].transpose(1, 2).contiguous() for n in ("q", "k", "v"))
    # varlen: the batch's sequences one after another.
    t["q_packed"], t["k_packed"], t["v_packed"] = (t[n].reshape(b * s, h, d)
                                                   for n in ("q", "k", "v"))
    t["cu"] = torch.arange(0, (b + 1) * s, s, device=device, dtype=torch.int32)
    # decode: the last query row of each sequence against its whole cache.
    t["q1"] = t["q"][:, -1:].contiguous()
    t["lens"] = torch.full((b,), s, device=device, dtype=torch.int32)
    per_seq = -(-s // page)
    order = torch.randperm(b * per_seq, generator=torch.Generator().manual_seed(0))
    order = order.to(device=device, dtype=torch.int32)
    t["table"] = order.reshape(b, per_seq)
    pages = torch.zeros(b * per_seq * page, h, d, device=device, dtype=dtype)
    k_pages, v_pages = pages.clone(), pages.clone()
    for i in range(b):
        rows = (t["table"][i].long()[:, None] * page + torch.arange(page, device=device)).flatten()
        k_pages[rows[:s]], v_pages[rows[:s]] = t["k"][i], t["v"][i]
    t["k_pages"], t["v_pages"] = (x.reshape(b * per_seq, page, h, d) for x in (k_pages, v_pages))
    # Enough for any split of this problem (256 splits at most, fa_config.num_splits).
    t["workspace"] = torch.empty(256 * b * h * (d + 1) + 64, device=device, dtype=torch.float32)
    # merge_states: the forward problem's keys in two halves.
    half = max(s // 2, 1)
    t["o_a"], t["lse_a"] = flashattn.forward(t["q"], t["k"][:, :half], t["v"][:, :half],
                                             return_lse=True)
    t["o_b"], t["lse_b"] = flashattn.forward(t["q"], t["k"][:, half:], t["v"][:, half:],
                                             return_lse=True)

    sdpa = torch.nn.functional.scaled_dot_product_attention
    ref = sdpa(t["qt"], t["kt"], t["vt"]).transpose(1, 2).float()
    ref1 = sdpa(t["q1"].transpose(1, 2), t["kt"], t["vt"]).transpose(1, 2).float()

    def diff(x, want):
        return (x.float() - want).abs().max().item()

    errors = {
        "forward": diff(flashattn.forward(t["q"], t["k"], t["v"]), ref),
        "forward bhsd": diff(flashattn.forward(t["qt"], t["kt"], t["vt"], layout="bhsd")
                             .transpose(1, 2), ref),
        "forward_varlen": diff(flashattn.forward_varlen(
            t["q_packed"], t["k_packed"], t["v_packed"], t["cu"], t["cu"], max_seqlen_q=s,
            max_seqlen_k=s).reshape(b, s, h, d), ref),
        "forward_kvcache": diff(flashattn.forward_kvcache(t["q1"], t["k"], t["v"],
                                                          cache_seqlens=t["lens"]), ref1),
        "forward_kvcache paged": diff(flashattn.forward_kvcache(
            t["q1"], t["k_pages"], t["v_pages"], cache_seqlens=t["lens"],
            block_table=t["table"]), ref1),
        "merge_states": diff(flashattn.merge_states(t["o_a"], t["lse_a"], t["o_b"],
                                                    t["lse_b"])[0], ref),
    }
    return t, errors


def methods(torch, t, args):
    f, s = flashattn, args.seqlen
    sdpa = torch.nn.functional.scaled_dot_product_attention
    return {
        "flashattn.forward": lambda: f.forward(t["q"], t["k"], t["v"]),
        "flashattn.forward out=": lambda: f.forward(t["q"], t["k"], t["v"], out=t["out"]),
        "flashattn.forward bhsd": lambda: f.forward(t["qt"], t["kt"], t["vt"], layout="bhsd"),
        "forward_varlen": lambda: f.forward_varlen(
            t["q_packed"], t["k_packed"], t["v_packed"], t["cu"], t["cu"], max_seqlen_q=s,
            max_seqlen_k=s),
        "forward_kvcache": lambda: f.forward_kvcache(t["q1"], t["k"], t["v"],
                                                     cache_seqlens=t["lens"]),
        "forward_kvcache paged": lambda: f.forward_kvcache(
            t["q1"], t["k_pages"], t["v_pages"], cache_seqlens=t["lens"],
            block_table=t["table"]),
        "forward_kvcache paged ws=": lambda: f.forward_kvcache(
            t["q1"], t["k_pages"], t["v_pages"], cache_seqlens=t["lens"],
            block_table=t["table"], workspace=t["workspace"]),
        "merge_states": lambda: f.merge_states(t["o_a"], t["lse_a"], t["o_b"], t["lse_b"]),
        "torch SDPA": lambda: sdpa(t["qt"], t["kt"], t["vt"]),
        "C fa_plan_run via ctypes": plan_run_floor(torch, t["q"], t["k"], t["v"], t["out"]),
    }


def warm_plans(torch, args, device, n):
    """Makes n plans of other problems on the device's context, each entry point in turn."""
    dtype = getattr(torch, args.dtype)
    h, d, page = args.heads, args.head_dim, args.page_size
    q = torch.randn(1, 1, h, d, device=device, dtype=dtype)
    biggest = args.seqlen + 1 + n
    k = torch.randn(1, biggest, h, d, device=device, dtype=dtype)
    pages = torch.randn(n // 4 + 1, page, h, d, device=device, dtype=dtype)
    table = torch.zeros(1, 1, device=device, dtype=torch.int32)
    for i in range(n):
        rows = args.seqlen + 1 + i  # sizes the measured problems do not have
        which = i % 4
        if which == 0:
            flashattn.forward(q, k[:, :rows], k[:, :rows])
        elif which == 1:
            cu_q = torch.tensor([0, 1], device=device, dtype=torch.int32)
            cu_k = torch.tensor([0, rows], device=device, dtype=torch.int32)
            flashattn.forward_varlen(q[0], k[0, :rows], k[0, :rows], cu_q, cu_k, max_seqlen_q=1,
                                     max_seqlen_k=rows)
        elif which == 2:
            lens = torch.tensor([rows], device=device, dtype=torch.int32)
            flashattn.forward_kvcache(q, k[:, :rows], k[:, :rows], cache_seqlens=lens)
        else:  # another page count per call
            used = 1 + i // 4
            lens = torch.tensor([page], device=device, dtype=torch.int32)
            flashattn.forward_kvcache(q, pages[:used], pages[:used], cache_seqlens=lens,
                                      block_table=table)
    torch.cuda.synchronize()
    return flashattn._context(device.index)._plans.cache_info().currsize


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


def measure(fns, args, torch):
    medians = {name: [] for name in fns}
    for _ in range(args.repeats):
        for name, fn in fns.items():
            medians[name].append(time_repeat(fn, args, torch))
    sdpa_us = statistics.median(medians["torch SDPA"])
    rows = []
    for name, values in medians.items():
        us = statistics.median(values)
        rows.append({"method": name, "median_us": us, "min_us": min(values),
                     "max_us": max(values), "vs_sdpa": us / sdpa_us})
    return rows


def print_table(title, rows):
    print(title)
    print(f"| {'method':<26} | median us | min us | max us | vs SDPA |")
    print(f"|{'-' * 28}|----------:|-------:|-------:|--------:|")
    for r in rows:
        print(f"| {r['method']:<26} | {r['median_us']:9.1f} | {r['min_us']:6.1f} | "
              f"{r['max_us']:6.1f} | {r['vs_sdpa']:6.2f}x |")


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
    t, errors = problem(torch, args, device)
    fns = methods(torch, t, args)
    b, s, h, d = args.batch, args.seqlen, args.heads, args.head_dim
    head = (f"Host time per call, {torch.cuda.get_device_name(device)}, q/k/v ({b}, {s}, {h}, "
            f"{d}) {args.dtype}, pages of {args.page_size}: median of {args.repeats} repeats of "
            f"the median of {args.iters} calls")
    phases = {"clean": measure(fns, args, torch)}
    print_table(f"{head}; clean process", phases["clean"])
    plans = None
    if args.warm_plans:
        plans = warm_plans(torch, args, device, args.warm_plans)
        phases["warm"] = measure(fns, args, torch)
        print()
        print_table(f"{head}; after {args.warm_plans} other plans ({plans} cached)",
                    phases["warm"])
    entry_points = ("flashattn.forward", "forward_varlen", "forward_kvcache",
                    "forward_kvcache paged", "merge_states")
    verdict = {phase: {r["method"]: r["vs_sdpa"] <= 1.0 for r in rows
                       if r["method"] in entry_points} for phase, rows in phases.items()}
    for phase, passed in verdict.items():
        print(f"{phase}: at or below SDPA's host time: "
              + ", ".join(f"{name} {'yes' if ok else 'NO'}" for name, ok in passed.items()))
    print("max |difference| from SDPA: " +
          ", ".join(f"{name} {err:.3g}" for name, err in errors.items()))

    if args.json:
        result = {
            "problem": {"batch": b, "seqlen": s, "heads": h, "head_dim": d,
                        "page_size": args.page_size, "dtype": args.dtype},
            "method": {"iters": args.iters, "warmup": args.warmup, "repeats": args.repeats,
                       "sync_every": args.sync_every, "warm_plans": args.warm_plans},
            "device": torch.cuda.get_device_name(device),
            "torch": torch.__version__,
            "flashattn": flashattn.__version__,
            "library": flashattn.version(),
            "python": platform.python_version(),
            "max_abs_diff_vs_sdpa": errors,
            "cached_plans_warm": plans,
            "phases": phases,
            "at_or_below_sdpa": verdict,
        }
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
