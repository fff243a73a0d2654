// include/flashattn.hpp, compiled as C++17: ownership (move-only contexts and plans, empty after a
// move), errors (status and detail carried by flashattn::Error), typed tensors (dtype and shape
// from the types), and the numbers of a forward against a double-precision reference.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "flashattn.hpp"

namespace fa = flashattn;

static_assert(!std::is_copy_constructible_v<fa::Context> && !std::is_copy_assignable_v<fa::Context>);
static_assert(std::is_nothrow_move_constructible_v<fa::Context> &&
              std::is_nothrow_move_assignable_v<fa::Context>);
static_assert(!std::is_copy_constructible_v<fa::Plan> && !std::is_copy_assignable_v<fa::Plan>);
static_assert(std::is_nothrow_move_constructible_v<fa::Plan> &&
              std::is_nothrow_move_assignable_v<fa::Plan>);
static_assert(fa::dtype_of_v<fa::fp16> == FA_DTYPE_FP16 && fa::dtype_of_v<fa::bf16> == FA_DTYPE_BF16 &&
              fa::dtype_of_v<float const> == FA_DTYPE_FP32);
static_assert(sizeof(fa::fp16) == 2 && sizeof(fa::bf16) == 2);

namespace {

// Naive attention in double over packed [1, sq, h, d] float tensors (one K/V head per query head;
// v and o [1, s, h, dv], dv 0 meaning d).
double max_error(std::vector<float> const& q, std::vector<float> const& k, std::vector<float> const& v,
                 std::vector<float> const& o, int sq, int sk, int h, int d, bool causal, int dv = 0) {
  if (dv == 0) dv = d;
  double worst = 0;
  for (int head = 0; head < h; ++head) {
    for (int i = 0; i < sq; ++i) {
      std::vector<double> s;
      for (int j = 0; j < sk && (!causal || j <= i + sk - sq); ++j) {
        double dot = 0;
        for (int c = 0; c < d; ++c) dot += double(q[(i * h + head) * d + c]) * k[(j * h + head) * d + c];
        s.push_back(dot / std::sqrt(double(d)));
      }
      double m = -INFINITY, l = 0;
      for (double x : s) m = std::max(m, x);
      for (double x : s) l += std::exp(x - m);
      for (int c = 0; c < dv; ++c) {
        double want = 0;
        for (size_t j = 0; j < s.size(); ++j) want += std::exp(s[j] - m) / l * v[(j * h + head) * dv + c];
        // Written so that a NaN (an output never written: o starts as NaN) is the worst
        // error; std::max(worst, NaN) would keep worst.
        double const err = std::abs(want - o[(i * h + head) * dv + c]);
        if (!(err <= worst)) worst = err;
      }
    }
  }
  return worst;
}

std::vector<float> filled(size_t n, unsigned seed) {
  std::vector<float> x(n);
  for (auto& e : x) e = float((seed = seed * 1103515245u + 12345u) >> 8) / 16777216.f * 2.f - 1.f;
  return x;
}

}  // namespace

TEST_SUITE("cxx") {

TEST_CASE("typed forward on a CPU context matches double precision") {
  int const sq = 5, sk = 9, h = 2, d = 8;
  auto q = filled(size_t(sq) * h * d, 1), k = filled(size_t(sk) * h * d, 2), v = filled(size_t(sk) * h * d, 3);
  std::vector<float> o(q.size(), NAN);
  fa::Context ctx = fa::Context::cpu();
  CHECK(ctx.device() == FA_DEVICE_CPU);
  auto const Q = fa::Tensor<float>::packed(q.data(), 1, sq, h, d);
  auto const K = fa::Tensor<float>::packed(k.data(), 1, sk, h, d);
  auto const V = fa::Tensor<float>::packed(v.data(), 1, sk, h, d);
  auto const O = fa::Tensor<float>::packed(o.data(), 1, sq, h, d);
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    ctx.forward(Q, K, V, O, nullptr, [&](fa::Config& c) { c.causal(causal); });
    CHECK(max_error(q, k, v, o, sq, sk, h, d, causal) < 1e-6);
  }
}

TEST_CASE("a plan runs what its config says, and moves") {
  int const sq = 4, sk = 6, h = 1, d = 4;
  auto q = filled(size_t(sq) * h * d, 4), k = filled(size_t(sk) * h * d, 5), v = filled(size_t(sk) * h * d, 6);
  std::vector<float> o(q.size(), NAN);
  fa::Context ctx = fa::Context::cpu();
  fa::Config config = fa::Config::attention<float>(fa::Tensor<float>::packed(q.data(), 1, sq, h, d),
                                                   fa::Tensor<float>::packed(k.data(), 1, sk, h, d),
                                                   fa::Tensor<float>::packed(v.data(), 1, sk, h, d),
                                                   fa::Tensor<float>::packed(o.data(), 1, sq, h, d));
  CHECK(config.raw().dtype == FA_DTYPE_FP32);
  CHECK(config.raw().seqlen_k == sk);
  config.causal().validate();
  fa::Plan plan = ctx.plan(config);
  fa::Plan moved = std::move(plan);
  CHECK_FALSE(plan);
  REQUIRE(moved);
  CHECK(moved.workspace_size() == 0);
  CHECK(moved.num_splits() == 1);
  moved.run(q.data(), k.data(), v.data(), o.data());
  CHECK(max_error(q, k, v, o, sq, sk, h, d, true) < 1e-6);
  // An empty plan is refused by the library, as a NULL plan is.
  CHECK_THROWS_AS(plan.run(q.data(), k.data(), v.data(), o.data()), fa::Error);
}

TEST_CASE("contexts move, and release hands over ownership") {
  fa::Context a = fa::Context::cpu();
  fa_context_t* raw = a.get();
  fa::Context b = std::move(a);
  CHECK_FALSE(a);
  CHECK(b.get() == raw);
  a = std::move(b);
  CHECK(a.get() == raw);
  fa::Context c = fa::Context::adopt(a.release());
  CHECK_FALSE(a);
  CHECK(c.get() == raw);
}

TEST_CASE("errors carry the status and the library's detail") {
  try {
    fa::Context gpu(1 << 20);  // no machine has this many GPUs; a CPU-only build has none at all
    FAIL("a context on device 1 << 20 was created");
  } catch (fa::Error const& e) {
    CHECK(e.status() == FA_STATUS_NO_DEVICE);
    CHECK(!e.detail().empty());
    CHECK(std::string(e.what()).find(fa_status_string(FA_STATUS_NO_DEVICE)) == 0);
    CHECK(std::string(e.what()).find(e.detail()) != std::string::npos);
  }

  fa::Config bad;
  bad.raw().heads_q = 3;
  bad.raw().heads_kv = 2;
  try {
    bad.validate();
    FAIL("heads_q 3, heads_kv 2 validated");
  } catch (fa::Error const& e) {
    CHECK(e.status() == FA_STATUS_INVALID_ARGUMENT);
    CHECK(e.detail().find("heads") != std::string::npos);
  }
}

TEST_CASE("v's head_dim is the value head dim") {
  int const sq = 4, sk = 7, h = 2, d = 12, dv = 5;
  auto q = filled(size_t(sq) * h * d, 4), k = filled(size_t(sk) * h * d, 5), v = filled(size_t(sk) * h * dv, 6);
  std::vector<float> o(size_t(sq) * h * dv, NAN);
  fa::Context ctx = fa::Context::cpu();
  auto const O = fa::Tensor<float>::packed(o.data(), 1, sq, h, dv);
  auto const V = fa::Tensor<float>::packed(v.data(), 1, sk, h, dv);
  ctx.forward(fa::Tensor<float>::packed(q.data(), 1, sq, h, d),
              fa::Tensor<float>::packed(k.data(), 1, sk, h, d), V, O, nullptr, [](fa::Config&) {});
  CHECK(max_error(q, k, v, o, sq, sk, h, d, false, dv) < 1e-6);
  auto const o_wide = fa::Tensor<float>::packed(o.data(), 1, sq, h, d);
  CHECK_THROWS_AS(fa::Config::attention<float>(fa::Tensor<float>::packed(q.data(), 1, sq, h, d),
                                               fa::Tensor<float>::packed(k.data(), 1, sk, h, d), V,
                                               o_wide),
                  fa::Error);
}

TEST_CASE("tensor shapes that disagree are refused before the library is called") {
  std::vector<float> buf(64);
  auto const q = fa::Tensor<float>::packed(buf.data(), 1, 2, 2, 4);
  auto const k = fa::Tensor<float>::packed(buf.data(), 1, 3, 1, 4);
  auto const v_short = fa::Tensor<float>::packed(buf.data(), 1, 2, 1, 4);
  auto const o = fa::Tensor<float>::packed(buf.data(), 1, 2, 2, 4);
  try {
    fa::Config::attention<float>(q, k, v_short, o);
    FAIL("v shorter than k was accepted");
  } catch (fa::Error const& e) {
    CHECK(e.status() == FA_STATUS_INVALID_ARGUMENT);
    CHECK(e.detail().find("v [1, 2, 1, 4]") != std::string::npos);
  }
  fa::Config const good = fa::Config::attention<float>(q, k, k, o);
  CHECK(good.raw().heads_q == 2);
  CHECK(good.raw().heads_kv == 1);
}

TEST_CASE("16-bit tensors set their dtype") {
  std::vector<fa::bf16> b(8);
  std::vector<fa::fp16> h(8);
  auto const tb = fa::Tensor<fa::bf16>::packed(b.data(), 1, 1, 2, 4);
  auto const th = fa::Tensor<fa::fp16>::packed(h.data(), 1, 1, 2, 4);
  CHECK(fa::Config::attention<fa::bf16>(tb, tb, tb, tb).raw().dtype == FA_DTYPE_BF16);
  CHECK(fa::Config::attention<fa::fp16>(th, th, th, th).raw().dtype == FA_DTYPE_FP16);
  CHECK(fa::version() == fa_version_string());
}

}  // TEST_SUITE
