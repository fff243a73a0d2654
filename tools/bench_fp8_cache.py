#!/usr/bin/env python3
"""Chunked prefill against an e4m3 (FP8) K/V cache beside the same cache in 16 bits, fp16 and
bf16 queries, contiguous and paged: time per call and the ratio (16-bit time / e4m3 time).

Run on a GPU machine with PyTorch (CUDA) and the library built, from the repository root:

    FLASHATTN_LIBRARY=build/libflashattn.so.0 PYTHONPATH=bindings/python \\
        python3 tools/bench_fp8_cache.py [--batch 4 --sq 512 --context 16384 --pages 0,16]

Method: flashattn.forward_kvcache (the built-in choice), causal, heads 32/8, standard-normal q,
K and V, the e4m3 cache being the 16-bit one rounded by torch (per-tensor descales of 1 passed),
pages shuffled. Each call is timed back to back between two CUDA events for >= 200 ms, the
median of 3 such windows. TFLOP/s counts the visible query-key pairs (4 d per pair). The largest
difference between the e4m3 and the 16-bit cache's outputs is printed (their inputs differ by
e4m3's rounding, so it is not an error bound)."""
import argparse

import torch

import flashattn


def timeit(fn, ms=200.0):
    """Median over 3 windows of >= ms milliseconds of calls back to back, in us per call."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        calls = 0
        start.record()
        while True:
            for _ in range(5):
                fn()
            calls += 5
            end.record()
            end.synchronize()
            if start.elapsed_time(end) >= ms:
                break
        times.append(start.elapsed_time(end) * 1000.0 / calls)
    return sorted(times)[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--sq", type=int, default=512)
    ap.add_argument("--context", type=int, default=16384)
    ap.add_argument("--heads", default="32,8")
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--pages", default="0,16", help="page sizes, 0 for a contiguous cache")
    args = ap.parse_args()
    torch.manual_seed(0)
    b, sq, ctx, d = args.batch, args.sq, args.context, args.head_dim
    hq, hkv = (int(x) for x in args.heads.split(","))
    print(f"# {torch.cuda.get_device_name()}; batch {b}, sq {sq}, context {ctx}, heads {hq}/{hkv}, "
          f"d {d}, causal")
    print("dtype,page,us_16bit_cache,us_e4m3_cache,ratio,tflops_16bit,tflops_e4m3,max_diff")
    flops = 4 * b * hq * d * (sq * ctx - sq * (sq - 1) / 2)
    one = torch.ones(1, device="cuda", dtype=torch.float32)
    lens = torch.full((b,), ctx, device="cuda", dtype=torch.int32)
    for dtype in (torch.float16, torch.bfloat16):
        q = torch.randn(b, sq, hq, d, device="cuda", dtype=dtype)
        k = torch.randn(b, ctx, hkv, d, device="cuda", dtype=dtype)
        v = torch.randn(b, ctx, hkv, d, device="cuda", dtype=dtype)
        k8, v8 = k.to(torch.float8_e4m3fn), v.to(torch.float8_e4m3fn)
        for page in (int(x) for x in args.pages.split(",")):
            table = None
            caches = (k, v, k8, v8)
            if page:
                per = -(-ctx // page)
                perm = torch.randperm(b * per, device="cuda")
                table = perm.view(b, per).to(torch.int32)

                def paged(x):
                    padded = torch.zeros(b, per * page, hkv, d, device="cuda", dtype=x.dtype)
                    padded[:, :ctx] = x
                    out = torch.empty(b * per, page, hkv, d, device="cuda", dtype=x.dtype)
                    out[perm] = padded.reshape(b * per, page, hkv, d)
                    return out

                caches = tuple(paged(x) for x in caches)
            kc, vc, kc8, vc8 = caches

            def wide():
                return flashattn.forward_kvcache(q, kc, vc, cache_seqlens=lens, block_table=table,
                                                 causal=True)

            def fp8():
                return flashattn.forward_kvcache(q, kc8, vc8, cache_seqlens=lens,
                                                 block_table=table, causal=True, k_descale=one,
                                                 v_descale=one)

            diff = (fp8().float() - wide().float()).abs().max().item()
            t16, t8 = timeit(wide), timeit(fp8)
            print(f"{str(dtype)[6:]},{page},{t16:.1f},{t8:.1f},{t16 / t8:.3f},"
                  f"{flops / t16 / 1e6:.1f},{flops / t8 / 1e6:.1f},{diff:.4f}", flush=True)


if __name__ == "__main__":
    main()
