/* The API used from a C99 translation unit, as a C application would: CPU context, a plan, a
 * one-shot forward, registry listing, and errors. Returns 0 on success, else writes why into msg. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashattn.h"

int fa_test_c_api_use(char* msg, size_t msg_size);

static int fail_with(char* msg, size_t msg_size, const char* what, fa_status s) {
  snprintf(msg, msg_size, "%s: %s (%s)", what, fa_status_string(s), fa_last_error_detail());
  return 1;
}

int fa_test_c_api_use(char* msg, size_t msg_size) {
  enum { B = 1, SQ = 3, SK = 5, H = 2, D = 4 };
  float q[B * SQ * H * D], k[B * SK * H * D], v[B * SK * H * D], o[B * SQ * H * D], lse[B * H * SQ];
  fa_context_t* ctx = NULL;
  fa_plan_t* plan = NULL;
  fa_config cfg;
  fa_status s;
  size_t i, n_kernels;
  int h, r, j, d;

  for (i = 0; i < sizeof q / sizeof q[0]; ++i) q[i] = (float)((int)(i * 7 % 11) - 5) / 8.f;
  for (i = 0; i < sizeof k / sizeof k[0]; ++i) k[i] = (float)((int)(i * 5 % 13) - 6) / 8.f;
  for (i = 0; i < sizeof v / sizeof v[0]; ++i) v[i] = (float)((int)(i * 3 % 7) - 3) / 4.f;

  if ((s = fa_config_init(&cfg)) != FA_STATUS_SUCCESS) return fail_with(msg, msg_size, "init", s);
  cfg.dtype = FA_DTYPE_FP32;
  cfg.batch = B;
  cfg.seqlen_q = SQ;
  cfg.seqlen_k = SK;
  cfg.heads_q = H;
  cfg.heads_kv = H;
  cfg.head_dim = D;
  if ((s = fa_context_create(FA_DEVICE_CPU, &ctx)) != FA_STATUS_SUCCESS)
    return fail_with(msg, msg_size, "context", s);
  if ((s = fa_plan_create(ctx, &cfg, &plan)) != FA_STATUS_SUCCESS) {
    fa_context_destroy(ctx);
    return fail_with(msg, msg_size, "plan", s);
  }
  s = fa_plan_run(plan, q, k, v, o, lse, NULL, 0, NULL);
  fa_plan_destroy(plan);
  if (s != FA_STATUS_SUCCESS) {
    fa_context_destroy(ctx);
    return fail_with(msg, msg_size, "run", s);
  }

  /* Naive reference in double. */
  for (h = 0; h < H; ++h) {
    for (r = 0; r < SQ; ++r) {
      double scores[SK], m = -INFINITY, sum = 0.0;
      for (j = 0; j < SK; ++j) {
        double dot = 0.0;
        for (d = 0; d < D; ++d) dot += (double)q[(r * H + h) * D + d] * k[(j * H + h) * D + d];
        scores[j] = dot / sqrt((double)D);
        if (scores[j] > m) m = scores[j];
      }
      for (j = 0; j < SK; ++j) sum += exp(scores[j] - m);
      for (d = 0; d < D; ++d) {
        double acc = 0.0;
        for (j = 0; j < SK; ++j) acc += exp(scores[j] - m) / sum * v[(j * H + h) * D + d];
        if (fabs(acc - o[(r * H + h) * D + d]) > 1e-5) {
          snprintf(msg, msg_size, "o[%d,%d,%d] = %g, expected %g", r, h, d,
                   (double)o[(r * H + h) * D + d], acc);
          fa_context_destroy(ctx);
          return 1;
        }
      }
      if (fabs(m + log(sum) - lse[h * SQ + r]) > 1e-5) {
        snprintf(msg, msg_size, "lse[%d,%d] = %g, expected %g", h, r, (double)lse[h * SQ + r],
                 m + log(sum));
        fa_context_destroy(ctx);
        return 1;
      }
    }
  }

  /* An error: heads not divisible. */
  cfg.heads_kv = 3;
  s = fa_forward(ctx, &cfg, q, k, v, o, NULL, NULL);
  fa_context_destroy(ctx);
  if (s != FA_STATUS_INVALID_ARGUMENT || strstr(fa_last_error_detail(), "heads_kv = 3") == NULL) {
    snprintf(msg, msg_size, "expected INVALID_ARGUMENT naming heads_kv = 3, got %s (%s)",
             fa_status_string(s), fa_last_error_detail());
    return 1;
  }

  /* Registry listing by name. */
  n_kernels = fa_kernel_count();
  for (i = 0; i < n_kernels; ++i) {
    fa_kernel_config kc;
    char name[128];
    fa_kernel_config_init(&kc);
    if ((s = fa_kernel_get(i, &kc)) != FA_STATUS_SUCCESS) return fail_with(msg, msg_size, "get", s);
    if ((s = fa_kernel_config_name(&kc, name, sizeof name, NULL)) != FA_STATUS_SUCCESS)
      return fail_with(msg, msg_size, "name", s);
    if (name[0] != '(') {
      snprintf(msg, msg_size, "kernel %zu has name '%s'", i, name);
      return 1;
    }
  }
  snprintf(msg, msg_size, "ok: forward matched, error reported, %zu kernels listed", n_kernels);
  return 0;
}
