// The CPU backend through the public API (fa_context_create(FA_DEVICE_CPU) + fa_forward) against a
// naive float64 reference, over lengths, GQA ratios, head dims, layouts and dtypes. Outputs and LSE
// are poisoned with NaN first, so an element left unwritten fails.
#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/reference.hpp"
#include "flashattn.h"

namespace {

using fa_test::TestProblem;

// The backend accumulates in fp32 and rounds once: measured fp32 errors stay below 6e-7 at
// seqlen 1024, so 2e-6 + 1e-5 |ref| leaves a 3x margin without hiding a wrong term (inputs are at
// least 1/64 in magnitude, so a dropped key moves O by far more).
constexpr fa_test::Tolerance kFp32Tolerance{2e-6, 1e-5, 0.0};
// fp16/bf16: the rounding of the fp32 result, half an ulp of the dtype, plus that fp32 slack.
constexpr fa_test::Tolerance kHalfTolerance{2e-6, 1e-5, 0.5};
constexpr fa_test::Tolerance kLseTolerance{1e-4, 0.0, 0.0};

constexpr int kDtypes[] = {FA_DTYPE_FP16, FA_DTYPE_BF16, FA_DTYPE_FP32};

class CpuContext {
 public:
  CpuContext() { REQUIRE(fa_context_create(FA_DEVICE_CPU, &ctx_) == FA_STATUS_SUCCESS); }
  ~CpuContext() { fa_context_destroy(ctx_); }
  CpuContext(const CpuContext&) = delete;
  CpuContext& operator=(const CpuContext&) = delete;
  fa_context_t* get() const { return ctx_; }

 private:
  fa_context_t* ctx_ = nullptr;
};

std::string describe(const TestProblem& p) {
  std::ostringstream s;
  auto strides = [&s](const char* name, const fa_test::TensorLayout& t) {
    s << ' ' << name << "=[+" << t.offset << ' ' << t.batch_stride << ' ' << t.seq_stride << ' '
      << t.head_stride << ']';
  };
  s << "dtype " << p.dtype << " batch " << p.batch << " seqlen_q " << p.seqlen_q << " seqlen_k "
    << p.seqlen_k << " heads " << p.heads_q << '/' << p.heads_kv << " head_dim " << p.head_dim
    << " head_dim_v " << p.dim_v() << " causal " << p.causal << " scale " << p.scale;
  strides("q", p.q);
  strides("k", p.k);
  strides("v", p.v);
  strides("o", p.o);
  return s.str();
}

// Runs p on random inputs (seeded) through fa_forward and checks O, LSE and that nothing outside
// O's view was written. Returns the buffers for further checks.
fa_test::HostBuffers check_forward(const CpuContext& ctx, const TestProblem& p, uint64_t seed,
                                   bool with_lse = true) {
  const std::string problem = describe(p);
  INFO(problem);
  INFO("seed " << seed);
  fa_test::HostBuffers h = fa_test::make_buffers(p, seed);
  const fa_config cfg = fa_test::make_config(p);
  const fa_status status = fa_forward(ctx.get(), &cfg, h.q(p), h.k(p), h.v(p), h.o(p),
                                      with_lse ? h.lse.data() : nullptr, nullptr);
  REQUIRE_MESSAGE(status == FA_STATUS_SUCCESS, fa_last_error_detail());

  const fa_test::Reference ref = fa_test::reference_f64(p, h.in.data());
  const fa_test::ErrorStats o = fa_test::compare_output(
      p, h.out.data(), ref.o, p.dtype == FA_DTYPE_FP32 ? kFp32Tolerance : kHalfTolerance);
  INFO("O: max abs error " << o.max_abs << ", worst at " << o.worst << ": got " << o.worst_got
                           << ", reference " << o.worst_ref);
  CHECK_FALSE(o.non_finite);
  CHECK(o.n_bad == 0);
  CHECK(fa_test::output_padding_intact(p, h.out.data()));

  if (with_lse) {
    const fa_test::ErrorStats l = fa_test::compare_lse(h.lse.data(), ref.lse, kLseTolerance);
    INFO("LSE: max abs error " << l.max_abs << ", worst at " << l.worst << ": got " << l.worst_got
                               << ", reference " << l.worst_ref);
    CHECK_FALSE(l.non_finite);
    CHECK(l.n_bad == 0);
  }
  return h;
}

}  // namespace

TEST_SUITE("cpu") {

TEST_CASE("cpu forward: sequence lengths, equal and unequal, causal and not") {
  const CpuContext ctx;
  const int64_t lengths[][2] = {{1, 1},   {1, 17},  {17, 1},   {17, 64}, {64, 64},
                                {64, 65}, {65, 64}, {64, 177}, {177, 64}, {177, 177}};
  uint64_t seed = 0x1000;
  for (const int dtype : kDtypes) {
    for (const auto& len : lengths) {
      for (const bool causal : {false, true}) {
        check_forward(ctx, fa_test::make_problem(dtype, 1, len[0], len[1], 2, 1, 32, causal),
                      ++seed);
      }
    }
  }
}

TEST_CASE("cpu forward: long sequences 1013 vs 1024") {
  const CpuContext ctx;
  check_forward(ctx, fa_test::make_problem(FA_DTYPE_BF16, 1, 1013, 1024, 1, 1, 64, true), 0x2001);
  check_forward(ctx, fa_test::make_problem(FA_DTYPE_FP16, 1, 1024, 1013, 1, 1, 64, false), 0x2002);
  check_forward(ctx, fa_test::make_problem(FA_DTYPE_FP32, 1, 1013, 1024, 1, 1, 64, false), 0x2003);
  check_forward(ctx, fa_test::make_problem(FA_DTYPE_FP16, 1, 1024, 1013, 1, 1, 64, true), 0x2004);
}

TEST_CASE("cpu forward: GQA and MQA head ratios") {
  const CpuContext ctx;
  uint64_t seed = 0x3000;
  for (const int dtype : kDtypes) {
    for (const int64_t ratio : {1, 2, 4, 8}) {
      const bool causal = ratio % 4 == 0;
      check_forward(ctx, fa_test::make_problem(dtype, 1, 33, 65, 2 * ratio, 2, 16, causal), ++seed);
    }
    check_forward(ctx, fa_test::make_problem(dtype, 2, 40, 40, 8, 1, 16, true), ++seed);  // MQA
  }
}

TEST_CASE("cpu forward: head dims") {
  const CpuContext ctx;
  uint64_t seed = 0x4000;
  for (const int dtype : kDtypes) {
    for (const int64_t d : {1, 8, 64, 80, 128, 256}) {
      const bool causal = d % 3 != 0;
      check_forward(ctx, fa_test::make_problem(dtype, 1, 40, 70, 2, 1, d, causal), ++seed);
    }
  }
}

TEST_CASE("cpu forward: a value head dim other than head_dim, in every layout") {
  // V and O have head_dim_v columns; the scale stays 1/sqrt(head_dim). Padded layouts put
  // poisoned elements right after each o row's head_dim_v columns: none may be written.
  const CpuContext ctx;
  uint64_t seed = 0x4800;
  const int64_t dims[][2] = {{192, 128}, {64, 32}, {24, 40}, {128, 1}};
  for (const int dtype : kDtypes) {
    for (const auto& dim : dims) {
      const TestProblem base = fa_test::make_problem(dtype, 2, 33, 65, 4, 2, dim[0], true, 0.0f,
                                                     dim[1]);
      check_forward(ctx, base, ++seed);
      TestProblem padded = base;
      fa_test::layout_padded(padded, 3);
      check_forward(ctx, padded, ++seed);
      TestProblem heads_major = base;
      fa_test::layout_heads_major(heads_major);
      check_forward(ctx, heads_major, ++seed);
      TestProblem qkv = fa_test::make_problem(dtype, 1, 40, 40, 2, 1, dim[0], false, 0.0f,
                                              dim[1]);
      fa_test::layout_qkv_packed(qkv);
      check_forward(ctx, qkv, ++seed);
    }
  }
  // Random pairs, either larger.
  std::mt19937_64 rng(0x4900);
  for (int n = 0; n < 12; ++n) {
    const int64_t d = 1 + static_cast<int64_t>(rng() % 200), dv = 1 + static_cast<int64_t>(rng() % 200);
    TestProblem p = fa_test::make_problem(kDtypes[n % 3], 1, 1 + static_cast<int64_t>(rng() % 90),
                                          1 + static_cast<int64_t>(rng() % 90), 2, 1, d, n % 2 == 0,
                                          0.0f, dv);
    fa_test::layout_padded(p, 1 + n % 4);
    check_forward(ctx, p, rng());
  }
}

TEST_CASE("cpu forward: batch > 1 and strided layouts") {
  const CpuContext ctx;
  uint64_t seed = 0x5000;
  for (const int dtype : kDtypes) {
    // head_dim 24 is not a multiple of a typical vector width, so row ends are exercised too.
    const TestProblem base = fa_test::make_problem(dtype, 3, 70, 70, 4, 2, 24, true);
    check_forward(ctx, base, ++seed);

    TestProblem qkv = base;  // q, k, v as views of one packed QKV tensor
    fa_test::layout_qkv_packed(qkv);
    check_forward(ctx, qkv, ++seed);

    TestProblem padded = base;
    fa_test::layout_padded(padded, 3);
    check_forward(ctx, padded, ++seed);
    padded.seqlen_k = 45;
    padded.causal = false;
    fa_test::layout_padded(padded, 5);
    check_forward(ctx, padded, ++seed);

    TestProblem heads_major = base;  // [batch, heads, seq, dim]
    fa_test::layout_heads_major(heads_major);
    check_forward(ctx, heads_major, ++seed);

    TestProblem broadcast = base;  // one K/V for every batch entry
    broadcast.k.batch_stride = 0;
    broadcast.v.batch_stride = 0;
    fa_test::update_extents(broadcast);
    check_forward(ctx, broadcast, ++seed);
  }
}

TEST_CASE("cpu forward: random shapes and layouts") {
  const CpuContext ctx;
  std::mt19937_64 rng(0x6000);
  auto pick = [&rng](int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1));
  };
  const int64_t head_dims[] = {1, 8, 17, 64, 80, 128};
  for (int n = 0; n < 24; ++n) {
    const int dtype = kDtypes[pick(0, 2)];
    const int64_t heads_kv = pick(1, 2);
    const int64_t heads_q = heads_kv << pick(0, 2);
    TestProblem p = fa_test::make_problem(dtype, pick(1, 2), pick(1, 150), pick(1, 150), heads_q,
                                          heads_kv, head_dims[pick(0, 5)], pick(0, 1) == 1);
    switch (pick(0, 2)) {
      case 0:
        fa_test::layout_padded(p, pick(1, 4));
        break;
      case 1:
        fa_test::layout_heads_major(p);
        break;
      default:
        break;
    }
    check_forward(ctx, p, rng());
  }
}

TEST_CASE("cpu forward: causal rows with no visible key get O = 0 and LSE = -inf") {
  const CpuContext ctx;
  uint64_t seed = 0x7000;
  for (const int dtype : kDtypes) {
    for (const int64_t seqlen_k : {1, 37}) {
      const TestProblem p = fa_test::make_problem(dtype, 2, 100, seqlen_k, 2, 1, 16, true);
      const fa_test::HostBuffers h = check_forward(ctx, p, ++seed);
      // Query row i sees keys j <= i + seqlen_k - seqlen_q: rows below seqlen_q - seqlen_k none.
      const int64_t empty_rows = p.seqlen_q - p.seqlen_k;
      for (int64_t b = 0; b < p.batch; ++b) {
        for (int64_t hq = 0; hq < p.heads_q; ++hq) {
          for (int64_t i = 0; i < p.seqlen_q; ++i) {
            const float lse = h.lse[static_cast<size_t>((b * p.heads_q + hq) * p.seqlen_q + i)];
            if (i < empty_rows) {
              REQUIRE(lse == -std::numeric_limits<float>::infinity());
              for (int64_t c = 0; c < p.head_dim; ++c) {
                REQUIRE(fa_test::load_elem(p.dtype, h.out.data(),
                                           fa_test::elem_index(p.o, b, i, hq, c)) == 0.0);
              }
            } else {
              REQUIRE(lse > -std::numeric_limits<float>::infinity());
            }
          }
        }
      }
    }
  }
}

TEST_CASE("cpu forward: explicit softmax_scale") {
  const CpuContext ctx;
  uint64_t seed = 0x8000;
  for (const int dtype : kDtypes) {
    // 0.05 flattens the softmax; 2.0 makes scores reach ~+-30 at d = 64, so exp() would overflow
    // without the running maximum.
    for (const float scale : {0.05f, 0.125f, 2.0f}) {
      check_forward(ctx, fa_test::make_problem(dtype, 1, 50, 90, 2, 2, 64, scale > 1.0f, scale),
                    ++seed);
    }
  }
}

TEST_CASE("cpu forward: lse may be NULL") {
  const CpuContext ctx;
  uint64_t seed = 0x9000;
  for (const int dtype : kDtypes) {
    const TestProblem p = fa_test::make_problem(dtype, 1, 65, 65, 2, 1, 32, true);
    check_forward(ctx, p, ++seed, false);
  }
}

}  // TEST_SUITE
