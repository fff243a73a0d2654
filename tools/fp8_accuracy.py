#!/usr/bin/env python3
"""Accuracy of attention against an e4m3 (FP8) K/V cache: the library's GPU kernels beside a
naive FP8 reference, both against the exact result of the unquantised inputs (issue 19).

Run on a GPU machine with PyTorch (CUDA) and the library built, from the repository root:

    FLASHATTN_LIBRARY=build/libflashattn.so.0 PYTHONPATH=bindings/python \\
        python3 tools/fp8_accuracy.py [--out fp8-accuracy.csv]

Inputs: standard-normal q (bf16 or fp16), K and V in float32 with 0.1% of their values replaced
by +-10 (outliers), heads 8/2, d 128, causal (bottom-right). K and V are quantised as serving
engines do: one descale per tensor, amax / 448, each value divided by it and rounded to e4m3.
  exact: float64 attention of q (as given, 16-bit) against the float32 K and V;
  naive: the quantised K and V decoded and multiplied by their descales, attention in float32
         (TF32 off);
  ours:  flashattn.forward_kvcache on the e4m3 cache with k_descale and v_descale (the choice:
         the mma.sync decode tile at Sq 1, the sm90 e4m3 tile for chunked prefill on Hopper);
  bf16 cache: the library on K and V rounded to the queries' 16-bit type, for scale.
Each row prints the root-mean-square error of o against exact, and ours / naive (ours includes
rounding o to the queries' 16-bit type, which naive, kept in float32, does not); a row whose
ratio exceeds 1 + --slack is marked WORSE and the exit status is 1. Needs a PyTorch with
torch.float8_e4m3fn tensors that take indexed assignment (the GPU machine's 2.11 does)."""
import argparse
import math
import sys

import torch

import flashattn


def attention(q, k, v, dtype):
    """Causal (bottom-right) attention in `dtype`: q (b, sq, hq, d), k and v (b, sk, hkv, d)."""
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    group = hq // hkv
    q = q.to(dtype).permute(0, 2, 1, 3)
    k = k.to(dtype).permute(0, 2, 1, 3).repeat_interleave(group, dim=1)
    v = v.to(dtype).permute(0, 2, 1, 3).repeat_interleave(group, dim=1)
    s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d)
    rows = torch.arange(sq, device=q.device).view(-1, 1)
    cols = torch.arange(sk, device=q.device).view(1, -1)
    s = s.masked_fill(cols > rows + (sk - sq), float("-inf"))
    return torch.matmul(torch.softmax(s, dim=-1), v).permute(0, 2, 1, 3)


def with_outliers(shape, fraction, magnitude, generator):
    x = torch.randn(shape, device="cuda", generator=generator)
    pick = torch.rand(shape, device="cuda", generator=generator) < fraction
    sign = torch.where(torch.rand(shape, device="cuda", generator=generator) < 0.5, -1.0, 1.0)
    return torch.where(pick, sign * magnitude, x)


def quantise(x):
    """(e4m3 tensor, float32 descale of one element): x / descale rounded to e4m3."""
    descale = (x.abs().max() / 448.0).clamp(min=1e-12).float()
    return (x / descale).to(torch.float8_e4m3fn), descale.reshape(1)


def paged(x, page, perm):
    """x (b, sk, hkv, d) as a pool of pages of `page` rows, sequence b's i-th page at perm[b, i]."""
    b, sk, hkv, d = x.shape
    per = perm.shape[1]
    padded = torch.zeros(b, per * page, hkv, d, device="cuda", dtype=x.dtype)
    padded[:, :sk] = x
    pool = torch.empty(b * per, page, hkv, d, device="cuda", dtype=x.dtype)
    pool[perm.reshape(-1).long()] = padded.reshape(b * per, page, hkv, d)
    return pool


def rmse(x, exact):
    return (x.double() - exact).pow(2).mean().sqrt().item()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="also write the rows to this CSV file")
    ap.add_argument("--slack", type=float, default=0.02,
                    help="ours / naive above 1 + slack is reported WORSE (default 0.02)")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    gen = torch.Generator(device="cuda")
    gen.manual_seed(19)
    hq, hkv, d = 8, 2, 128
    shapes = [(8, 1, 4096), (2, 177, 1013), (1, 512, 8192)]  # (batch, sq, context)
    header = ("dtype,batch,sq,context,page,rmse_ours,rmse_naive,ours_over_naive,"
              "rmse_16bit_cache,max_abs_exact")
    print(f"# {torch.cuda.get_device_name()}; heads {hq}/{hkv}, d {d}, causal, 0.1% outliers of 10")
    print(header)
    lines, worse = [header], 0
    for dtype in (torch.bfloat16, torch.float16):
        for b, sq, ctx in shapes:
            q = torch.randn(b, sq, hq, d, device="cuda", generator=gen).to(dtype)
            k = with_outliers((b, ctx, hkv, d), 1e-3, 10.0, gen)
            v = with_outliers((b, ctx, hkv, d), 1e-3, 10.0, gen)
            exact = attention(q, k, v, torch.float64)
            k8, kd = quantise(k)
            v8, vd = quantise(v)
            naive = attention(q, k8.float() * kd, v8.float() * vd, torch.float32)
            lens = torch.full((b,), ctx, device="cuda", dtype=torch.int32)
            for page in (0, 16):
                table = None
                caches = [k8, v8, k.to(dtype), v.to(dtype)]
                if page:
                    per = -(-ctx // page)
                    table = torch.randperm(b * per, device="cuda", generator=gen).view(b, per)
                    table = table.to(torch.int32)
                    caches = [paged(x, page, table) for x in caches]
                kc8, vc8, kc, vc = caches
                ours = flashattn.forward_kvcache(q, kc8, vc8, cache_seqlens=lens, block_table=table,
                                                 causal=True, k_descale=kd, v_descale=vd)
                wide = flashattn.forward_kvcache(q, kc, vc, cache_seqlens=lens, block_table=table,
                                                 causal=True)
                r_ours, r_naive = rmse(ours, exact), rmse(naive, exact)
                ratio = r_ours / r_naive
                flag = "" if ratio <= 1.0 + args.slack else ",WORSE"
                worse += bool(flag)
                line = (f"{str(dtype)[6:]},{b},{sq},{ctx},{page},{r_ours:.4e},{r_naive:.4e},"
                        f"{ratio:.3f},{rmse(wide, exact):.4e},{exact.abs().max().item():.3f}{flag}")
                print(line, flush=True)
                lines.append(line)
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")
    return 1 if worse else 0


if __name__ == "__main__":
    sys.exit(main())
