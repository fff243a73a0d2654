// Where an FP8 problem's V images lie in the workspace (v_images.cuh writes them, the FP8 tile's
// producer copies them: mainloop_load.cuh's load_fp8_images). Device code only: the producer's
// header includes it without the image kernel's launch code.
#pragma once

#include <cstdint>

#include "cuda/forward_params.hpp"

namespace fa::cuda::sm90 {

// Where the image of key block n of sequence b's K/V head h lies, in images of T::kVImageBytes.
// Dense: [batch][heads_kv][v_image_blocks]. Varlen: per K/V head v_image_blocks = total_k / B_c +
// batch slots, sequence b's blocks from slot k_first / B_c + b on (k_first its first key row):
// the next sequence's first slot is at least ceil(sk / B_c) further, and the last slot of any
// sequence whose rows lie in [0, total_k) (sequence_view clamps them there) is below the count.
template <class T>
__device__ __forceinline__ int64_t v_image_index(ForwardParams const& p, int b, int h, int n,
                                                 int64_t k_first) {
  if (p.layout == kLayoutVarlen) return int64_t(h) * p.v_image_blocks + k_first / T::kBc + b + n;
  return (int64_t(b) * (p.heads_q / p.q_heads_per_kv) + h) * p.v_image_blocks + n;
}

}  // namespace fa::cuda::sm90
