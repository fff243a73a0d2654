// The value head dim the GPU tests give a registered kernel's problems, asked through the public
// API (tests/cuda/test_gpu_*.cpp).
#pragma once

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

}  // namespace fa_test
