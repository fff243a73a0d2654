// One context shared by many threads: results equal single-threaded ones bit for bit, choices are
// cached safely, and each thread keeps its own detail message. Run under ThreadSanitizer in CI.
#include <doctest/doctest.h>

#include <atomic>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "flashattn.h"

namespace {

struct Case {
  fa_config cfg;
  std::vector<float> q, k, v, expected_o, expected_lse;
};

Case make_case(int index) {
  Case c;
  REQUIRE(fa_config_init(&c.cfg) == FA_STATUS_SUCCESS);
  c.cfg.dtype = FA_DTYPE_FP32;
  c.cfg.batch = 1 + index % 2;
  c.cfg.seqlen_q = 9 + 7 * index;
  c.cfg.seqlen_k = 33 - 5 * (index % 3);
  c.cfg.heads_q = 4;
  c.cfg.heads_kv = index % 2 ? 2 : 4;
  c.cfg.head_dim = 16;
  c.cfg.causal = index % 2;
  std::mt19937 rng(1234 + index);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  auto fill = [&](std::vector<float>& x, int64_t n) {
    x.resize(static_cast<size_t>(n));
    for (float& f : x) f = dist(rng);
  };
  fill(c.q, c.cfg.batch * c.cfg.seqlen_q * c.cfg.heads_q * 16);
  fill(c.k, c.cfg.batch * c.cfg.seqlen_k * c.cfg.heads_kv * 16);
  fill(c.v, c.cfg.batch * c.cfg.seqlen_k * c.cfg.heads_kv * 16);
  c.expected_o.resize(c.q.size());
  c.expected_lse.resize(static_cast<size_t>(c.cfg.batch * c.cfg.heads_q * c.cfg.seqlen_q));
  return c;
}

}  // namespace

TEST_SUITE("concurrency") {

TEST_CASE("one context, many threads: forward, plans and detail messages") {
  fa_context_t* ctx = nullptr;
  REQUIRE(fa_context_create(FA_DEVICE_CPU, &ctx) == FA_STATUS_SUCCESS);
  constexpr int kCases = 4;
  std::vector<Case> cases;
  for (int i = 0; i < kCases; ++i) {
    cases.push_back(make_case(i));
    Case& c = cases.back();
    REQUIRE(fa_forward(ctx, &c.cfg, c.q.data(), c.k.data(), c.v.data(), c.expected_o.data(),
                       c.expected_lse.data(), nullptr) == FA_STATUS_SUCCESS);
  }

  constexpr int kThreads = 8;
  constexpr int kIterations = 6;
  std::atomic<int> mismatches{0}, failures{0}, wrong_details{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int it = 0; it < kIterations; ++it) {
        Case const& c = cases[(t + it) % kCases];
        std::vector<float> o(c.expected_o.size()), lse(c.expected_lse.size());
        fa_status s;
        if ((t + it) % 2 == 0) {
          s = fa_forward(ctx, &c.cfg, c.q.data(), c.k.data(), c.v.data(), o.data(), lse.data(),
                         nullptr);
        } else {
          fa_plan_t* plan = nullptr;
          s = fa_plan_create(ctx, &c.cfg, &plan);
          if (s == FA_STATUS_SUCCESS) {
            s = fa_plan_run(plan, c.q.data(), c.k.data(), c.v.data(), o.data(), lse.data(), nullptr,
                            0, nullptr);
            fa_plan_destroy(plan);
          }
        }
        if (s != FA_STATUS_SUCCESS) ++failures;
        if (std::memcmp(o.data(), c.expected_o.data(), o.size() * sizeof(float)) != 0 ||
            std::memcmp(lse.data(), c.expected_lse.data(), lse.size() * sizeof(float)) != 0) {
          ++mismatches;
        }
        // A failing call on this thread sets this thread's message only.
        fa_config bad = c.cfg;
        bad.heads_q = 1000 + t;
        bad.heads_kv = 1001 + t;  // > heads_q, so never a divisor
        fa_forward(ctx, &bad, c.q.data(), c.k.data(), c.v.data(), o.data(), nullptr, nullptr);
        std::string want = "heads_q = " + std::to_string(1000 + t) + " ";
        if (std::string(fa_last_error_detail()).find(want) == std::string::npos) ++wrong_details;
        (void)fa_kernel_count();
      }
    });
  }
  for (std::thread& th : threads) th.join();
  CHECK(failures == 0);
  CHECK(mismatches == 0);
  CHECK(wrong_details == 0);
  fa_context_destroy(ctx);
}

}  // TEST_SUITE
