// What the GPU tests ask of a registered kernel through the public API (tests/cuda/test_gpu_*.cpp):
// whether its code runs on the device, and the value head dim its problems take.
#pragma once

#include <string>

#include "flashattn.h"

namespace fa_test {

// Whether `k` plans the smallest problem of its dtype and head dim with value head dim `dv` on
// `ctx` (64 queries and keys, one head); on failure fa_last_error_detail() says why.
inline bool kernel_plans(fa_context_t* ctx, fa_kernel_config const& k, int dv) {
  fa_config cfg;
  if (fa_config_init(&cfg) != FA_STATUS_SUCCESS) return false;
  cfg.dtype = k.dtype;
  cfg.batch = cfg.heads_q = cfg.heads_kv = 1;
  cfg.seqlen_q = cfg.seqlen_k = 64;
  cfg.head_dim = k.d_head;
  cfg.head_dim_v = dv;
  fa_plan_t* plan = nullptr;
  if (fa_plan_create_with_kernel(ctx, &cfg, &k, &plan) != FA_STATUS_SUCCESS) return false;
  fa_plan_destroy(plan);
  return true;
}

// The widest value head dim `k` runs on `ctx`: its head dim where it plans a problem of it, else
// 128 (an sm90 kernel holding V in 128 columns, d 192 with 128 keys, refuses a wider one).
inline int kernel_value_dim(fa_context_t* ctx, fa_kernel_config const& k) {
  for (int dv : {k.d_head, 128}) {
    if (kernel_plans(ctx, k, dv)) return dv;
  }
  return k.d_head;
}

// Whether the build holds code of `k` for ctx's device: false for the sm90 family off sm_90 and,
// in a default build, for the mma.sync family's prefill tiles on sm_90 (CMake's
// FA_MMA_SYNC_SM90). fa_plan_create_with_kernel() refuses those with
// FA_STATUS_KERNEL_NOT_AVAILABLE, as it refuses a problem the kernel cannot run: its detail,
// "compiled, but not runnable on this device" (src/api/api.cpp), is what tells them apart.
inline bool kernel_runs_here(fa_context_t* ctx, fa_kernel_config const& k) {
  if (kernel_plans(ctx, k, kernel_value_dim(ctx, k))) return true;
  return std::string(fa_last_error_detail()).find("not runnable on this device") == std::string::npos;
}

}  // namespace fa_test
