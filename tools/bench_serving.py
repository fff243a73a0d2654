#!/usr/bin/env python3
"""Serving attention on a KV cache: libflashattn against FlashAttention-4 (and SDPA's flash
backend where it runs), in one process, timed back to back.

    FLASHATTN_LIBRARY=build/libflashattn.so.0 PYTHONPATH=bindings/python \\
        python3 tools/bench_serving.py --out results/ [--dtype bf16,fp16] [--quick] [--pages 0,1]

Points (issue 16): chunked prefill (chunks of 256 to 4096 causal query rows against 8k-32k
cached keys, d 128, 32/8 heads; also d 64 and 256 at 4 x 512, 16k) and decode (Sq 1, 4, 16;
batch 1, 8, 32, 64; KV 4k to 128k), each on a contiguous cache (page 0) and on paged caches of
page sizes 1, 16, 64, 256 with shuffled tables. Every backend gets the same random-normal q, K
and V (a paged cache holds the contiguous one's rows, page by page), and is timed the same way:
calls back to back between two CUDA events until --window-ms (200) have passed, the median of
--repeats (3) such windows, the backends taking turns window by window. Before timing, each
backend's output is compared with ours (max |difference|, printed): a backend that computes
something else is not timed.

Backends: libflashattn (`flashattn.forward_kvcache`, the library's choice, a caller workspace for
split-KV); FlashAttention-4 (`flash_attn.cute.flash_attn_varlen_func` with `seqused_k` and
`page_table`, installed with ../shared/tools/fa4-baseline; it refuses split-KV on sm90, so
num_splits=1 there); SDPA's flash backend on contiguous caches at sq = 1 (decode: it has no
cache lengths, so the cache is sliced to each point's equal lengths). A backend that is not
installed or refuses a point leaves it empty.

TFLOP/s = 4 * batch * heads_q * d * (visible query-key pairs per sequence) / time; decode also
reports GB/s = (K and V rows read + q + out bytes) / time. Writes serving.csv and serving.md.
"""
import argparse
import csv
import os
import sys
from pathlib import Path

from bench_report import stepper, time_backends

try:
    import flashattn
except ImportError:  # not installed: this checkout's package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bindings" / "python"))
    import flashattn

PREFILL = [(4, 512, 8192), (4, 512, 32768), (4, 2048, 16384), (16, 256, 8192), (1, 4096, 32768)]
PREFILL_DIMS = [(64, 4, 512, 16384), (256, 4, 512, 16384)]  # (d, batch, chunk, context)
DECODE_SQ = [1, 4, 16]
DECODE_BATCH = [1, 8, 32, 64]
DECODE_KV = [4096, 8192, 16384, 32768, 65536, 131072]
PAGES = [0, 1, 16, 64, 256]
HQ, HKV = 32, 8


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="directory for serving.csv and serving.md")
    p.add_argument("--dtype", default="bf16", help="comma-separated: bf16, fp16")
    p.add_argument("--window-ms", type=float, default=200.0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--max-gib", type=float, default=24.0, help="skip caches larger than this")
    p.add_argument("--quick", action="store_true",
                   help="prefill shapes and decode at batch 8, KV 8k/64k only")
    p.add_argument("--pages", default=",".join(map(str, PAGES)),
                   help="comma-separated page sizes (0: contiguous)")
    return p.parse_args()


def visible_pairs(sq, sk, causal):
    """Query-key pairs a sequence computes: bottom-right causal drops sq (sq - 1) / 2."""
    return sq * sk - (sq * (sq - 1) // 2 if causal else 0)


class Point:
    """One problem: q (batch, sq, HQ, d) against a cache of `context` keys per sequence."""

    def __init__(self, torch, dtype, d, batch, sq, context, page, gen):
        self.d, self.batch, self.sq, self.context, self.page = d, batch, sq, context, page
        self.causal = sq > 1
        dev = "cuda"
        self.q = torch.randn(batch, sq, HQ, d, device=dev, dtype=dtype, generator=gen)
        k = torch.randn(batch, context, HKV, d, device=dev, dtype=dtype, generator=gen)
        v = torch.randn(batch, context, HKV, d, device=dev, dtype=dtype, generator=gen)
        self.lengths = torch.full((batch,), context, device=dev, dtype=torch.int32)
        if page == 0:
            self.k, self.v, self.table = k, v, None
            return
        per_seq = (context + page - 1) // page
        pages = batch * per_seq
        order = torch.randperm(pages, device="cpu", generator=torch.Generator().manual_seed(7))
        self.table = order.view(batch, per_seq).to(device=dev, dtype=torch.int32)
        padded = per_seq * page
        self.k = torch.empty(pages, page, HKV, d, device=dev, dtype=dtype)
        self.v = torch.empty_like(self.k)
        # Row j of sequence b lives in page table[b, j // page] at row j % page.
        kp = torch.zeros(batch, padded, HKV, d, device=dev, dtype=dtype)
        vp = torch.zeros_like(kp)
        kp[:, :context] = k
        vp[:, :context] = v
        flat = self.table.view(-1).long()
        self.k[flat] = kp.view(batch * per_seq, page, HKV, d)
        self.v[flat] = vp.view(batch * per_seq, page, HKV, d)
        del kp, vp, k, v

    def flops(self):
        return 4.0 * self.batch * HQ * self.d * visible_pairs(self.sq, self.context, self.causal)

    def bytes(self):
        elem = self.q.element_size()
        return elem * (2 * self.batch * self.context * HKV * self.d + 2 * self.q.numel())


def backends(torch):
    """name -> function(point) returning a callable that runs one step (or raising)."""
    found = {}

    def ours(pt):
        out = torch.empty_like(pt.q)
        ws = torch.empty(64 << 20, device="cuda", dtype=torch.float32)  # 256 MiB, ample
        kw = dict(cache_seqlens=pt.lengths, causal=pt.causal, out=out, workspace=ws)
        if pt.table is not None:
            kw["block_table"] = pt.table
        def step():
            flashattn.forward_kvcache(pt.q, pt.k, pt.v, **kw)
        step()  # `out` holds this step's result before the others are compared with it
        return step, out

    found["libflashattn"] = ours
    try:
        from flash_attn.cute import flash_attn_varlen_func

        def fa4(pt):
            kw = dict(seqused_k=pt.lengths, max_seqlen_k=pt.context, causal=pt.causal,
                      num_splits=1)
            if pt.table is not None:
                kw["page_table"] = pt.table
            return stepper(lambda: flash_attn_varlen_func(pt.q, pt.k, pt.v, **kw))

        found["fa4"] = fa4
    except ImportError as e:
        print(f"FlashAttention-4 not importable ({e}): left out", file=sys.stderr)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def sdpa(pt):
        if pt.table is not None or pt.sq != 1:
            raise NotImplementedError("SDPA runs contiguous decode only")
        q, k, v = (t.transpose(1, 2) for t in (pt.q, pt.k, pt.v))

        def call():
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        step, out = stepper(call)
        return step, out.transpose(1, 2)

    found["sdpa-flash"] = sdpa
    return found


def main():
    args = parse_args()
    import torch

    gpu = torch.cuda.get_device_name()
    print(f"GPU: {gpu}; libflashattn {flashattn.version()} "
          f"({os.environ.get('FLASHATTN_LIBRARY', 'found by the package')})")
    found = backends(torch)
    points = []
    for dtype_name in args.dtype.split(","):
        for page in [int(x) for x in args.pages.split(",")]:
            for (b, sq, ctx) in PREFILL:
                points.append((dtype_name, "prefill", 128, b, sq, ctx, page))
            for (d, b, sq, ctx) in PREFILL_DIMS:
                points.append((dtype_name, "prefill", d, b, sq, ctx, page))
            for sq in DECODE_SQ:
                for b in ([8] if args.quick else DECODE_BATCH):
                    for ctx in ([8192, 65536] if args.quick else DECODE_KV):
                        points.append((dtype_name, "decode", 128, b, sq, ctx, page))
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    gen = torch.Generator(device="cuda").manual_seed(1234)
    for (dtype_name, kind, d, b, sq, ctx, page) in points:
        dtype = torch.bfloat16 if dtype_name == "bf16" else torch.float16
        if 2.0 * b * ctx * HKV * d * 2 / 2**30 > args.max_gib:
            continue
        pt = Point(torch, dtype, d, b, sq, ctx, page, gen)
        medians = time_backends(torch, found, (pt,), f"{kind} b{b} sq{sq} ctx{ctx} page{page}",
                                args.window_ms, args.repeats)
        for name, ms in medians.items():
            rows.append(dict(gpu=gpu, dtype=dtype_name, kind=kind, d=d, batch=b, sq=sq,
                             context=ctx, page=page, backend=name, us=round(ms * 1e3, 2),
                             tflops=round(pt.flops() / (ms * 1e-3) / 1e12, 1),
                             gbps=round(pt.bytes() / (ms * 1e-3) / 1e9, 1)))
            print(",".join(str(v) for v in rows[-1].values()), flush=True)
        del pt
        torch.cuda.empty_cache()
    with open(out_dir / "serving.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    # The markdown table: per point, each backend's TFLOP/s (prefill) or GB/s (decode) and ours
    # over each other backend.
    by_point = {}
    for r in rows:
        key = (r["dtype"], r["kind"], r["d"], r["batch"], r["sq"], r["context"], r["page"])
        by_point.setdefault(key, {})[r["backend"]] = r
    names = list(found)
    with open(out_dir / "serving.md", "w") as f:
        f.write(f"GPU: {gpu}\n\n| dtype | kind | d | batch x sq, context | page | "
                + " | ".join(names) + " | ours / fa4 |\n|" + "---|" * (6 + len(names)) + "\n")
        for key, got in by_point.items():
            metric = "tflops" if key[1] == "prefill" else "gbps"
            cells = [str(got[n][metric]) if n in got else "" for n in names]
            ratio = (f"{got['fa4']['us'] / got['libflashattn']['us']:.2f}"
                     if "fa4" in got and "libflashattn" in got else "")
            f.write(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} x {key[4]}, {key[5]} | {key[6]} | "
                    + " | ".join(cells) + f" | {ratio} |\n")
    print(f"wrote {out_dir / 'serving.csv'} and {out_dir / 'serving.md'}")


if __name__ == "__main__":
    main()
