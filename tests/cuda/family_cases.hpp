// Problems and kernels for the family rule tests (host only: no GPU, no kernel compiled).
#pragma once

#include <cstdint>

#include "core/kernel_config.hpp"
#include "core/problem.hpp"
#include "cuda/device.hpp"
#include "flashattn.h"

namespace fa::test {

// A dense bf16 problem with packed strides.
inline Problem dense_problem(int64_t batch, int64_t sq, int64_t sk, int64_t hq, int64_t hkv,
                             int64_t d = 128) {
  Problem p{};
  p.dtype = DType::kBF16;
  p.kv_dtype = DType::kBF16;
  p.out_dtype = DType::kBF16;
  p.batch = batch;
  p.seqlen_q = sq;
  p.seqlen_k = sk;
  p.heads_q = hq;
  p.heads_kv = hkv;
  p.head_dim = d;
  p.head_dim_v = d;
  p.softmax_scale = 0.125f;
  p.q = {sq * hq * d, hq * d, d};
  p.o = p.q;
  p.k = {sk * hkv * d, hkv * d, d};
  p.v = p.k;
  return p;
}

// An mma.sync kernel: B_r x B_c tile, n_warps warps.
inline KernelConfig mma_sync_kernel(int B_r, int B_c, int n_warps, int d = 128) {
  return KernelConfig{DType::kBF16, d, B_r, B_c, n_warps, true, true, true, 0, 0, 0, false, true};
}

// An sm90 kernel: two consumer warpgroups (B_r = 128), B_c keys, 2 stages.
inline KernelConfig sm90_kernel(int B_c, bool persistent, int d = 128) {
  return KernelConfig{DType::kBF16, d, 128, B_c, 12, false, false, false, 0, 0, 0, false, false,
                      FA_FAMILY_SM90, 2, true, false, persistent};
}

// An H100-like device: 132 SMs, `blocks_per_sm` resident blocks of `entry`.
inline cuda::Device device_with(cuda::KernelEntry const* entry, int blocks_per_sm) {
  cuda::Device d;
  d.cc_major = 9;
  d.sm_count = 132;
  d.smem_per_block_optin = 227 * 1024;
  d.kernels = {entry};
  d.blocks_per_sm[entry] = blocks_per_sm;
  return d;
}

}  // namespace fa::test
