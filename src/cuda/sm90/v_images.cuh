// V transposed ahead of an FP8 run (dense and varlen problems, given the workspace;
// sm90/family.cpp's schedule): each key block of each (sequence, K/V head) becomes the image of
// the V stage the FP8 tile's producer would otherwise build itself from a raw slot
// (mainloop_load.cuh's load_transpose_v), so that the producer copies it in one bulk copy
// (load_fp8_images). Every block of a V block's query tiles (seqlen_q / B_r of them per query
// head, heads_q / heads_kv heads) then reads the image instead of transposing the block again:
// with the transpose taken out, the kernel ran 1.12x (d 128) and 1.29x (d 256) faster at 8k
// keys (docs/performance.md, "FP8 prefill, step 2"); with the images, 1.03-1.17x from 4k keys.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/forward_params.hpp"
#include "cuda/programmatic.hpp"
#include "cuda/ptx.cuh"
#include "cuda/sequence_view.cuh"
#include "cuda/sm90/v_image_index.cuh"

namespace fa::cuda::sm90 {

// One image per block: blockIdx.x = (sequence * heads_kv + K/V head) * ceil(seqlen_k / B_c) + key
// block (varlen: seqlen_k the longest sequence's bound; blocks past a sequence's keys return).
// Per 128-byte column block, the block's B_c rows of V are staged in shared memory (rows 132
// bytes apart, so the 16 keys a thread gathers for one column fall in 2 banks per warp rather than
// one), then each thread writes 16-byte chunks: row c's 16 keys of key group g in the order of P's
// e4m3 A registers (position 4 q + i holds key 8 (i / 2) + 2 q + i % 2), at the group's place in
// the stage (8-row groups T::kVtGroupBytes apart, core matrices of 8 rows x 16 bytes, 128 bytes
// apart along the keys; the group's 16 spare bytes as zeros). Keys past the sequence and columns
// past head_dim_v are zeros: an e4m3 NaN there times P = 0 would reach O.
template <class T>
__global__ void __launch_bounds__(256) v_images_kernel(__grid_constant__ ForwardParams const p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int kRowBytes = 132;
  constexpr int kGroups = T::kBc / 16;
  __shared__ alignas(16) uint8_t rows[T::kBc * kRowBytes];
  // V may be the previous kernel's output; the next kernel (the forward) waits for this one.
  ptx::wait_for_prior_grids();
  ptx::allow_dependent_grids();
  int const heads_kv = p.heads_q / p.q_heads_per_kv;
  int const blocks = (p.seqlen_k + T::kBc - 1) / T::kBc;
  int const n = int(blockIdx.x % blocks);
  int64_t const pair = blockIdx.x / blocks;
  int const h = int(pair % heads_kv), b = int(pair / heads_kv);
  SequenceView const seq = sequence_view(p, p.layout, b);
  int const keys = min(seq.sk - n * T::kBc, T::kBc);
  if (keys <= 0) return;  // (varlen) past this sequence's blocks: no image
  bool const varlen = p.layout == kLayoutVarlen;
  uint8_t const* const v = static_cast<uint8_t const*>(p.v) +
                           (varlen ? seq.k_first * p.v_seq_stride : int64_t(b) * p.v_batch_stride) +
                           int64_t(h) * p.v_head_stride + int64_t(n) * T::kBc * p.v_seq_stride;
  uint8_t* const out = static_cast<uint8_t*>(p.v_images) +
                       v_image_index<T>(p, b, h, n, seq.k_first) * T::kVImageBytes;
  int const tid = threadIdx.x;
  for (int cb = 0; cb < T::kDv / 128; ++cb) {
    for (int i = tid; i < T::kBc * 8; i += 256) {
      int const key = i / 8, col = cb * 128 + (i % 8) * 16;
      uint4 chunk = make_uint4(0, 0, 0, 0);
      if (key < keys && col < p.head_dim_v) {  // (head_dim_v: whole chunks, images_pay)
        chunk = *reinterpret_cast<uint4 const*>(v + int64_t(key) * p.v_seq_stride + col);
      }
      uint32_t* const dst = reinterpret_cast<uint32_t*>(rows + key * kRowBytes + (i % 8) * 16);
      dst[0] = chunk.x;
      dst[1] = chunk.y;
      dst[2] = chunk.z;
      dst[3] = chunk.w;
    }
    __syncthreads();
    for (int i = tid; i < 128 * kGroups; i += 256) {
      int const r = i % 8, g = (i / 8) % kGroups, c = (i / (8 * kGroups)) * 8 + r;
      uint32_t word[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        uint32_t w = 0;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          int const key = 16 * g + 8 * (k / 2) + 2 * q + k % 2;
          w |= uint32_t(rows[key * kRowBytes + c]) << (8 * k);
        }
        word[q] = w;
      }
      int const row = cb * 128 + c;
      *reinterpret_cast<uint4*>(out + (row / 8) * T::kVtGroupBytes + g * 128 + r * 16) =
          make_uint4(word[0], word[1], word[2], word[3]);
    }
    if (tid < 16) {
      *reinterpret_cast<uint4*>(out + (cb * 16 + tid) * T::kVtGroupBytes + kGroups * 128) =
          make_uint4(0, 0, 0, 0);
    }
    __syncthreads();  // the rows are staged again for the next column block
  }
#endif
}

// Launches v_images_kernel for p (p.v_images set) on `stream`, programmatic like the forward
// kernel after it.
template <class T>
cudaError_t launch_v_images(ForwardParams const& p, bool programmatic, cudaStream_t stream) {
  int64_t const images = int64_t(p.batch) * (p.heads_q / p.q_heads_per_kv) *
                         ((int64_t(p.seqlen_k) + T::kBc - 1) / T::kBc);
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(images));
  config.blockDim = dim3(256);
  config.stream = stream;
  cudaLaunchAttribute attribute = programmatic_attribute();
  if (programmatic) {
    config.attrs = &attribute;
    config.numAttrs = 1;
  }
  return cudaLaunchKernelEx(&config, v_images_kernel<T>, p);
}

}  // namespace fa::cuda::sm90
