// The sm90 family's softmax and masking, on the wgmma accumulator layout: a consumer thread holds
// two rows of its warpgroup's 64 (r0 and r0 + 8), values i with (i & 2) == 0 belonging to r0, and
// the four threads of a quad together hold a whole row.
#pragma once

#include <cstdint>

#include "cuda/forward_params.hpp"
#include "cuda/ptx.cuh"

namespace fa::cuda::sm90 {

namespace detail {

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

}  // namespace detail

// Where one thread's rows sit against the keys of its sequence, for masks and ALiBi.
struct RowFrame {
  int64_t diag0;    // key index on the diagonal of the thread's first row
  int64_t wg_diag;  // key index on the diagonal of its warpgroup's first row
  int sk;           // the sequence's keys
  int lane;
  float slope;      // ALiBi, in log2 units like the transformed scores (0 without)
};

// Which part of a block's softmax step a call runs (kernel.cuh's step, mainloop_mma.cuh).
enum class SoftmaxPart { kAll, kMax, kExp };

// One tile's running row statistics and its block step.
template <class T>
struct OnlineSoftmax {
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.f, 0.f};

  // A row keeps its running maximum until a block's exceeds it by more than kStaleLog2 in the
  // base-2 exponent (a factor 2^8): its probabilities then reach at most 2^8 (in range for fp32
  // sums and for bf16 and fp16 P alike, whose relative rounding does not depend on the
  // magnitude), and O is rescaled only in the blocks where a row moved its maximum: the first of
  // a tile, then rarely (standard-normal scores peak near 2.6 over 128 keys and 4.1 over 16k,
  // 2.2 apart in log2 units). The LSE and the final division use the maximum the sums were
  // taken against, so the result is the same up to rounding. Rescaling O every block cost
  // kDv / 2 FMULs per thread between a block's P V and the next one's issue (128 at d 256).
  //
  // An FP8 tile rounds P to e4m3 for P V, whose 3 mantissa bits hold the same relative
  // precision from 2^-6 to 448 (subnormals down to 2^-9): its rows keep a maximum only within a
  // factor 2 (kStaleLog2 1) and their probabilities carry 2^7 (kPBias, added to the exponent for
  // free), so P lies in [0, 256] and the smallest probabilities kept at full precision fall from
  // 2^-6 to 2^-13 of the row's maximum. The sums carry the factor too; the epilogue takes it out
  // (kSumScale) of the sums and of O.
  static constexpr float kStaleLog2 = T::kFp8 ? 1.f : 8.f;
  static constexpr float kPBias = T::kFp8 ? 7.f : 0.f;
  static constexpr float kSumScale = T::kFp8 ? 1.f / 128.f : 1.f;

  // Masks the scores of the key block starting at key0 and turns them into unnormalised
  // probabilities in place, updating the row statistics; returns in `rescale` the factor O must
  // be multiplied by before this block's P V is added, and whether either of the thread's rows has
  // a factor other than 1. With `transform` each score is first
  // rewritten as log2 e * bias(softcap(scale * s)) and `c` (the exponent's scale, per row: the
  // e4m3 instantiation's bf16 rows carry a power of two each) is 1.
  __device__ __forceinline__ bool step(ForwardParams const& p, RowFrame const& f, bool transform,
                                       float const (&c)[2], int64_t key0,
                                       float (&sc)[T::kBc / 2],
                                       float (&rescale)[2]) {
    mask(p, f, transform, key0, sc);
    // The scale is folded into one FFMA per score before the MUFU.EX2: 2^(s c - m c). Row by
    // row, each row's maximum and then its exponentials.
    bool moved = false;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      moved |= row_max_step(r, c, sc, rescale);
      row_exp_step(r, c, sc, rescale);
    }
    return moved;
  }
  // step()'s mask, and both rows' maxima and O's factors; exp_part then runs both rows'
  // exponentials and sums (step() with its rows' parts reordered).
  __device__ __forceinline__ bool step_max(ForwardParams const& p, RowFrame const& f,
                                           bool transform, float const (&c)[2], int64_t key0,
                                           float (&sc)[T::kBc / 2], float (&rescale)[2]) {
    mask(p, f, transform, key0, sc);
    bool moved = false;
#pragma unroll
    for (int r = 0; r < 2; ++r) moved |= row_max_step(r, c, sc, rescale);
    return moved;
  }

  // The score transforms and the mask of step(), in place.
  __device__ __forceinline__ void mask(ForwardParams const& p, RowFrame const& f, bool transform,
                                       int64_t key0, float (&sc)[T::kBc / 2]) {
    if (transform) {
      // ALiBi's distance |i + sk - sq - j| from each row's diagonal offset within the block,
      // less this thread's first column (2 (lane % 4)), so that each score subtracts a constant
      // (its column's offset from that first one): with the column itself, ptxas hoisted the
      // block's Bc / 4 columns as floats out of the key loop and spilled them (132 bytes at d
      // 128 with 176 keys).
      float const diag[2] = {float(f.diag0 - key0 - 2 * (f.lane % 4)),
                             float(f.diag0 + 8 - key0 - 2 * (f.lane % 4))};
#pragma unroll
      for (int i = 0; i < T::kBc / 2; ++i) {
        float y = sc[i] * p.softmax_scale;
        if (p.softcap > 0.f) y = p.softcap * tanhf(y * p.inv_softcap);
        y *= 1.4426950408889634f;
        if (p.alibi != 0) {
          y -= f.slope * fabsf(diag[(i >> 1) & 1] - float(8 * (i / 4) + (i & 1)));
        }
        sc[i] = y;
      }
    }
    // Mask: keys past the sequence, and outside each row's window (causal caps its right bound
    // at the diagonal). Blocks clear of every bound of this warpgroup's 64 rows skip it; a block
    // clear of the left bound (every block without a sliding window) tests the right one only:
    // one integer compare per score instead of two (the compares were 5% of the instructions
    // at d 128, causal 512).
    bool const left = key0 < f.wg_diag + 63 - p.window_left;
    if (left || key0 + T::kBc > f.sk || key0 + T::kBc - 1 > f.wg_diag + p.window_right) {
      // Each row's visible columns of the block as a range [lo, hi], clamped to 32 bits once,
      // so the per-score test is integer compares (not 64-bit key arithmetic); both less this
      // thread's first column (2 (lane % 4)), so that each score compares its column's constant
      // offset from that one (as ALiBi's distance above).
      int lo[2], hi[2];
      int const first = 2 * (f.lane % 4);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        int64_t const diag = f.diag0 + 8 * r - key0;
        int64_t const last = min(diag + p.window_right, int64_t(f.sk) - 1 - key0);
        hi[r] = int(max(min(last, int64_t(T::kBc)), int64_t(-1))) - first;
        lo[r] = int(max(min(diag - p.window_left, int64_t(T::kBc)), int64_t(0))) - first;
      }
      if (left) {
#pragma unroll
        for (int i = 0; i < T::kBc / 2; ++i) {
          int const col = 8 * (i / 4) + (i & 1);
          int const r = (i >> 1) & 1;
          if (col < lo[r] || col > hi[r]) sc[i] = -INFINITY;
        }
      } else {
#pragma unroll
        for (int i = 0; i < T::kBc / 2; ++i) {
          int const col = 8 * (i / 4) + (i & 1);
          if (col > hi[(i >> 1) & 1]) sc[i] = -INFINITY;
        }
      }
    }
  }

  // A row's maximum and O's factor (returns whether the row moved its maximum), and then its
  // exponentials and sum: step() runs them row by row; the FP8 d 256 tiles' plain
  // instantiation (kernel.cuh's kSplitSoftmax) both rows' maxima (step_max), then its wait for
  // the previous block's P V, then both rows' exponentials (exp_part) and P's packing.
  __device__ __forceinline__ bool row_max_step(int r, float const (&c)[2],
                                               float const (&sc)[T::kBc / 2],
                                               float (&rescale)[2]) {
    float mx = row_max[r];
#pragma unroll
    for (int i = 0; i < T::kBc / 2; ++i) {
      if (((i >> 1) & 1) == r) mx = fmaxf(mx, sc[i]);
    }
    mx = detail::quad_max(mx);
    // False where the row had no maximum yet (-inf against a finite one: +inf); true where it
    // still has none (both -inf: NaN), so a row with no visible key yet does not make its
    // warpgroup rescale O every block. Selects, so both rows' exponentials stay in one basic
    // block for the scheduler.
    bool const keep = !((mx - row_max[r]) * c[r] > kStaleLog2);
    mx = keep ? row_max[r] : mx;
    float const use_c = (mx == -INFINITY ? 0.f : mx) * c[r];
    rescale[r] = keep ? 1.f : ptx::exp2_approx(fmaf(row_max[r], c[r], -use_c));
    row_max[r] = mx;
    exp_offset[r] = T::kFp8 ? kPBias - use_c : -use_c;
    return !keep;
  }
  __device__ __forceinline__ void row_exp_step(int r, float const (&c)[2],
                                               float (&sc)[T::kBc / 2],
                                               float const (&rescale)[2]) {
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < T::kBc / 2; ++i) {
      if (((i >> 1) & 1) == r) {
        sc[i] = ptx::exp2_approx(fmaf(sc[i], c[r], exp_offset[r]));
        sum += sc[i];
      }
    }
    row_sum[r] = row_sum[r] * rescale[r] + sum;
  }
  __device__ __forceinline__ void exp_part(float const (&c)[2], float (&sc)[T::kBc / 2],
                                           float const (&rescale)[2]) {
#pragma unroll
    for (int r = 0; r < 2; ++r) row_exp_step(r, c, sc, rescale);
  }

  // row_max_step's exponent offsets, for row_exp_step (always set before they are read; zero
  // so that no member starts indeterminate)
  float exp_offset[2] = {0.f, 0.f};
};

}  // namespace fa::cuda::sm90
