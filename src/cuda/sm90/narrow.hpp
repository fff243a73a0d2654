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

}  // namespace fa::cuda::sm90
