/* libflashattn from a C application: grouped-query attention in bf16, on GPU 0 when there is one,
 * else on the CPU backend, checked against a naive double-precision computation.
 *
 *   build/examples/flashattn_example [--cpu]
 *
 * A CPU-only build of the library (FA_CUDA=OFF) compiles this without its GPU path
 * (FA_EXAMPLE_CUDA unset): fa_context_create(0) then fails, saying why, and the CPU runs it.
 * Compiled that way against a library with GPU kernels (cc basic.c -lflashattn -lm), it has no
 * device buffers to pass, so it says so and runs on the CPU too.
 */
#if FA_EXAMPLE_CUDA
#include <cuda_runtime_api.h>
#endif
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashattn.h"

enum { BATCH = 2, SEQ_Q = 256, SEQ_K = 384, HEADS_Q = 8, HEADS_KV = 2, DIM = 128 };

/* bf16 is the top half of a float; round to nearest even (inputs here are finite). */
static uint16_t to_bf16(float f) {
  uint32_t bits;
  memcpy(&bits, &f, sizeof bits);
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return (uint16_t)(bits >> 16);
}
static float from_bf16(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

static int check(fa_status s, const char* what) {
  if (s == FA_STATUS_SUCCESS) return 0;
  fprintf(stderr, "%s failed: %s\n  %s\n", what, fa_status_string(s), fa_last_error_detail());
  return 1;
}

#if FA_EXAMPLE_CUDA
static int check_cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return 0;
  fprintf(stderr, "%s failed: %s\n", what, cudaGetErrorString(e));
  return 1;
}
#endif

int main(int argc, char** argv) {
  const size_t nq = (size_t)BATCH * SEQ_Q * HEADS_Q * DIM, nk = (size_t)BATCH * SEQ_K * HEADS_KV * DIM;
  const size_t nlse = (size_t)BATCH * HEADS_Q * SEQ_Q;
  uint16_t *q = malloc(nq * 2), *k = malloc(nk * 2), *v = malloc(nk * 2), *o = malloc(nq * 2);
  float* lse = malloc(nlse * sizeof(float));
#if FA_EXAMPLE_CUDA
  void *dq = NULL, *dk = NULL, *dv = NULL, *dout = NULL, *dlse = NULL;
#endif
  fa_context_t* ctx = NULL;
  fa_config cfg;
  fa_status s;
  int on_gpu = 0, failed = 0, b, h, i, j, d;
  size_t x;
  double max_err = 0.0, max_lse_err = 0.0;
  unsigned seed = 12345u;

  if (!q || !k || !v || !o || !lse) return 1;
  for (x = 0; x < nq; ++x) q[x] = to_bf16((float)((seed = seed * 1103515245u + 12345u) >> 8) / 16777216.f * 2.f - 1.f);
  for (x = 0; x < nk; ++x) k[x] = to_bf16((float)((seed = seed * 1103515245u + 12345u) >> 8) / 16777216.f * 2.f - 1.f);
  for (x = 0; x < nk; ++x) v[x] = to_bf16((float)((seed = seed * 1103515245u + 12345u) >> 8) / 16777216.f * 2.f - 1.f);

  /* A context on GPU 0, or the CPU when there is no usable GPU (or --cpu was given). */
  if (argc < 2 || strcmp(argv[1], "--cpu") != 0) {
    s = fa_context_create(0, &ctx);
    if (s == FA_STATUS_SUCCESS) {
#if FA_EXAMPLE_CUDA
      on_gpu = 1;
#else
      printf("GPU 0 is there, but this program was built without the CUDA runtime "
             "(FA_EXAMPLE_CUDA unset); using the CPU backend\n");
      fa_context_destroy(ctx);
      ctx = NULL;
#endif
    } else {
      printf("no GPU context (%s: %s); using the CPU backend\n", fa_status_string(s),
             fa_last_error_detail());
    }
  }
  if (!on_gpu && check(fa_context_create(FA_DEVICE_CPU, &ctx), "fa_context_create(CPU)")) return 1;

  fa_config_init(&cfg);
  cfg.dtype = FA_DTYPE_BF16;
  cfg.batch = BATCH;
  cfg.seqlen_q = SEQ_Q;
  cfg.seqlen_k = SEQ_K;
  cfg.heads_q = HEADS_Q;
  cfg.heads_kv = HEADS_KV; /* 4 query heads share each K/V head */
  cfg.head_dim = DIM;      /* strides left 0: packed [batch, seq, heads, dim] */

  if (on_gpu) {
#if FA_EXAMPLE_CUDA
    failed = check_cuda(cudaMalloc(&dq, nq * 2), "cudaMalloc") ||
             check_cuda(cudaMalloc(&dk, nk * 2), "cudaMalloc") ||
             check_cuda(cudaMalloc(&dv, nk * 2), "cudaMalloc") ||
             check_cuda(cudaMalloc(&dout, nq * 2), "cudaMalloc") ||
             check_cuda(cudaMalloc(&dlse, nlse * sizeof(float)), "cudaMalloc") ||
             check_cuda(cudaMemcpy(dq, q, nq * 2, cudaMemcpyHostToDevice), "cudaMemcpy") ||
             check_cuda(cudaMemcpy(dk, k, nk * 2, cudaMemcpyHostToDevice), "cudaMemcpy") ||
             check_cuda(cudaMemcpy(dv, v, nk * 2, cudaMemcpyHostToDevice), "cudaMemcpy") ||
             check(fa_forward(ctx, &cfg, dq, dk, dv, dout, (float*)dlse, NULL), "fa_forward") ||
             check_cuda(cudaMemcpy(o, dout, nq * 2, cudaMemcpyDeviceToHost), "cudaMemcpy") ||
             check_cuda(cudaMemcpy(lse, dlse, nlse * sizeof(float), cudaMemcpyDeviceToHost),
                        "cudaMemcpy");
#endif
  } else {
    failed = check(fa_forward(ctx, &cfg, q, k, v, o, lse, NULL), "fa_forward");
  }
  if (!failed) {
    /* Naive attention in double for every output element and LSE. */
    double* scores = malloc(SEQ_K * sizeof(double));
    const double scale = 1.0 / sqrt((double)DIM);
    for (b = 0; b < BATCH; ++b)
      for (h = 0; h < HEADS_Q; ++h)
        for (i = 0; i < SEQ_Q; ++i) {
          const int g = h / (HEADS_Q / HEADS_KV);
          double m = -INFINITY, sum = 0.0;
          for (j = 0; j < SEQ_K; ++j) {
            double dot = 0.0;
            for (d = 0; d < DIM; ++d)
              dot += (double)from_bf16(q[(((size_t)b * SEQ_Q + i) * HEADS_Q + h) * DIM + d]) *
                     from_bf16(k[(((size_t)b * SEQ_K + j) * HEADS_KV + g) * DIM + d]);
            scores[j] = dot * scale;
            if (scores[j] > m) m = scores[j];
          }
          for (j = 0; j < SEQ_K; ++j) sum += exp(scores[j] - m);
          for (d = 0; d < DIM; ++d) {
            double ref = 0.0, err;
            for (j = 0; j < SEQ_K; ++j)
              ref += exp(scores[j] - m) / sum * from_bf16(v[(((size_t)b * SEQ_K + j) * HEADS_KV + g) * DIM + d]);
            err = fabs(ref - from_bf16(o[(((size_t)b * SEQ_Q + i) * HEADS_Q + h) * DIM + d]));
            if (!(err <= max_err)) max_err = err; /* NaN propagates */
          }
          {
            double err = fabs(m + log(sum) - lse[((size_t)b * HEADS_Q + h) * SEQ_Q + i]);
            if (!(err <= max_lse_err)) max_lse_err = err;
          }
        }
    free(scores);
    /* bf16 keeps 8 significant bits: outputs of magnitude < 1 are within 2^-9 after rounding, and
     * the accumulation error adds far less than that again. */
    failed = !(max_err <= 4e-3) || !(max_lse_err <= 1e-3);
    printf("attention on the %s: batch %d, %d query x %d key rows, %d query heads sharing %d K/V "
           "heads, head_dim %d, bf16\n",
           on_gpu ? "GPU" : "CPU", BATCH, SEQ_Q, SEQ_K, HEADS_Q, HEADS_KV, DIM);
    printf("checked %zu outputs and %zu LSE values against double precision: max error %.2e "
           "(bound 4e-3), LSE %.2e (bound 1e-3): %s\n",
           nq, nlse, max_err, max_lse_err, failed ? "FAILED" : "OK");
  }
#if FA_EXAMPLE_CUDA
  if (on_gpu) {
    cudaFree(dq);
    cudaFree(dk);
    cudaFree(dv);
    cudaFree(dout);
    cudaFree(dlse);
  }
#endif
  fa_context_destroy(ctx);
  free(q);
  free(k);
  free(v);
  free(o);
  free(lse);
  return failed ? 1 : 0;
}
