#include "cuda/family.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <string>

namespace fa::cuda {

int64_t unsplit_blocks(int B_r, Problem const& p, bool pack_gqa) {
  int64_t const group = pack_gqa ? p.heads_q / p.heads_kv : 1;
  int64_t const n_q_blocks = (p.seqlen_q * group + B_r - 1) / B_r;
  return n_q_blocks * (pack_gqa ? p.heads_kv : p.heads_q) * p.batch;
}

bool needs_general(Problem const& p, int d_head, int d_head_v, bool pack_gqa, int num_splits) {
  // A negative scale is general too: the plain softmax folds the scale into exp2 of raw scores.
  return p.layout == Layout::kPagedKv || p.fp8() || p.softcap > 0.f || p.alibi != Alibi::kNone ||
         p.sinks || p.softmax_scale < 0.f || pack_gqa || num_splits > 1 || p.head_dim < d_head ||
         p.head_dim_v < d_head_v;
}

std::string head_dim_below(KernelConfig const& k, Problem const& p, char const* family) {
  if (p.head_dim == k.d_head || (p.head_dim % 8 == 0 && p.head_dim >= 8)) return {};
  return "head_dim = " + std::to_string(p.head_dim) + " is not a multiple of 8 (the " + family +
         " family runs a smaller head dim than its own in 16-byte column units)";
}

std::string value_dim_differs(Problem const& p, char const* family) {
  if (p.head_dim_v == p.head_dim) return {};
  if (p.head_dim_v < p.head_dim && p.head_dim_v % 8 == 0) return {};
  return "head_dim_v = " + std::to_string(p.head_dim_v) + " with head_dim = " +
         std::to_string(p.head_dim) + ": the " + family +
         " family's kernels read V and write O with a head_dim_v that is a multiple of 8 up to "
         "head_dim (the columns past it zero-filled on load, never written)";
}

std::string e4m3_strides(Problem const& p) {
  struct Stride {
    char const* name;
    int64_t value;
  };
  bool const q8 = p.dtype == DType::kE4M3;
  for (Stride s : {Stride{"q_batch_stride", q8 ? p.q.batch : 0},
                   Stride{"q_seq_stride", q8 ? p.q.seq : 0},
                   Stride{"q_head_stride", q8 ? p.q.head : 0},
                   Stride{"k_batch_stride", p.k.batch}, Stride{"k_seq_stride", p.k.seq},
                   Stride{"k_head_stride", p.k.head}, Stride{"v_batch_stride", p.v.batch},
                   Stride{"v_seq_stride", p.v.seq}, Stride{"v_head_stride", p.v.head}}) {
    if (s.value % 16 != 0) {
      return "fa_config." + std::string(s.name) + " = " + std::to_string(s.value) +
             " is not a multiple of 16 elements, which the GPU kernels need of e4m3 tensors "
             "(16-byte rows)";
    }
  }
  return {};
}

size_t split_workspace_bytes(Problem const& p, int num_splits) {
  // [num_splits, rows, heads_q, head_dim_v] partial outputs (O's columns) and
  // [num_splits, heads_q, rows] LSEs.
  size_t const floats = size_t(num_splits) * size_t(p.q_rows()) * size_t(p.heads_q) *
                        size_t(p.head_dim_v + 1);
  return (floats * sizeof(float) + 255) / 256 * 256;
}

int choose_splits(Problem const& p, int64_t base, int64_t capacity, int64_t sms, int B_c,
                  bool allow_split) {
  // Partials are indexed by int32 rows, and the combine kernel has a warp per (row, head).
  if (p.q_rows() * p.heads_q > INT32_MAX) return 1;
  if (p.num_splits > 0) return p.num_splits;
  if (!allow_split) return 1;
  int64_t const key_blocks = (p.seqlen_k + B_c - 1) / B_c;
  // A split reads ceil(key_blocks / n) key blocks (both families' kernels), so where n does
  // not divide them the last splits may get none: 33 splits of 512 key blocks are 32 of 16 and
  // an empty one, whose block and partial cost the step without reading a key (H200, batch 1,
  // d 128, 32/8 heads, decode_bench: 33 against 32 splits at 64k and 128k ran 0.94-0.98x with
  // bf16 and e4m3 caches, pages 0, 1, 16 and 64; docs/performance.md session 67). Each rule
  // decides on its count as before and returns the splits that count leaves non-empty (the
  // same key blocks a split, on fewer blocks). Judging the non-empty count instead turned
  // waves the rule had taken into one block an SM at many lengths (batch 2 at 65-70 key
  // blocks: 13 non-empty of 16 is under 90% of the slots, so 8 splits).
  auto non_empty = [&](int64_t n) {
    if (n <= 1) return n;
    int64_t const per_split = (key_blocks + n - 1) / n;
    return (key_blocks + per_split - 1) / per_split;
  };
  // Where more than one block fits per SM (the mma.sync decode tiles), one wave of resident
  // blocks holding 90% of the slots or more comes first, with splits of 4 to 32 key blocks.
  // Measured on the H200 (d 128, 32/8 heads, bf16 and e4m3 caches, pages 0 and 16,
  // decode_bench; docs/performance.md sessions 66 and 67) against the rules below: splits of
  // 4-6.4 key blocks (batch 2 and 3 at 8k, 4-6 at 4k, 8 at 2k: 16, 11, 8, 6, 5 and 4 splits
  // against 8, 5, 4, 3, 2 and 2 of one block an SM) 1.04-1.37x; of 16 and 32 (batch 2 at 32k
  // and 64k: 16 splits against two full waves of 33) 1.05-1.20x; of 11-13 (batches 5 and 6 at
  // 8k: 6 and 5 splits, 0.91 of the slots, against 13 and 11) 1.05-1.12x, of 21-26 (at 16k)
  // 0.99-1.08x; batch 1 at 120-263 key blocks (15k-33.7k keys), 25-33 non-empty splits of 4-8
  // key blocks against 16 of one block an SM (timed at 16k, 21000, 24k, 25000 and 32k keys,
  // with combine.cu's 32-wide combine): pages of 1 and 16 1.10-1.22x, contiguous caches
  // 0.97-1.08x. Longer splits keep the rules below (that wave of 0.91 ran 0.97-1.04x at 43-102
  // key blocks).
  if (capacity > sms && base < capacity) {
    int64_t const one_wave = std::min(key_blocks / 4, capacity / std::max<int64_t>(base, 1));
    if (one_wave > 1 && one_wave <= 256 && 10 * base * one_wave >= 9 * capacity &&
        key_blocks <= 32 * one_wave) {
      return static_cast<int>(non_empty(one_wave));
    }
  }
  // Otherwise (a wave under 90% of the slots, or splits past 32 key blocks), filling every
  // resident slot pays only while each split still reads 8 key blocks or more; with fewer, a
  // split's fixed cost (its query tile, the pipeline's fill, its partial's write) dominates and
  // one block per SM is faster. Measured on the H200 with the mma.sync family's decode kernel
  // (2 resident per SM, B_c 128; d 128, 32/8 heads; decode_bench --splits): batch 8 x 4k, 4
  // splits of 8 key blocks (256 blocks) 42.1 us, 2 splits 46.6; batch 1 x 4k, 16 splits of 2
  // key blocks (128 blocks) 12.9 us, 20 splits (160 blocks) 15.8, 33 splits of one key block
  // 17.7. (Where one block fits per SM the two are the same, and the rule below decides.)
  if (capacity > sms && base < capacity && key_blocks / std::max<int64_t>(capacity / base, 1) < 8) {
    int64_t const per_sm = std::min({int64_t{256}, sms / std::max<int64_t>(base, 1), key_blocks / 2,
                                     INT32_MAX / std::max<int64_t>(base, 1)});
    if (per_sm >= 2) return static_cast<int>(non_empty(per_sm));
  }
  // Fill one wave of resident blocks when the unsplit grid leaves SMs idle (decode), with each
  // split keeping at least 4 key blocks so its partial output (one row of d floats) stays small
  // against the keys it reads. Among the counts up to twice that, take the one whose last wave is
  // fullest (ties: fewer splits).
  int64_t const most = std::min<int64_t>({256, key_blocks / 4, INT32_MAX / std::max<int64_t>(base, 1)});
  int splits = 1;
  if (base < capacity && most > 1) {
    int64_t const target = std::min(most, (capacity + base - 1) / base);
    double best = 0.0;
    for (int64_t n = std::max<int64_t>(1, target / 2); n <= std::min(most, 2 * target); ++n) {
      double const waves = double(base * n) / double(capacity);
      double const efficiency = waves / std::ceil(waves);
      if (efficiency > best + 1e-9) {
        best = efficiency;
        splits = static_cast<int>(n);
      }
    }
  }
  return static_cast<int>(non_empty(splits));
}

ForwardParams forward_params(Problem const& p, int B_r, Schedule const& s) {
  ForwardParams f{};
  f.q_batch_stride = p.q.batch;
  f.q_seq_stride = p.q.seq;
  f.q_head_stride = p.q.head;
  f.k_batch_stride = p.k.batch;
  f.k_seq_stride = p.k.seq;
  f.k_head_stride = p.k.head;
  f.v_batch_stride = p.v.batch;
  f.v_seq_stride = p.v.seq;
  f.v_head_stride = p.v.head;
  f.o_batch_stride = p.o.batch;
  f.o_seq_stride = p.o.seq;
  f.o_head_stride = p.o.head;
  f.seqlen_q = static_cast<int32_t>(p.seqlen_q);
  f.seqlen_k = static_cast<int32_t>(p.seqlen_k);
  f.heads_q = static_cast<int32_t>(p.heads_q);
  f.batch = static_cast<int32_t>(p.batch);
  f.head_dim = static_cast<int32_t>(p.head_dim);
  f.head_dim_v = static_cast<int32_t>(p.head_dim_v);
  f.q_heads_per_kv = static_cast<int32_t>(p.heads_q / p.heads_kv);
  f.pack_gqa = s.pack_gqa ? 1 : 0;
  f.head_units = static_cast<int32_t>(s.pack_gqa ? p.heads_kv : p.heads_q);
  int64_t const rows = p.seqlen_q * (s.pack_gqa ? f.q_heads_per_kv : 1);
  f.n_q_blocks = static_cast<int32_t>((rows + B_r - 1) / B_r);
  f.num_splits = s.num_splits;
  f.key_split = s.key_split ? 1 : 0;

  f.layout = static_cast<int32_t>(p.layout);
  f.total_q = static_cast<int32_t>(p.total_q);
  f.total_k = static_cast<int32_t>(p.total_k);
  // Block-table entries are int32, so pages past INT32_MAX cannot be named; clamping keeps a pool
  // of 2^31 pages or more (never rejected by validation) from wrapping negative, which would
  // let the kernels' clamp into [0, num_pages) admit negative pages.
  f.num_pages = static_cast<int32_t>(std::min<int64_t>(p.num_pages, INT32_MAX));
  f.page_size = static_cast<int32_t>(p.page_size);
  f.max_pages_per_seq = static_cast<int32_t>(p.max_pages_per_seq);

  // 2^40 exceeds any distance between int32 positions: an unbounded side.
  constexpr int64_t kUnbounded = int64_t(1) << 40;
  f.window_left = p.window && p.window_left >= 0 ? p.window_left : kUnbounded;
  f.window_right = p.window && p.window_right >= 0 ? p.window_right : kUnbounded;
  if (p.causal) f.window_right = std::min<int64_t>(f.window_right, 0);
  f.masked = f.window_left != kUnbounded || f.window_right != kUnbounded ? 1 : 0;

  constexpr double kLog2e = 1.4426950408889634;
  constexpr double kLn2 = 0.6931471805599453;
  // Raw scores with the scale folded into exp2 need a positive scale and no per-score function.
  f.transform = p.softcap > 0.f || p.alibi != Alibi::kNone || p.softmax_scale < 0.f ? 1 : 0;
  f.softmax_scale = p.softmax_scale;
  f.score_scale_log2 = f.transform ? 1.f : static_cast<float>(p.softmax_scale * kLog2e);
  f.lse_scale = f.transform ? static_cast<float>(kLn2) : p.softmax_scale;
  f.softcap = p.softcap;
  f.inv_softcap = p.softcap > 0.f ? 1.f / p.softcap : 0.f;
  f.alibi = static_cast<int32_t>(p.alibi);
  f.partial_rows = static_cast<int32_t>(p.q_rows());
  f.kv_e4m3 = p.kv_dtype == DType::kE4M3 ? 1 : 0;
  f.o_bf16 = p.out_dtype == DType::kBF16 ? 1 : 0;
  f.descale_per_head = p.descale_per_head ? 1 : 0;
  return f;
}

}  // namespace fa::cuda
