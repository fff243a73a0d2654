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
// The image holds V transposed: for each 8-column group of V (T::kVtGroupBytes apart) and each
// group g of 16 keys, a core matrix of 8 rows (V's columns) x 16 bytes (the keys, in the order of
// P's e4m3 A registers: byte 4 q + i of a row holds key 16 g + 8 (i / 2) + 2 q + i % 2, so its
// word q holds keys 2q, 2q + 1, 2q + 8 and 2q + 9), 128 bytes apart along the keys; the group's 16
// spare bytes zeros. Keys past the sequence and columns past head_dim_v are zeros: an e4m3 NaN
// there times P = 0 would reach O.
// A thread takes one word q of a key group's rows over 16 columns: it loads the four rows
// word q holds (16 bytes each; a warp's 8 consecutive lanes read 128 consecutive bytes of a
// row), transposes each 4-byte column word of them by byte permutes (8 a word) and writes the
// 16 resulting words into the image staged in shared memory; the block then copies the image
// out in 16-byte chunks, consecutive threads consecutive chunks. The first version staged V's
// rows instead and gathered every byte of the image by its own shared load (16 a 16-byte row):
// 25.3 us at d 128 and 2k keys (5.8% of that FP8 run), its L1 / shared-memory pipe 77% busy and
// DRAM 36% (ncu, H200, docs/performance.md session 60). A thread per 4-byte column word
// storing its image rows straight to global memory (no staging) ran 48 us there: each of its
// 16-byte stores left the other half of a 32-byte sector to another instruction (session 76).
template <class T>
__global__ void __launch_bounds__(128) v_images_kernel(__grid_constant__ ForwardParams const p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int kGroups = T::kBc / 16;
  constexpr int kChunks = T::kDv / 16;  // 16-byte chunks of a row of V
  constexpr int kItems = kGroups * 4 * kChunks;  // (key group, word, chunk)
  static_assert(kChunks % 8 == 0 && kItems % 128 == 0 && T::kVImageBytes % 16 == 0,
                "whole passes of the block's 128 threads, the image in 16-byte chunks");
  __shared__ alignas(16) uint8_t image[T::kVImageBytes];
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
  // Item order: 8 chunks, then the word q, then the rest of the chunks, then the key group: a
  // warp's lanes read four rows' 128 consecutive bytes per load, and their 4-byte writes of one
  // column fall two to a bank.
#pragma unroll
  for (int pass = 0; pass < kItems / 128; ++pass) {
    int const item = pass * 128 + tid;
    int const q = (item / 8) % 4;
    int const chunk = item % 8 + 8 * ((item / 32) % (kChunks / 8));
    int const g = item / (32 * (kChunks / 8));
    bool const in_cols = 16 * chunk < p.head_dim_v;  // (head_dim_v: whole chunks, images_pay)
    uint32_t w[4][4];  // [e][j]: key 16 g + 2 q + (e & 1) + 8 (e >> 1), columns 16 chunk + 4 j ..
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      int const key = 16 * g + 2 * q + (e & 1) + 8 * (e >> 1);
      uint4 x = make_uint4(0u, 0u, 0u, 0u);
      if (key < keys && in_cols) {
        x = __ldg(reinterpret_cast<uint4 const*>(v + int64_t(key) * p.v_seq_stride) + chunk);
      }
      w[e][0] = x.x;
      w[e][1] = x.y;
      w[e][2] = x.z;
      w[e][3] = x.w;
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      // Column 16 chunk + 4 j + t's word q: byte t of rows e = 0 .. 3, row 0 lowest.
      uint32_t const lo01 = __byte_perm(w[0][j], w[1][j], 0x5140);  // r0.0 r1.0 r0.1 r1.1
      uint32_t const hi01 = __byte_perm(w[0][j], w[1][j], 0x7362);  // r0.2 r1.2 r0.3 r1.3
      uint32_t const lo23 = __byte_perm(w[2][j], w[3][j], 0x5140);
      uint32_t const hi23 = __byte_perm(w[2][j], w[3][j], 0x7362);
      uint32_t const col[4] = {__byte_perm(lo01, lo23, 0x5410), __byte_perm(lo01, lo23, 0x7632),
                               __byte_perm(hi01, hi23, 0x5410), __byte_perm(hi01, hi23, 0x7632)};
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        int const c = 16 * chunk + 4 * j + t;
        *reinterpret_cast<uint32_t*>(image + (c / 8) * T::kVtGroupBytes + g * 128 + (c % 8) * 16 +
                                     4 * q) = col[t];
      }
    }
  }
  for (int j = tid; j < T::kDv / 8; j += 128) {
    *reinterpret_cast<uint4*>(image + j * T::kVtGroupBytes + kGroups * 128) = make_uint4(0, 0, 0, 0);
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < (T::kVImageBytes / 16 + 127) / 128; ++i) {
    int const at = 16 * (i * 128 + tid);
    if (at < T::kVImageBytes) {
      *reinterpret_cast<uint4*>(out + at) = *reinterpret_cast<uint4 const*>(image + at);
    }
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
  config.blockDim = dim3(128);
  config.stream = stream;
  cudaLaunchAttribute attribute = programmatic_attribute();
  if (programmatic) {
    config.attrs = &attribute;
    config.numAttrs = 1;
  }
  return cudaLaunchKernelEx(&config, v_images_kernel<T>, p);
}

}  // namespace fa::cuda::sm90
