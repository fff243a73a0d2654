// What the GPU tests ask of a registered kernel through the public API (tests/cuda/test_gpu_*.cpp):
// whether its code runs on the device, and the value head dim its problems take.
#pragma once

#include <string>

#include "flashattn.h"

namespace fa_test {

// The widest value head dim `k` runs on `ctx`: its head dim where it plans a problem of it, else
// 128 (an sm90 kernel holding V in 128 columns, d 192 with 128 keys, refuses a wider one).
inline int kernel_value_dim(fa_context_t* ctx, fa_kernel_config const& k) {
  for (int dv : {k.d_head, 128}) {
    fa_config cfg;
    if (fa_config_init(&cfg) != FA_STATUS_SUCCESS) break;
    cfg.dtype = k.dtype;
    cfg.batch = cfg.heads_q = cfg.heads_kv = 1;
    cfg.seqlen_q = cfg.seqlen_k = 64;
    cfg.head_dim = k.d_head;
    cfg.head_dim_v = dv;
    fa_plan_t* plan = nullptr;
    if (fa_plan_create_with_kernel(ctx, &cfg, &k, &plan) == FA_STATUS_SUCCESS) {
      fa_plan_destroy(plan);
      return dv;
    }
  }
  return k.d_head;
}

// Whether the build holds code of `k` for ctx's device: false for the sm90 family off sm_90 and,
// in a default build, for the mma.sync family's prefill tiles on sm_90 (CMake's
// FA_MMA_SYNC_SM90), which fa_plan_create_with_kernel() refuses as "not runnable on this device".
inline bool kernel_runs_here(fa_context_t* ctx, fa_kernel_config const& k) {
  fa_config cfg;
  if (fa_config_init(&cfg) != FA_STATUS_SUCCESS) return false;
  cfg.dtype = k.dtype;
  cfg.batch = cfg.heads_q = cfg.heads_kv = 1;
  cfg.seqlen_q = cfg.seqlen_k = 64;
  cfg.head_dim = k.d_head;
  cfg.head_dim_v = kernel_value_dim(ctx, k);
  fa_plan_t* plan = nullptr;
  if (fa_plan_create_with_kernel(ctx, &cfg, &k, &plan) == FA_STATUS_SUCCESS) {
    fa_plan_destroy(plan);
    return true;
  }
  return std::string(fa_last_error_detail()).find("not runnable on this device") == std::string::npos;
}

}  // namespace fa_test
