#!/usr/bin/env python3
"""Writes the seed corpora under fuzz/corpus/ (committed; rerun after changing an input format).

  kernel_name/     every kernel of the default build (tools/generate_kernels.py's list), a name
                   as a Markdown table cell, the seed's numeric dtype codes, odd spacing and case;
  tuning_file/     tuning files as fa_context_save_tuning() writes them (the measured choice
                   table's picks for sm_90), one with stale, malformed and repeated entries, one
                   of another arch, one of a future version, and the regression the fuzzer found;
  config_forward/  fa_config inputs in fuzz_config_forward.cpp's byte layout: valid problems of
                   each dtype and layout the CPU backend takes (packed, padded, heads-major,
                   K/V broadcast over the batch, GQA, causal with rows that see no key, a larger
                   struct), of each 0.3 layout (varlen, KV cache, paged KV cache) and feature
                   (sliding window, softcap, ALiBi per head and per batch, sinks, num_splits, a
                   0.2-sized struct, head_dim_v, FP8 types and descales), one of each kind of
                   refusal, the paged and
                   varlen index
                   paths at the validation bounds and the int32/int64 limits, and the
                   regressions the fuzzer (or a probe) found;
  merge_states/    fa_merge_states inputs in fuzz_merge_states.cpp's byte layout: separate, in
                   place and shared buffers, strided o, raw LSEs, refused overlaps and NULLs, and
                   the regression.
"""
import os
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def write(corpus, name, data):
    path = os.path.join(HERE, "corpus", corpus)
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, name), "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)


def default_kernels():
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([sys.executable, os.path.join(ROOT, "tools", "generate_kernels.py"),
                        "--out", out, "--dtypes", "fp16;bf16", "--head-dims", "64;128;256",
                        "--kernel-set", "default", "--choice-tables",
                        os.path.join(ROOT, "src", "cuda", "heuristic_sm90.txt")], check=True)
        with open(os.path.join(out, "kernels.txt")) as f:
            return f.read().split("\n")[:-1]


def kernel_names(kernels):
    for i, name in enumerate(kernels):
        write("kernel_name", f"registry_{i:02d}", name)
    write("kernel_name", "markdown_cell", f"| {kernels[-1]} | 512.3 |")
    write("kernel_name", "seed_dtype_code", kernels[0].replace("FP16", "5", 1))
    write("kernel_name", "spacing_and_case",
          "( bf16 ,128,  64 ,64, 4 ):  async + swizzled +load_0_0_0_tiles ")


def tuning_files(kernels):
    header = ("libflashattn-tuning 1\n# written by libflashattn 0.2.0; one line per shape:\n"
              "# <dtype> <head_dim>[:<head_dim_v>] <causal> <seqlen_q> <seqlen_k> | <kernel>\n")
    by_shape = {}
    with open(os.path.join(ROOT, "src", "cuda", "heuristic_sm90.txt")) as f:
        for line in f:
            fields = line.split()
            if fields and fields[0] == "pick":
                _, dims, causal, seqlen = fields[:4]  # dims: "128", or "192:128" (head_dim_v)
                d, _, dv = dims.partition(":")
                tail = line.split(" | ")[1].strip()
                for dtype in ("BF16", "FP16"):
                    by_shape[(dtype, int(d), int(dv or d), int(causal), int(seqlen))] = \
                        f"({dtype}, {tail}"
    entries = "".join(f"{dtype} {d if dv == d else f'{d}:{dv}'} {causal} {n} {n} | {name}\n"
                      for (dtype, d, dv, causal, n), name in sorted(by_shape.items())[::7])
    write("tuning_file", "saved_sm90", header + "arch 90\n" + entries)
    write("tuning_file", "stale_and_malformed",
          header + "arch 90\n"
          "BF16 128 0 4096 4096 | (BF16, 128, 128, 48, 4): swizzled+load_4_4_2_tiles\n"
          "BF16 128 zero 64 64 | (BF16, 128, 64, 64, 4): async+load_0_0_0_tiles\n"
          f"FP16 64 1 1024 512 | {kernels[0]}\n"
          f"FP16 64 1 1024 512 | {kernels[0]}\n")
    # Regression: a length of 2^63 - 1 overflowed the kernel lookup's grid size (signed overflow
    # in cuda::cannot_run, reported by UBSan); such shapes are now skipped as unaddressable.
    bf16_256 = next(k for k in kernels if k.startswith("(BF16, 256,"))
    write("tuning_file", "regression_seqlen_int64_max",
          header + f"arch 90\nBF16 256 0 9223372036854775807 1 | {bf16_256}\n")
    write("tuning_file", "other_arch", header + "arch 80\n" + entries.split("\n")[0] + "\n")
    # A value head dim that differs (the head dims written "128:64").
    bf16_128 = next(k for k in kernels if k.startswith("(BF16, 128, 128,"))
    write("tuning_file", "value_head_dim",
          header + f"arch 90\nBF16 128:64 1 2048 2048 | {bf16_128}\n")
    write("tuning_file", "future_version", "libflashattn-tuning 2\narch 90\n")


FP16, BF16, FP32 = 0, 1, 2  # the dtype byte's value % 3
E4M3 = 0xFC  # a raw dtype byte: 0xFC - 0xF8 = FA_DTYPE_E4M3


def config(dtype, causal, lse, sizes, layouts=0, strides=b"", scale=0, struct_size=None,
           wide=False, seed=1, ext=None):
    flags = (1 if lse else 0) | (2 if wide else 0) | (4 if struct_size is not None else 0)
    data = bytes([dtype, causal, flags])
    data += b"".join(struct.pack("<q", s) for s in sizes) if wide else bytes(sizes)
    data += bytes([scale])
    if struct_size is not None:
        data += bytes([struct_size])
    return data + bytes([layouts]) + strides + struct.pack("<Q", seed) + (ext or b"")


DENSE, VARLEN, KV_CACHE, PAGED_KV = 0, 1, 2, 3


def ext(layout=DENSE, window=None, softcap=0, alibi=0, sinks=0, splits=0, fields=(),
        wide_fields=False, all_fields=False, derive_totals=False, short_size=0, args=0,
        null_pick=None, contents=b""):
    """The 0.3 fields appended after the seed (fuzz_config_forward.cpp's layout).

    window: None (off), or (left, right) as i16 bounds; fields: the values of total_q/total_k
    and/or num_pages/page_size/max_pages_per_seq that follow; contents: the index tensors,
    slopes and sinks (u8 each in the friendly encodings)."""
    data = bytes([layout])
    if window is None:
        data += bytes([0])
    else:
        data += bytes([1 | 3 << 1]) + struct.pack("<hh", *window)
    data += bytes([softcap, alibi, sinks, splits])
    data += bytes([(1 if wide_fields else 0) | (2 if all_fields else 0) |
                   (4 if derive_totals else 0)])
    data += b"".join(struct.pack("<q", f) for f in fields) if wide_fields else bytes(fields)
    data += bytes([short_size, args])
    if null_pick is not None:
        data += bytes([null_pick])
    return data + contents


def configs():
    # sizes: batch, seqlen_q, seqlen_k, heads_kv, heads_q / heads_kv, head_dim
    write("config_forward", "bf16_packed", config(BF16, 0, True, [2, 70, 65, 2, 1, 32]))
    write("config_forward", "fp16_causal_empty_rows",
          config(FP16, 1, True, [1, 130, 66, 1, 2, 16]))
    write("config_forward", "fp32_gqa_padded",
          config(FP32, 1, True, [2, 33, 97, 2, 3, 24], layouts=0b01010101,
                 strides=bytes(range(1, 13))))
    heads_major = struct.pack("<HHH", 4 * 8 * 16, 16, 8 * 16)  # [batch, heads, seq, dim]
    write("config_forward", "bf16_heads_major",
          config(BF16, 0, False, [1, 8, 8, 4, 1, 16], layouts=0b10101010, strides=heads_major * 4))
    broadcast = struct.pack("<HHH", 0, 64, 16)  # K and V shared by every batch entry
    write("config_forward", "fp16_kv_broadcast",
          config(FP16, 0, True, [3, 5, 9, 4, 1, 16], layouts=0b00101000, strides=broadcast * 2))
    # The 8 extra bytes are the layouts byte and the seed's first 7, all 0.
    write("config_forward", "fp32_larger_struct",
          config(FP32, 0, True, [1, 1, 1, 1, 1, 1], struct_size=0x88, seed=0))
    write("config_forward", "scale_negative",
          config(BF16, 0, True, [1, 64, 64, 1, 1, 64], scale=100))
    # Refusals: heads_q not a multiple of heads_kv, zero size, o overlapping itself, a negative
    # stride, a NaN scale, struct_size 0.
    write("config_forward", "bad_heads", config(BF16, 0, False, [1, 4, 4, 3, 5, 8], wide=True))
    write("config_forward", "bad_zero_size", config(BF16, 0, False, [1, 0, 4, 1, 1, 8]))
    write("config_forward", "bad_o_overlap",
          config(BF16, 0, False, [1, 4, 4, 1, 1, 8], layouts=0b10000000,
                 strides=struct.pack("<HHH", 32, 4, 8)))
    write("config_forward", "bad_negative_stride",
          config(FP32, 0, False, [1, 4, 4, 1, 1, 8], layouts=0b11,
                 strides=struct.pack("<qqq", 32, -8, 8)))
    write("config_forward", "bad_nan_scale",
          config(FP16, 0, False, [1, 4, 4, 1, 1, 8], scale=0xFF)[:-9]
          + struct.pack("<I", 0x7FC00000) + bytes([0]) + struct.pack("<Q", 1))
    write("config_forward", "bad_struct_size",
          config(BF16, 0, False, [1, 1, 1, 1, 1, 1], struct_size=0))


def inference_configs():
    """Valid inputs of each 0.3 layout and feature, and the regressions the fuzzer found."""
    sizes = [2, 5, 9, 2, 2, 16]  # batch, seqlen_q, seqlen_k, heads_kv, group, head_dim
    write("config_forward", "dense_window_softcap",
          config(BF16, 1, True, sizes, ext=ext(window=(3, -1), softcap=100)))
    write("config_forward", "dense_alibi_per_head_sinks",
          config(FP32, 0, True, sizes, ext=ext(alibi=1, sinks=1,
                                                contents=bytes([10, 200, 0, 255, 128, 1, 250, 40]))))
    write("config_forward", "dense_alibi_per_batch_splits",
          config(FP16, 1, True, sizes, ext=ext(alibi=2, splits=4, contents=bytes(range(3, 67, 8)))))
    # Varlen: the lengths (u8 % (seqlen + 1)) give cu_seqlens; total_q/k follow from them.
    write("config_forward", "varlen_causal",
          config(BF16, 1, True, [3, 8, 12, 1, 2, 16],
                 ext=ext(layout=VARLEN, fields=(0, 0), derive_totals=True,
                         contents=bytes([5, 0, 8, 12, 3, 7]))))
    write("config_forward", "varlen_window_sinks",
          config(FP16, 0, True, [2, 6, 6, 2, 1, 8],
                 ext=ext(layout=VARLEN, window=(2, 1), sinks=1, fields=(9, 7),
                         contents=bytes([6, 3, 4, 3, 7, 250]))))
    write("config_forward", "kv_cache_decode",
          config(BF16, 1, True, [3, 1, 40, 2, 4, 32],
                 ext=ext(layout=KV_CACHE, contents=bytes([40, 0, 17]))))
    write("config_forward", "kv_cache_alibi_softcap",
          config(FP32, 1, True, [2, 4, 20, 1, 3, 8],
                 ext=ext(layout=KV_CACHE, alibi=1, softcap=30, contents=bytes([20, 2, 60, 90, 120]))))
    # Paged: 5 pages of 4 rows, 3 pages per sequence (seqlen_k 10), the table by u8 % 5.
    write("config_forward", "paged_kv_decode",
          config(BF16, 0, True, [2, 2, 10, 2, 2, 16],
                 ext=ext(layout=PAGED_KV, fields=(5, 4, 3), window=(6, 0),
                         contents=bytes([10, 5, 4, 0, 2, 1, 3, 0]))))
    write("config_forward", "paged_kv_page_size_1",
          config(FP16, 1, False, [1, 3, 4, 1, 1, 8],
                 ext=ext(layout=PAGED_KV, fields=(4, 1, 4), sinks=1,
                         contents=bytes([4, 3, 2, 1, 0, 100]))))
    # head_dim_v (its byte follows the contents): DeepSeek's 192/128 causal, a varlen and a
    # paged problem with v narrower and wider than head_dim, and refusals of a negative and a
    # huge value.
    write("config_forward", "head_dim_v_192_128",
          config(BF16, 1, True, [1, 5, 9, 1, 2, 192], ext=ext() + bytes([128])))
    write("config_forward", "head_dim_v_varlen",
          config(FP32, 1, True, [3, 8, 12, 1, 2, 16],
                 ext=ext(layout=VARLEN, fields=(0, 0), derive_totals=True,
                         contents=bytes([5, 0, 8, 12, 3, 7])) + bytes([8])))
    write("config_forward", "head_dim_v_paged_wider",
          config(FP16, 0, True, [2, 2, 10, 2, 2, 16],
                 ext=ext(layout=PAGED_KV, fields=(5, 4, 3), contents=bytes([10, 5, 4, 0, 2, 1, 3, 0]))
                 + bytes([40])))
    write("config_forward", "bad_head_dim_v_negative",
          config(BF16, 0, False, [1, 1, 1, 1, 1, 8], ext=ext() + bytes([0xF0])))
    write("config_forward", "bad_head_dim_v_huge",
          config(BF16, 0, False, [1, 1, 1, 1, 1, 8], ext=ext() + bytes([0xFF])
                 + struct.pack("<q", 2**62)))
    # A 0.2 caller: struct_size ends before layout, so the 0.3 fields set here are ignored.
    write("config_forward", "struct_size_0_2",
          config(BF16, 0, True, [1, 4, 4, 1, 1, 8], ext=ext(layout=VARLEN, fields=(1, 1),
                                                            short_size=1)))
    # Refusals: a NULL cu_seqlens_k, malformed cu_seqlens (raw i32), a page outside the cache,
    # a layout out of range, softcap NaN.
    write("config_forward", "bad_null_cu_seqlens_k",
          config(BF16, 0, False, [1, 4, 4, 1, 1, 8],
                 ext=ext(layout=VARLEN, fields=(4, 4), args=3, null_pick=1, contents=bytes([4, 4]))))
    write("config_forward", "bad_cu_seqlens_decreasing",
          config(BF16, 0, False, [2, 4, 4, 1, 1, 8],
                 ext=ext(layout=VARLEN, fields=(4, 4), args=4,
                         contents=struct.pack("<6i", 0, 5, 4, 0, 2, 4))))
    write("config_forward", "bad_page_index",
          config(BF16, 0, False, [1, 1, 8, 1, 1, 8],
                 ext=ext(layout=PAGED_KV, fields=(2, 4, 2), args=16,
                         contents=bytes([8]) + struct.pack("<2i", 1, 2))))
    write("config_forward", "bad_layout", config(BF16, 0, False, [1, 1, 1, 1, 1, 8],
                                                 ext=ext(layout=0xFC)))
    write("config_forward", "bad_softcap_nan",
          config(BF16, 0, False, [1, 1, 1, 1, 1, 8], ext=ext(softcap=0xFF)[:3]
                 + struct.pack("<I", 0x7FC00000) + ext()[3:]))
    # Regression: page_size near INT64_MAX (a valid config when k and v have seq stride 0) made
    # the CPU check of block_table compute len + page_size - 1, a signed overflow (UBSan).
    kv = struct.pack("<qqq", 8, 0, 0)
    write("config_forward", "regression_paged_page_size_int64_max",
          config(BF16, 0, True, [1, 1, 4, 1, 1, 8], layouts=0b00111100, strides=kv * 2,
                 ext=ext(layout=PAGED_KV, fields=(1, 2**63 - 1, 1), wide_fields=True,
                         contents=bytes([4, 0]))))
    # Regression: window_left = INT64_MAX overflowed i + Sk - Sq - window_left (UBSan); bounds no
    # row can reach now count as unbounded.
    write("config_forward", "regression_window_int64_max",
          config(BF16, 0, True, [1, 4, 1, 1, 1, 8])
          + bytes([DENSE, 1 | 2 << 1]) + struct.pack("<qq", 2**63 - 1, 2**63 - 1) + bytes(8))



def fp8_configs():
    """FP8 (issue 19): the fp8 byte and descales follow the head_dim_v byte (0: head_dim)."""
    def fp8(kv=0, out=0, per_head=False, descales=None):
        tail = bytes([0, kv | out << 3 | (64 if per_head else 0) | (128 if descales else 0)])
        return tail + bytes(descales or [])
    sizes = [2, 5, 9, 2, 2, 16]  # batch, seqlen_q, seqlen_k, heads_kv, group, head_dim
    write("config_forward", "fp8_e4m3_causal_descales",
          config(E4M3, 1, True, sizes, ext=ext() + fp8(descales=[200, 100, 255])))
    write("config_forward", "fp8_e4m3_out_fp16",
          config(E4M3, 0, True, sizes, ext=ext(sinks=1, contents=bytes([3, 250, 128, 60]))
                 + fp8(out=1)))
    # bf16 queries against an e4m3 paged cache of 1-row pages, per-(batch, K/V head) descales
    # for k and v (2 x 2 each).
    write("config_forward", "fp8_bf16_paged_cache_per_head",
          config(BF16, 1, True, [2, 1, 4, 2, 2, 16],
                 ext=ext(layout=PAGED_KV, fields=(9, 1, 4), contents=bytes([4, 3, 0, 1, 2, 3, 4, 5, 6, 7]))
                 + fp8(kv=4, per_head=True, descales=[10, 80, 160, 255, 255, 128, 64, 1])))
    write("config_forward", "bad_fp8_e4m3_q_bf16_cache",
          config(E4M3, 0, False, [1, 1, 1, 1, 1, 8], ext=ext() + fp8(kv=2)))
    write("config_forward", "bad_fp8_fp32_e4m3_cache",
          config(FP32, 0, False, [1, 1, 1, 1, 1, 8], ext=ext() + fp8(kv=4)))
    write("config_forward", "bad_fp8_out_dtype_bf16_q",
          config(BF16, 0, False, [1, 1, 1, 1, 1, 8], ext=ext() + fp8(out=2)))


def extreme_index_configs():
    """The paged and varlen index paths at the validation bounds and the int32/int64 limits
    (issue 14): sizes as i64, the 0.3 fields as i64."""
    wide_kv = struct.pack("<qqq", 8, 0, 0)  # k and v: seq stride 0, so huge pages span little
    bound = 2**60

    def paged(name, batch, num_pages, page_size, max_pages, seqlen_k=1, contents=b"", args=0):
        write("config_forward", name,
              config(FP32, 0, True, [batch, 1, seqlen_k, 1, 1, 8], wide=True,
                     layouts=0b00111100, strides=wide_kv * 2,
                     ext=ext(layout=PAGED_KV, fields=(num_pages, page_size, max_pages),
                             wide_fields=True, args=args, contents=contents)))

    # Regression: 2^61 + 1 pages per sequence passed validation, and the CPU forward wrapped
    # batch * max_pages_per_seq into a wild block-table address (SIGSEGV).
    paged("regression_paged_max_pages_2_61", 2, 1, 1, 2**61 + 1)
    paged("paged_block_table_at_bound", 4, 1, 1, bound // 4)
    paged("paged_block_table_past_bound", 4, 1, 1, bound // 4 + 1)
    paged("paged_int64_max_pages", 1, 1, 1, 2**63 - 1)
    paged("paged_int32_max_page_size", 1, 1, 2**31 - 1, 1, seqlen_k=2**31 - 1)
    paged("paged_int32_max_pages", 3, 2**31 - 1, 1, 2**31 - 1)
    # A small paged problem with raw block_table entries at the int32 limits (refused per run).
    paged("paged_raw_block_table_int32_limits", 2, 4, 1, 2, seqlen_k=2, args=8 | 16,
          contents=struct.pack("<2i", 2, 2) + struct.pack("<4i", -2**31, 2**31 - 1, 0, 1))

    def varlen(name, batch, total_q=1, total_k=1, alibi=0, heads=1, contents=b"", args=0):
        write("config_forward", name,
              config(FP32, 0, True, [batch, 1, 1, heads, heads, 8], wide=True,
                     ext=ext(layout=VARLEN, fields=(total_q, total_k), wide_fields=True,
                             alibi=alibi, args=args, contents=contents)))

    # Regression: a varlen batch of INT64_MAX passed validation, and the overlap check's
    # (batch + 1) * 4 overflowed (UBSan).
    varlen("regression_varlen_batch_int64_max", 2**63 - 1)
    varlen("varlen_batch_at_bound", bound - 1)
    varlen("varlen_batch_past_bound", bound)
    varlen("varlen_alibi_per_batch_past_bound", 2**59, alibi=2, heads=4)
    varlen("varlen_totals_int32_max", 1, total_q=2**31 - 1, total_k=2**31)
    # Raw offsets at the int32 limits (refused per run: they leave [0, total]).
    varlen("varlen_raw_cu_seqlens_int32_limits", 1, total_q=2, total_k=2, args=4,
           contents=struct.pack("<4i", 0, 2**31 - 1, -2**31, 2))


MERGE_SEPARATE, MERGE_IN_PLACE_A, MERGE_IN_PLACE_B, MERGE_ALL_SHARED = 0, 1, 2, 5
MERGE_O_OVERLAPS_OA, MERGE_O_IS_LSE, MERGE_NULL, MERGE_MISALIGNED = 7, 12, 13, 16


def merge(dtype, sizes, alias=MERGE_SEPARATE, arg=0, strides=0, stride_bytes=b"", raw=False,
          seed=1):
    """An input in fuzz_merge_states.cpp's byte layout (u8 sizes: batch, seqlen, heads, dim)."""
    return (bytes([dtype, 8 if raw else 0]) + bytes(sizes) + bytes([strides]) + stride_bytes
            + bytes([alias, arg]) + struct.pack("<Q", seed))


def merges():
    write("merge_states", "bf16_packed", merge(BF16, [2, 7, 3, 16]))
    write("merge_states", "fp16_in_place_a", merge(FP16, [1, 5, 4, 8], alias=MERGE_IN_PLACE_A))
    write("merge_states", "fp32_in_place_b_padded",
          merge(FP32, [2, 3, 2, 4], alias=MERGE_IN_PLACE_B, strides=1, stride_bytes=bytes([1, 2, 3])))
    write("merge_states", "bf16_all_shared_heads_major",
          merge(BF16, [1, 4, 2, 8], alias=MERGE_ALL_SHARED, strides=2,
                stride_bytes=struct.pack("<HHH", 64, 8, 32)))
    write("merge_states", "fp32_raw_lse", merge(FP32, [1, 8, 2, 4], raw=True))
    write("merge_states", "bad_o_overlaps_o_a", merge(BF16, [1, 2, 2, 8], alias=MERGE_O_OVERLAPS_OA,
                                                      arg=5))
    write("merge_states", "bad_null_lse_b", merge(FP16, [1, 2, 2, 8], alias=MERGE_NULL, arg=3))
    # Regression: a CPU merge read misaligned elements where fa_forward refuses them.
    write("merge_states", "regression_misaligned_o_a_fp32", merge(FP32, [1, 2, 2, 8],
                                                                  alias=MERGE_MISALIGNED, arg=6))
    write("merge_states", "bad_misaligned_lse_b", merge(FP16, [1, 2, 2, 8], alias=MERGE_MISALIGNED,
                                                        arg=3 + 6))
    # Regression: o == lse was accepted as "in place" when o's bytes equal the LSEs' (fp16,
    # head_dim 2; fp32, head_dim 1), and the merge wrote each over the other.
    write("merge_states", "regression_o_is_lse", merge(FP16, [1, 49, 58, 2], alias=MERGE_O_IS_LSE))


def main():
    shutil.rmtree(os.path.join(HERE, "corpus"), ignore_errors=True)
    kernels = default_kernels()
    kernel_names(kernels)
    tuning_files(kernels)
    configs()
    inference_configs()
    fp8_configs()
    extreme_index_configs()
    merges()


if __name__ == "__main__":
    main()
