// The sm90 family's narrow pairs (host and device; kernel.cuh instantiates them, launch.cuh
// picks one per problem, tests/cuda/sm90/test_narrow.cpp checks the rules).
#pragma once

#include <cstdint>

namespace fa::cuda::sm90 {

// Narrower MMAs for head dims below a kernel's own (consume_tile's kQkSteps, kVCols): S = Q K^T
// over qk_cols (qk_cols / 16 k16 steps) and O += P V over v_cols, the Q, K and V columns past the
// problem's head dims being zeros (TMA fills them). A padded dim's work is then the next pair's,
// not the kernel's: at 4bbedf2, before the pairs every 16 columns, d 72 on the d 128 kernels ran
// 0.585x and d 136 on the d 192 ones 0.655x the TFLOP/s of their kernels' own dims, computing 96
// (the one narrow variant then) and 192 columns. The pairs are the build's (FA_NARROW_HEAD_DIMS,
// written by tools/generate_kernels.py into each registration: launch.cuh), in ascending order
// of work (qk_cols + v_cols), so the first that fits is the cheapest; the last may be the
// kernel's own width: the plain features with the column bounds for the dims past the other
// pairs (56, 120, 184, 232-248 by default), which otherwise ran the general instantiation, on
// an H200 5-9% under their share of the columns; with it 0.8-2.8% nearer their kernel's speed
// (bf16; 4-10% predicted). Each is a further instantiation (kQkCols, kVCols) with the plain
// one's features and the general one's column bounds; a problem with a narrower dim and a
// general feature (transforms, sinks, splits) runs the general instantiation over the kernel's
// own columns. With the general features the pairs ran at the same speed (0.98-1.01x, H200) in
// 4.1 MB more code (19.8 against 15.7 MB of a bf16 + e4m3 build's sm90 objects). An FP8 tile,
// and a d 192 kernel that holds V in 128 columns (Tile::kDv), take none: the latter runs
// 192 / 128 in its own instantiations.
struct NarrowDims {
  int qk_cols;  // a multiple of 16: wgmma's k16 step is the grain of S = Q K^T
  int v_cols;   // a multiple of 8: wgmma's N
  constexpr bool fits(int64_t head_dim, int64_t head_dim_v) const {
    return head_dim <= qk_cols && head_dim_v <= v_cols;
  }
};

struct NarrowList {
  static constexpr int kMax = 24;  // tools/generate_kernels.py's MAX_NARROW_PAIRS
  int count = 0;
  NarrowDims dims[kMax] = {};
};

template <class T, NarrowList kList>
struct Narrow {
  static constexpr int kCount = T::kFp8 || T::kDv != T::kD ? 0 : kList.count;
  // The first pair that runs the problem's head dims (1-based), or 0: none does, or the tile
  // takes none (then the general instantiation runs them at the kernel's width).
  static constexpr int pick(int64_t head_dim, int64_t head_dim_v) {
    for (int i = 0; i < kCount; ++i) {
      if (kList.dims[i].fits(head_dim, head_dim_v)) return i + 1;
    }
    return 0;
  }
  // The generator's list as launch.cuh's register_kernel requires it: each pair within the tile
  // (its own dims: the pair at its width), qk_cols a multiple of 16 and v_cols of 8, in
  // ascending order of work.
  static constexpr bool valid() {
    for (int i = 0; i < kList.count; ++i) {
      NarrowDims const d = kList.dims[i];
      if (d.qk_cols % 16 != 0 || d.v_cols % 8 != 0 || d.qk_cols < 16 || d.v_cols < 8 ||
          d.qk_cols > T::kD || d.v_cols > T::kD) {
        return false;
      }
      if (i > 0 && kList.dims[i - 1].qk_cols + kList.dims[i - 1].v_cols > d.qk_cols + d.v_cols) {
        return false;
      }
    }
    return kList.count >= 0 && kList.count <= NarrowList::kMax;
  }
};

// A narrow pair's boxes a row's 16 bytes to the left. A 16-bit row that is an odd multiple of 16
// bytes (every padded dim but the multiples of 16: 72, 88, ..., 248) starts 16 bytes into a
// 32-byte sector in every other head of a packed tensor, so each of that head's 64-column boxes
// (128 bytes) spans 5 sectors instead of 4, and the last box shares a sector with the one before:
// d 72's rows move 6 sectors from L2 in odd heads, 5 in even ones. With each head's rows 32-byte
// aligned (flashattn_bench --row-align 16, H200) those dims ran 1.7-9.1% faster
// (docs/performance.md, 2026-11-28). Read from 8 columns left of column 0 (TMA fills a box's
// columns outside the map with zeros and a store skips them), such a head's boxes start on a
// sector: 5 sectors at d 72. Q takes K's shift (the zero columns meet in S = Q K^T), O V's; the
// shifted columns must fit the pair (head_dim + 8 <= qk_cols, head_dim_v + 8 <= v_cols), which
// every padded dim's pair does (an odd multiple of 8 under a multiple of 16).
inline constexpr int kShiftCols = 8;  // 16 bytes of a 16-bit type

// The shift of a tensor's heads as two bits: bit 0, the first head's rows start 16 bytes into a
// sector; bit 1, each next head's start moves by an odd multiple of 16 bytes (so the heads
// alternate). 0 where no head shifts: a type other than 16-bit, columns that would not fit, or a
// row or batch stride that is not a multiple of 32 bytes (a head's rows then start at different
// offsets in a sector, and no one shift aligns them). base: the tensor's address; strides and
// extents as the tensor map's (tensor_map.hpp), in elements.
constexpr int32_t column_shift_bits(uint64_t base, int64_t elem_bytes, int64_t dim, int64_t cols,
                                    int64_t seq_stride, int64_t rows, int64_t head_stride,
                                    int64_t heads, int64_t batch_stride, int64_t batch) {
  auto const in_sector = [](int64_t bytes) { return ((bytes % 32) + 32) % 32; };
  if (elem_bytes != 2 || dim + kShiftCols > cols || base % 16 != 0) return 0;
  if ((rows > 1 && in_sector(seq_stride * 2) != 0) ||
      (batch > 1 && in_sector(batch_stride * 2) != 0)) {
    return 0;
  }
  int32_t const first = base % 32 == 16 ? 1 : 0;
  int32_t const alternate = heads > 1 && in_sector(head_stride * 2) == 16 ? 2 : 0;
  return first | alternate;
}

// The columns head `head`'s boxes start left of column 0: kShiftCols or 0.
constexpr int column_shift(int32_t bits, int head) {
  return ((bits ^ ((bits >> 1) & head)) & 1) * kShiftCols;
}

// The 8-column chunks of O's registers (bit j: columns 8j .. 8j + 7 of the tile) that a bounded
// store writes (epilogue.cuh's store_tile): those from the head's column shift (a shifted head's
// first chunk holds the zeros left of its column 0) up to head_dim_v past it. shift: 0 or
// kShiftCols; head_dim_v: a multiple of 8 with head_dim_v + shift <= 256 (the shift fits the pair).
constexpr uint32_t stored_chunks(int shift, int head_dim_v) {
  int const lo = shift / 8, hi = (head_dim_v + shift) / 8;
  uint32_t const below_hi = hi >= 32 ? ~0u : (1u << hi) - 1u;
  return below_hi & ~((1u << lo) - 1u);
}

// Whether a narrow pair's V map runs over a row's K/V heads as one run of columns
// (Params::v_flat_cols; launch.cuh says why): 16-bit rows that end inside a 32-byte sector
// (head_dim_v an odd multiple of 8), more than one head, and the heads side by side.
constexpr bool flat_v_map(int64_t elem_bytes, int64_t head_dim_v, int64_t heads_kv,
                          int64_t head_stride) {
  return elem_bytes == 2 && head_dim_v % 16 != 0 && heads_kv > 1 && head_stride == head_dim_v;
}

// Whether a narrow pair's Q and K maps take boxes of exactly head_dim columns
// (Params::qk_box_cols; launch.cuh says why): 16-bit rows that end inside a 32-byte sector, on
// a kernel whose rows are one 64-column box (d 64: the pairs up to 64), so a box never reaches
// past the problem's columns and the pair's columns past it stay the zeros written at the
// kernel's start.
constexpr bool exact_qk_boxes(int64_t elem_bytes, int64_t head_dim, int kernel_d) {
  return elem_bytes == 2 && head_dim % 16 != 0 && kernel_d == 64;
}

}  // namespace fa::cuda::sm90
