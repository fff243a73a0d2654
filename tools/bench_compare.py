#!/usr/bin/env python3
"""Dense prefill on the FA-paper grid: libflashattn against FlashAttention-4, cuDNN and FA2, in one
process, timed the way a serving or training loop runs them.

    FLASHATTN_LIBRARY=build/libflashattn.so.0 PYTHONPATH=bindings/python \\
        python3 tools/bench_compare.py --out results/ [--dtype bf16,fp16] [--bench build/bench/flashattn_bench]

Grid (FA2/FA3 papers): hidden 2048 (heads = 2048 / d; 32 where d does not divide 2048), batch =
16384 / seqlen, seqlen 512..16384, d 64/128/256, causal off and on; `--head-dims 192:128` names a
value head dim below the key's (DeepSeek's prefill), v and the output then (..., 128). Backends, on the same random-normal q, k, v of shape
(batch, seqlen, heads, d):
- libflashattn: `flashattn.forward` (the library's built-in choice through the public API);
- fa4: FlashAttention-4's `flash_attn.cute.flash_attn_func` (its sm90 forward is FA3's algorithm;
  installed with ../shared/tools/fa4-baseline);
- cudnn and fa2: PyTorch SDPA with the CUDNN_ATTENTION and FLASH_ATTENTION backends forced (on
  the transposed (batch, heads, seqlen, d) views of the same tensors).
Timing: calls back to back between two CUDA events until --window-ms (200) have passed (the GPU
never waits for the host), the median of --repeats (3) such windows; the backends take turns
window by window at each point, so a GPU that a previous job left hot slows them alike. Before
timing, every backend's output is compared with ours (max |difference|); one that computes
something else is not timed. A backend that is missing or refuses a point leaves it empty.
--softcap X (> 0) soft-caps every score (Gemma 2's X tanh(s / X)): ours and FA4 run it, SDPA's
backends refuse; --alibi adds ALiBi with the usual slopes 2^(-8 (h + 1) / heads): ours alone (FA4
and SDPA's flash backends have none). Both run the library's general instantiation (kernel.cuh).

TFLOP/s = 2 * batch * heads * seqlen^2 * (d + d_v) / time (4 B H S^2 D where d_v = d), halved for
causal. Writes results.csv (one
row per point and backend, with the GPU's name), performance.md (per dtype: TFLOP/s, ours over
each baseline, geometric means and minima) and, where matplotlib is installed, chart-<dtype>.png.
With --bench, flashattn_bench names the kernel the library picks at each point (a column).
"""
import argparse
import csv
import io
import os
import subprocess
import sys
from pathlib import Path

from bench_report import geomean, grid_chart, stepper, time_backends

try:
    import flashattn
except ImportError:  # not installed: this checkout's package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bindings" / "python"))
    import flashattn

SEQLENS = [512, 1024, 2048, 4096, 8192, 16384]
HEAD_DIMS = [64, 128, 256]
TOKENS, HIDDEN = 16384, 2048
BASELINES = ["fa4", "cudnn", "fa2"]


def ints(text):
    return [int(x) for x in text.split(",")]


def head_dims(text):
    """'64,192:128' -> [(64, 64), (192, 128)]: (head dim, value head dim)."""
    dims = []
    for item in text.split(","):
        d, _, dv = item.partition(":")
        dims.append((int(d), int(dv or d)))
    return dims


def heads_for(d):
    return HIDDEN // d if HIDDEN % d == 0 else 32


def dim_label(d, dv):
    return str(d) if d == dv else f"{d}:{dv}"


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--dtype", default="bf16", help="comma-separated: bf16, fp16")
    ap.add_argument("--head-dims", type=head_dims, default=[(d, d) for d in HEAD_DIMS],
                    help="comma-separated d or d:d_v (value head dim)")
    ap.add_argument("--seqlens", type=ints, default=SEQLENS)
    ap.add_argument("--causal", type=ints, default=[0, 1])
    ap.add_argument("--window-ms", type=float, default=200.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--backends", default="libflashattn," + ",".join(BASELINES),
                    help="comma-separated subset of libflashattn,fa4,cudnn,fa2")
    ap.add_argument("--bench", help="flashattn_bench, to name the library's pick per point")
    ap.add_argument("--softcap", type=float, default=0.0,
                    help="soft-cap every score at this value (0: off)")
    ap.add_argument("--alibi", action="store_true", help="ALiBi with the usual slopes")
    args = ap.parse_args()
    if not args.softcap >= 0 or args.softcap == float("inf"):
        ap.error(f"--softcap {args.softcap}: 0 (off) or a finite positive value")
    if (args.softcap > 0 or args.alibi) and args.backends.split(",")[0] != "libflashattn":
        # The first backend's output is every other's reference: one without the transform
        # would refuse the point and end the run.
        ap.error("--softcap and --alibi need libflashattn as the first of --backends")
    return args


def alibi_slopes(heads):
    """The usual ALiBi slopes, 2^(-8 (h + 1) / heads) for head h (Press et al.)."""
    return [2.0 ** (-8.0 * (h + 1) / heads) for h in range(heads)]


def flops(batch, heads, seqlen, d, dv, causal):
    return 2.0 * batch * heads * seqlen * seqlen * (d + dv) / (2.0 if causal else 1.0)


def backends(torch, wanted, softcap=0.0, alibi=False):
    """name -> function(q, k, v, causal) returning a callable that runs one call and the output
    of a first call (or raising where the backend refuses the point: NotImplementedError for a
    score transform it does not have)."""
    found = {}

    def ours(q, k, v, causal):
        out = q.new_empty(*q.shape[:-1], v.shape[-1])
        slopes = (torch.tensor(alibi_slopes(q.shape[2]), device=q.device, dtype=torch.float32)
                  if alibi else None)

        def step():
            flashattn.forward(q, k, v, causal=causal, softcap=softcap, alibi_slopes=slopes,
                              out=out)
        step()
        return step, out

    found["libflashattn"] = ours
    try:
        from flash_attn.cute import flash_attn_func

        def fa4(q, k, v, causal):
            if alibi:
                raise NotImplementedError("FlashAttention-4 has no ALiBi")
            return stepper(lambda: flash_attn_func(q, k, v, causal=causal, softcap=softcap))

        found["fa4"] = fa4
    except ImportError as e:
        print(f"FlashAttention-4 not importable ({e}): left out", file=sys.stderr)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def sdpa(backend):
        def make(q, k, v, causal):
            if softcap > 0 or alibi:
                raise NotImplementedError("SDPA's flash backends have no score transforms")
            qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))

            def call():
                with sdpa_kernel(backend):
                    return torch.nn.functional.scaled_dot_product_attention(qt, kt, vt,
                                                                            is_causal=causal)
            step, out = stepper(call)
            return step, out.transpose(1, 2)
        return make

    found["cudnn"] = sdpa(SDPBackend.CUDNN_ATTENTION)
    found["fa2"] = sdpa(SDPBackend.FLASH_ATTENTION)
    return {name: make for name, make in found.items() if name in wanted}


def kernel_names(args, dtype):
    """(d, dv, causal, seqlen) -> the library's pick, from flashattn_bench (one short window
    each)."""
    if not args.bench:
        return {}
    cmd = [args.bench, "--csv", "--dtype", dtype, "--window-ms", "1", "--iters", "1",
           "--head-dims", ",".join(str(d) if d == dv else f"{d}:{dv}" for d, dv in args.head_dims),
           "--causal", ",".join(map(str, args.causal)),
           "--seqlens", ",".join(map(str, args.seqlens))]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    # An older bench writes no head_dim_v column (its head dims are equal).
    return {(int(r["head_dim"]), int(r.get("head_dim_v") or r["head_dim"]), int(r["causal"]),
             int(r["seqlen"])): r["kernel"] for r in csv.DictReader(io.StringIO(out))}


def table(gpu, dtype, rows, names, window_ms, repeats, transforms=""):
    """The markdown table of one dtype: TFLOP/s per backend, ours over each baseline;
    `transforms` names the score transforms every point ran with."""
    base = [n for n in BASELINES if n in names]
    by_point = {}
    for r in rows:
        if r["dtype"] == dtype:
            key = (r["head_dim"], r["head_dim_v"], r["causal"], r["seqlen"])
            by_point.setdefault(key, {})[r["backend"]] = r
    lines = [f"GPU: {gpu}; {dtype}; TFLOP/s = 4 B H S^2 D / time (halved for causal), batch = "
             "16384 / S, heads = 2048 / D (32 where D does not divide 2048; D:D_v counts "
             f"2 B H S^2 (D + D_v)); back-to-back calls in >= {window_ms:g} ms windows, median of "
             f"{repeats}." + (f" Every score: {transforms}." if transforms else ""),
             "", "| " + " | ".join(["D", "causal", "S", *names, *(f"ours / {n}" for n in base),
                                     "kernel"]) + " |",
             "|" + "---|" * (4 + len(names) + len(base))]
    ratios = {n: [] for n in base}
    for (d, dv, c, s), got in sorted(by_point.items()):
        cells = [f"{got[n]['tflops']:.1f}" if n in got else "" for n in names]
        rcells = []
        for n in base:
            if n in got and "libflashattn" in got:
                ratio = got["libflashattn"]["tflops"] / got[n]["tflops"]
                ratios[n].append(ratio)
                rcells.append(f"{ratio:.3f}")
            else:
                rcells.append("")
        kernel = got.get("libflashattn", {}).get("kernel", "")
        lines.append(f"| {dim_label(d, dv)} | {c} | {s} | " + " | ".join(cells + rcells)
                     + (f" | `{kernel}` |" if kernel else " | |"))
    lines.append("")
    for n in base:
        if ratios[n]:
            lines.append(f"- ours / {n}: geometric mean **{geomean(ratios[n]):.3f}** over "
                         f"{len(ratios[n])} points, minimum {min(ratios[n]):.3f}, "
                         f"maximum {max(ratios[n]):.3f}")
    return lines


def main():
    args = parse_args()
    import torch

    gpu = torch.cuda.get_device_name()
    print(f"GPU: {gpu}; libflashattn {flashattn.version()} "
          f"({os.environ.get('FLASHATTN_LIBRARY', 'found by the package')}); torch "
          f"{torch.__version__}, cuDNN {torch.backends.cudnn.version()}", flush=True)
    found = backends(torch, args.backends.split(","), args.softcap, args.alibi)
    names = list(found)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    gen = torch.Generator(device="cuda").manual_seed(2026)
    for dtype_name in args.dtype.split(","):
        dtype = torch.bfloat16 if dtype_name == "bf16" else torch.float16
        picks = kernel_names(args, dtype_name)
        for d, dv in args.head_dims:
            for causal in args.causal:
                for s in args.seqlens:
                    b, h = TOKENS // s, heads_for(d)
                    q, k, v = (torch.randn(b, s, h, dim, device="cuda", dtype=dtype,
                                           generator=gen) for dim in (d, d, dv))
                    medians = time_backends(torch, found, (q, k, v, bool(causal)),
                                            f"d{dim_label(d, dv)} causal{causal} s{s}",
                                            args.window_ms, args.repeats)
                    for name, ms in medians.items():
                        rows.append(dict(gpu=gpu, dtype=dtype_name, head_dim=d, head_dim_v=dv,
                                         causal=causal,
                                         seqlen=s, backend=name, us=round(ms * 1e3, 2),
                                         tflops=round(flops(b, h, s, d, dv, causal) / (ms * 1e-3)
                                                      / 1e12, 1),
                                         kernel=picks.get((d, dv, causal, s), "")
                                         if name == "libflashattn" else "",
                                         softcap=args.softcap, alibi=int(args.alibi)))
                        print(",".join(str(x) for x in rows[-1].values()), flush=True)
                    del q, k, v
                    torch.cuda.empty_cache()
    with open(out_dir / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    lines = []
    for dtype_name in args.dtype.split(","):
        transforms = ", ".join(([f"soft-capped at {args.softcap:g}"] if args.softcap else [])
                               + (["ALiBi"] if args.alibi else []))
        lines += table(gpu, dtype_name, rows, names, args.window_ms, args.repeats,
                       transforms) + [""]
    (out_dir / "performance.md").write_text("\n".join(lines))
    print("\n".join(lines))

    for dtype_name in args.dtype.split(","):
        tf = {(r["backend"], dim_label(r["head_dim"], r["head_dim_v"]), r["causal"],
               r["seqlen"]): r["tflops"] for r in rows if r["dtype"] == dtype_name}

        def draw(ax, d, c):
            width = 0.8 / len(names)
            for i, name in enumerate(names):
                ys = [tf.get((name, d, c, s), 0) for s in args.seqlens]
                ax.bar([j + i * width for j in range(len(args.seqlens))], ys, width, label=name)
            ax.set_xticks([j + 0.4 - width / 2 for j in range(len(args.seqlens))])
            ax.set_xticklabels([str(s) for s in args.seqlens])

        grid_chart(str(out_dir / f"chart-{dtype_name}.png"),
                   [dim_label(d, dv) for d, dv in args.head_dims], draw, dpi=90)


if __name__ == "__main__":
    main()
