// The ring-attention schedule of examples/context_parallel (ring_schedule.hpp, the code the NCCL
// example runs) simulated rank by rank on one GPU context, against the float64 reference of
// single-device attention: N = 2..4, contiguous and zigzag shards, causal and not, GQA, lengths
// that N (or 2N) does not divide. Every shard, scratch and LSE buffer is its own exact-size
// cudaMalloc, so compute-sanitizer memcheck (tools/device_check.sh) sees any access past one.
#include <cuda_runtime_api.h>
#include <doctest/doctest.h>

#include <string>
#include <utility>
#include <vector>

#include "common/reference.hpp"
#include "context_parallel/ring_schedule.hpp"
#include "flashattn.h"

namespace {

#define CUDA_OK(call) REQUIRE_MESSAGE((call) == cudaSuccess, #call)

// The (dtype, head_dim) to test: bf16 at 128 where built (the example's shape), else the first
// 16-bit kernel's (the reduced builds carry one).
std::pair<int, int> shape_to_test() {
  std::pair<int, int> chosen{0, 0};
  for (size_t i = 0; i < fa_kernel_count(); ++i) {
    fa_kernel_config k;
    fa_kernel_config_init(&k);
    REQUIRE(fa_kernel_get(i, &k) == FA_STATUS_SUCCESS);
    if (k.dtype == FA_DTYPE_E4M3) continue;  // 16-bit shapes (FP8 kernels: test_gpu_features.cpp)
    if (chosen.first == 0 || (k.dtype == FA_DTYPE_BF16 && k.d_head == 128)) {
      chosen = {k.dtype, k.d_head};
    }
  }
  return chosen;
}

}  // namespace

TEST_CASE("context parallel: simulated ring on the GPU matches single-device attention") {
  fa_context_t* ctx = nullptr;
  REQUIRE(fa_context_create(0, &ctx) == FA_STATUS_SUCCESS);
  const auto [dtype, d] = shape_to_test();
  REQUIRE(dtype != 0);
  uint64_t seed = 3000;
  for (int world = 2; world <= 4; ++world) {
    for (const ring::Layout layout : {ring::Layout::contiguous, ring::Layout::zigzag}) {
      for (const bool causal : {false, true}) {
        // 40N + 3 rows: N and 2N never divide it; chunks of 10 to 22 rows cross no or one
        // kernel tile, so partial tiles and the diagonal block are both exercised.
        const int64_t seqlen = 40 * world + 3;
        fa_test::TestProblem p = fa_test::make_problem(dtype, 2, seqlen, seqlen, 4, 2, d, causal);
        fa_test::HostBuffers h = fa_test::make_buffers(p, ++seed);
        void* in = nullptr;
        void* out = nullptr;
        void* lse = nullptr;
        CUDA_OK(cudaMalloc(&in, h.in.size()));
        CUDA_OK(cudaMalloc(&out, h.out.size()));
        CUDA_OK(cudaMalloc(&lse, h.lse.size() * sizeof(float)));
        CUDA_OK(cudaMemcpy(in, h.in.data(), h.in.size(), cudaMemcpyHostToDevice));
        ring::Problem rp;
        rp.dtype = dtype;
        rp.batch = p.batch;
        rp.heads_q = p.heads_q;
        rp.heads_kv = p.heads_kv;
        rp.head_dim = d;
        const fa_status st = ring::simulate_ring(
            ctx, ring::Schedule(seqlen, world, layout, causal), rp,
            fa_test::elem_ptr(in, dtype, p.q.offset), fa_test::elem_ptr(in, dtype, p.k.offset),
            fa_test::elem_ptr(in, dtype, p.v.offset), out, static_cast<float*>(lse),
            [](size_t bytes) {
              void* ptr = nullptr;
              CUDA_OK(cudaMalloc(&ptr, bytes));
              return ptr;
            },
            [](void* ptr) { cudaFree(ptr); },
            [](void* dst, const void* src, size_t bytes) {
              CUDA_OK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
            });
        const std::string detail = fa_last_error_detail();
        CUDA_OK(cudaMemcpy(h.out.data(), out, h.out.size(), cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(h.lse.data(), lse, h.lse.size() * sizeof(float),
                           cudaMemcpyDeviceToHost));
        cudaFree(in);
        cudaFree(out);
        cudaFree(lse);
        INFO("world " << world << " " << (layout == ring::Layout::zigzag ? "zigzag" : "contiguous")
                      << " causal " << causal << " dtype " << dtype << " head_dim " << d
                      << " seed " << seed << ": " << detail);
        REQUIRE(st == FA_STATUS_SUCCESS);
        // The GPU kernels' single-call bound (test_gpu_features.cpp: P rounded to the dtype,
        // 1.2e-2 for bf16, 3e-3 for fp16) plus one half ulp of |O| <= 1 (2^-9 bf16, 2^-12
        // fp16) per partial and merge rounding, N of them at most for a Q chunk.
        const double ulp = dtype == FA_DTYPE_BF16 ? 0x1p-9 : 0x1p-12;
        const fa_test::Tolerance tol{(dtype == FA_DTYPE_BF16 ? 1.2e-2 : 3e-3) + world * ulp, 0.0,
                                     0.0};
        const fa_test::Reference ref = fa_test::reference_f64(p, h.in.data());
        const fa_test::ErrorStats o = fa_test::compare_output(p, h.out.data(), ref.o, tol);
        const fa_test::ErrorStats l =
            fa_test::compare_lse(h.lse.data(), ref.lse, fa_test::Tolerance{2e-3, 0.0, 0.0});
        INFO("O: max abs error " << o.max_abs << ", LSE: max abs error " << l.max_abs);
        CHECK_FALSE(o.non_finite);
        CHECK(o.n_bad == 0);
        CHECK(l.n_bad == 0);
      }
    }
  }
  fa_context_destroy(ctx);
}
