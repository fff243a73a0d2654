// The ring-attention schedule of examples/context_parallel (ring_schedule.hpp, the code the NCCL
// example runs) simulated rank by rank on the CPU backend, against the float64 reference of
// single-device attention: N = 1..4 ranks, contiguous and zigzag shards, causal and not, GQA,
// sequence lengths that N (or 2N) does not divide, fp32 and bf16.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/reference.hpp"
#include "context_parallel/ring_schedule.hpp"
#include "flashattn.h"

namespace {

// fp32: the single-device CPU tolerance (tests/cpu/test_cpu_attention.cpp: measured errors below
// 6e-7) doubled: each of up to 2N-1 = 7 merges adds one fp32 rounding of a convex combination
// (about 6e-8 relative each), which stays far inside it.
constexpr fa_test::Tolerance kFp32Tolerance{4e-6, 2e-5, 0.0};
// bf16: every partial O is rounded to bf16 before it is merged and each merge rounds again, each
// rounding off by at most half an ulp of what it rounds (2^-9 relative). The partials are convex
// combinations of V rows (|V| <= 1 here), so they reach magnitudes well above the merged result
// where the ranks' contributions cancel (measured: 0.0026 off at |O| = 0.004, 4 ranks): the bound
// is absolute, one 2^-9 per rounding that a Q chunk's result goes through (N partials and merges
// at most, a convex combination carrying the partials' errors without growing them), plus half an
// ulp of the final rounding. The fp32 cases carry the sharp check.
fa_test::Tolerance bf16_tolerance(int world) { return {world * 0x1p-9, 2e-5, 0.5}; }
constexpr fa_test::Tolerance kLseTolerance{1e-4, 0.0, 0.0};

struct Case {
  int world;
  ring::Layout layout;
  bool causal;
  int dtype;
  int64_t batch, seqlen, heads_q, heads_kv, head_dim;
};

struct Result {
  fa_status status;
  fa_test::ErrorStats o, lse;
};

// Runs the ring for `c` and compares it with the reference of the same problem, or, with
// reference_causal set otherwise, of the problem with the other mask (a wrong reference).
Result run_case(const Case& c, uint64_t seed, bool reference_causal) {
  fa_test::TestProblem p = fa_test::make_problem(c.dtype, c.batch, c.seqlen, c.seqlen, c.heads_q,
                                                 c.heads_kv, c.head_dim, reference_causal);
  fa_test::HostBuffers h = fa_test::make_buffers(p, seed);
  fa_context_t* ctx = nullptr;
  REQUIRE(fa_context_create(FA_DEVICE_CPU, &ctx) == FA_STATUS_SUCCESS);
  const ring::Schedule s(c.seqlen, c.world, c.layout, c.causal);
  ring::Problem rp;
  rp.dtype = c.dtype;
  rp.batch = c.batch;
  rp.heads_q = c.heads_q;
  rp.heads_kv = c.heads_kv;
  rp.head_dim = c.head_dim;
  Result r{};
  r.status = ring::simulate_ring(
      ctx, s, rp, h.q(p), h.k(p), h.v(p), h.o(p), h.lse.data(),
      [](size_t bytes) { return std::malloc(bytes); }, [](void* ptr) { std::free(ptr); },
      [](void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); });
  fa_context_destroy(ctx);
  if (r.status != FA_STATUS_SUCCESS) {
    return r;
  }
  const fa_test::Reference ref = fa_test::reference_f64(p, h.in.data());
  r.o = fa_test::compare_output(p, h.out.data(), ref.o,
                                c.dtype == FA_DTYPE_FP32 ? kFp32Tolerance : bf16_tolerance(c.world));
  r.lse = fa_test::compare_lse(h.lse.data(), ref.lse, kLseTolerance);
  return r;
}

void check_case(const Case& c, uint64_t seed) {
  // doctest's INFO prints a char as a number and a const char* as a pointer: strings only.
  const std::string layout = c.layout == ring::Layout::zigzag ? "zigzag" : "contiguous";
  INFO("world " << c.world << " " << layout << " causal " << c.causal << " dtype " << c.dtype
                << " batch " << c.batch << " seqlen " << c.seqlen << " heads " << c.heads_q
                << "/" << c.heads_kv << " head_dim " << c.head_dim << " seed "
                << seed);
  const Result r = run_case(c, seed, c.causal);
  REQUIRE_MESSAGE(r.status == FA_STATUS_SUCCESS, fa_last_error_detail());
  INFO("O: max abs error " << r.o.max_abs << ", worst at " << r.o.worst << ": got "
                           << r.o.worst_got << ", reference " << r.o.worst_ref);
  INFO("LSE: max abs error " << r.lse.max_abs << ", worst at " << r.lse.worst);
  CHECK_FALSE(r.o.non_finite);
  CHECK(r.o.n_bad == 0);
  CHECK_FALSE(r.lse.non_finite);
  CHECK(r.lse.n_bad == 0);
}

}  // namespace

TEST_SUITE("cpu") {

TEST_CASE("context parallel: schedule shards, masks and balance") {
  // 10 rows over 3 ranks, zigzag: 6 chunks of 2, 2, 2, 2, 1, 1 rows (10 % 6 = 4 longer ones).
  const ring::Schedule z(10, 3, ring::Layout::zigzag, true);
  CHECK(z.chunks(0)[0].begin == 0);
  CHECK(z.chunks(0)[1].begin == 9);
  CHECK(z.chunks(2)[0].begin == 4);
  CHECK(z.chunks(2)[1].begin == 6);
  CHECK(z.shard_length(0) == 3);
  CHECK(z.shard_length(2) == 4);
  CHECK(z.max_shard_length() == 4);
  CHECK(z.kv_origin(0, 1) == 2);
  CHECK(z.kv_origin(2, 2) == 0);
  // Every (query, key) pair below the diagonal is computed exactly once over the N steps, and
  // the ranks' causal work differs by no more than one chunk's rounding.
  for (int world = 1; world <= 4; ++world) {
    for (const ring::Layout layout : {ring::Layout::contiguous, ring::Layout::zigzag}) {
      for (const bool causal : {false, true}) {
        const int64_t seqlen = 8 * world + 3;
        const ring::Schedule s(seqlen, world, layout, causal);
        std::vector<int> seen(static_cast<size_t>(seqlen * seqlen), 0);
        std::vector<int64_t> pairs(static_cast<size_t>(world), 0);
        for (int r = 0; r < world; ++r) {
          const std::vector<ring::Chunk> qc = s.chunks(r);
          size_t firsts = 0;  // each local chunk is written first exactly once
          for (int t = 0; t < world; ++t) {
            const std::vector<ring::Chunk> kc = s.chunks(s.kv_origin(r, t));
            for (const ring::Work& w : s.work(r, t)) {
              firsts += w.first ? 1 : 0;
              // Local rows back to global ones, through the shards' chunk lists.
              auto global = [](const std::vector<ring::Chunk>& cs, int64_t local) {
                for (const ring::Chunk& c : cs) {
                  if (local < c.length) {
                    return c.begin + local;
                  }
                  local -= c.length;
                }
                return int64_t{-1};
              };
              for (int64_t i = 0; i < w.q_length; ++i) {
                for (int64_t j = 0; j < w.kv_length; ++j) {
                  if (w.causal && j > i + w.kv_length - w.q_length) {
                    continue;
                  }
                  const int64_t gi = global(qc, w.q_offset + i);
                  const int64_t gj = global(kc, w.kv_offset + j);
                  ++seen[static_cast<size_t>(gi * seqlen + gj)];
                  ++pairs[static_cast<size_t>(r)];
                }
              }
            }
          }
          CHECK(firsts == qc.size());
        }
        for (int64_t i = 0; i < seqlen; ++i) {
          for (int64_t j = 0; j < seqlen; ++j) {
            INFO("world " << world << " causal " << causal << " pair " << i << "," << j);
            REQUIRE(seen[static_cast<size_t>(i * seqlen + j)] == (!causal || j <= i ? 1 : 0));
          }
        }
        if (causal && world > 1) {
          // Chunk lengths differ by one row, so a rank's two chunks may hold two rows more than
          // another's: at most 2 seqlen pairs apart when balanced. Contiguous shards are not
          // (rank N-1 does 2N-1 times rank 0's work: 80 pairs apart at N = 2, seqlen 19).
          const auto [lo, hi] = std::minmax_element(pairs.begin(), pairs.end());
          INFO("pairs per rank: " << *lo << " to " << *hi);
          CHECK((*hi - *lo <= 2 * seqlen) == (layout == ring::Layout::zigzag));
        }
      }
    }
  }
  CHECK_THROWS_AS(ring::Schedule(5, 3, ring::Layout::zigzag, true), std::invalid_argument);
}

TEST_CASE("context parallel: simulated ring matches single-device attention (float64 ref)") {
  uint64_t seed = 2000;
  for (int world = 1; world <= 4; ++world) {
    for (const ring::Layout layout : {ring::Layout::contiguous, ring::Layout::zigzag}) {
      for (const bool causal : {false, true}) {
        // 8N + 3 rows: N and 2N never divide it (uneven shards); GQA 4/2; batch 2.
        check_case(Case{world, layout, causal, FA_DTYPE_FP32, 2, 8 * world + 3, 4, 2, 16},
                   ++seed);
        // MQA, a longer sequence, bf16.
        check_case(Case{world, layout, causal, FA_DTYPE_BF16, 1, 61, 3, 1, 32}, ++seed);
      }
    }
  }
}

TEST_CASE("context parallel: the comparison catches a wrong ring") {
  // The causal ring compared with the non-causal reference must fail: the checks above can fail.
  const Result r = run_case(Case{3, ring::Layout::zigzag, true, FA_DTYPE_FP32, 1, 27, 2, 1, 16},
                            77, false);
  REQUIRE(r.status == FA_STATUS_SUCCESS);
  CHECK(r.o.n_bad > 0);
}

TEST_CASE("context parallel: a dtype the ring does not run is refused before any copy") {
  // e4m3 inputs are one byte and write a 16-bit o: the shard copies, sized for two-byte elements,
  // read past the caller's q, k and v (AddressSanitizer, world 1).
  fa_context_t* ctx = nullptr;
  REQUIRE(fa_context_create(FA_DEVICE_CPU, &ctx) == FA_STATUS_SUCCESS);
  const ring::Schedule s(4, 1, ring::Layout::contiguous, true);
  ring::Problem p;
  p.dtype = FA_DTYPE_E4M3;
  p.head_dim = 8;
  int allocations = 0;
  const fa_status st = ring::simulate_ring(
      ctx, s, p, nullptr, nullptr, nullptr, nullptr, nullptr,
      [&](size_t bytes) { ++allocations; return std::malloc(bytes); },
      [](void* ptr) { std::free(ptr); },
      [](void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); });
  CHECK(st == FA_STATUS_INVALID_ARGUMENT);
  CHECK(allocations == 0);
  ring::RankBuffers b;
  CHECK(ring::run_step(ctx, nullptr, s, p, 0, 0, b) == FA_STATUS_INVALID_ARGUMENT);
  fa_context_destroy(ctx);
}

}  // TEST_SUITE
