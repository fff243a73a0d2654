// The inference features on the CPU backend (the oracle the GPU kernels are tested against):
// masks and biases, varlen batches, KV caches (contiguous and paged), split counts, merge_states,
// malformed index tensors, overlapping outputs, and callers built against the 0.2 fa_config.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/feature_cases.hpp"
#include "common/features.hpp"
#include "flashattn.h"

namespace {

using fa_test::FeatureCase;
using fa_test::FeatureData;

// The CPU backend computes in fp32 and rounds O once: errors are the dtype's half ulp (at most
// 2^-9 = 0.002 for bf16 outputs below 1) plus fp32 rounding. The smallest effect a wrong mask,
// bias or sink has on O is far larger: inputs are at least 1/64 in magnitude.
double o_bound(int dtype) { return dtype == FA_DTYPE_BF16 ? 4e-3 : dtype == FA_DTYPE_FP16 ? 6e-4 : 2e-5; }
constexpr double kLseBound = 2e-4;

struct Cpu {
  Cpu() { REQUIRE(fa_context_create(FA_DEVICE_CPU, &ctx) == FA_STATUS_SUCCESS); }
  ~Cpu() { fa_context_destroy(ctx); }
  Cpu(const Cpu&) = delete;
  Cpu& operator=(const Cpu&) = delete;
  fa_context_t* ctx = nullptr;
};

void run_and_check(const Cpu& cpu, FeatureData& d) {
  const fa_run_args args = d.host_args();
  const fa_status s = fa_forward_ex(cpu.ctx, &d.config, d.q.data(), d.k.data(), d.v.data(),
                                    d.o.data(), d.lse.data(), &args, nullptr);
  INFO(fa_test::describe(d.c) << ": " << fa_last_error_detail());
  REQUIRE(s == FA_STATUS_SUCCESS);
  const fa_test::FeatureErrors e =
      fa_test::compare_features(d, d.o.data(), d.lse.data(), fa_test::feature_reference(d));
  INFO("o max err " << e.o_max << ", lse max err " << e.lse_max << ", bad " << e.bad
                     << ", o columns written past head_dim_v " << e.written_past);
  CHECK(e.bad == 0);
  CHECK(e.written_past == 0);
  CHECK(e.o_max <= o_bound(d.c.dtype));
  CHECK(e.lse_max <= kLseBound);
}

// Runs each case on data seeded seed + 1, seed + 2, ... and reports how many ran.
void run_all(const Cpu& cpu, const std::vector<FeatureCase>& cases, uint64_t seed) {
  for (const FeatureCase& c : cases) {
    FeatureData d = fa_test::make_feature_data(c, ++seed);
    run_and_check(cpu, d);
  }
  MESSAGE(cases.size() << " cases checked");
}

}  // namespace

TEST_SUITE("cpu") {

TEST_CASE("every inference feature, alone and combined, matches the float64 reference") {
  Cpu cpu;
  std::vector<FeatureCase> cases = fa_test::feature_cases(FA_DTYPE_BF16, 64, 301);
  for (const FeatureCase& c : fa_test::feature_cases(FA_DTYPE_FP32, 64, 301)) cases.push_back(c);
  run_all(cpu, cases, 1000);
}

TEST_CASE("fp16 and odd head dims take the features too") {
  Cpu cpu;
  for (int64_t dim : {1, 40, 96}) {
    FeatureCase c;
    c.dtype = FA_DTYPE_FP16;
    c.head_dim = dim;
    c.layout = FA_LAYOUT_PAGED_KV;
    c.page_size = 3;
    c.sq = {4, 4};  // a cache's queries are dense: one length for every sequence
    c.sk = {50, 9};
    c.causal = true;
    c.window = true;
    c.left = 10;
    c.right = -1;
    c.softcap = 3.0f;
    c.alibi = FA_ALIBI_PER_HEAD;
    c.sinks = true;
    FeatureData d = fa_test::make_feature_data(c, 77 + static_cast<uint64_t>(dim));
    run_and_check(cpu, d);
  }
}

TEST_CASE("a row that sees no key gets O = 0 and LSE -inf, or the sink's logit") {
  Cpu cpu;
  FeatureCase c;
  c.sq = {8};
  c.sk = {4};
  c.causal = true;  // bottom-right aligned: rows 0 to 3 sit before the first key
  c.window = true;
  c.left = 2;
  c.right = -1;
  for (bool sinks : {false, true}) {
    c.sinks = sinks;
    FeatureData d = fa_test::make_feature_data(c, 5);
    run_and_check(cpu, d);
    for (int64_t h = 0; h < c.heads_q; ++h) {
      const float lse0 = d.lse[static_cast<size_t>(d.lse_index(0, h, 0))];
      if (sinks) {
        CHECK(lse0 == doctest::Approx(d.sinks[static_cast<size_t>(h)]));
      } else {
        CHECK(lse0 == -std::numeric_limits<float>::infinity());
      }
      CHECK(fa_test::load_elem(c.dtype, d.o.data(), d.o_index(0, 0, h)) == 0.0);
    }
  }
}

TEST_CASE("a value head dim other than head_dim, with every layout and feature") {
  // DeepSeek-V2/V3 prefill (192/128), halved (64/32), larger than head_dim (the CPU runs it),
  // and dims off the 16-column padding of the backend (40/24, 17/3), crossed with the feature
  // matrix's layouts: causal, GQA, varlen with an empty sequence, contiguous and paged caches.
  Cpu cpu;
  const int64_t dims[][2] = {{192, 128}, {64, 32}, {32, 96}, {40, 24}, {17, 3}};
  std::vector<FeatureCase> cases;
  for (const auto& dim : dims) {
    for (int dtype : {FA_DTYPE_BF16, FA_DTYPE_FP32}) {
      FeatureCase base;
      base.dtype = dtype;
      base.head_dim = dim[0];
      base.head_dim_v = dim[1];
      base.heads_q = 8;
      base.heads_kv = 2;
      FeatureCase dense = base;
      dense.sq = {17, 17};
      dense.sk = {77, 77};
      dense.causal = true;
      FeatureCase varlen = base;
      varlen.layout = FA_LAYOUT_VARLEN;
      varlen.sq = {17, 0, 65};
      varlen.sk = {40, 3, 65};
      varlen.causal = true;
      FeatureCase cache = base;
      cache.layout = FA_LAYOUT_KV_CACHE;
      cache.sq = {5, 5};
      cache.sk = {70, 9};
      cache.alibi = FA_ALIBI_PER_HEAD;
      cache.sinks = true;
      FeatureCase paged = base;
      paged.layout = FA_LAYOUT_PAGED_KV;
      paged.sq = {3, 3};
      paged.page_size = 16;
      paged.softcap = 4.0f;
      paged.sk = {50, 33};
      paged.causal = true;
      paged.window = true;
      paged.left = 20;
      paged.right = -1;
      cases.insert(cases.end(), {dense, varlen, cache, paged});
    }
  }
  run_all(cpu, cases, 1800);
}

TEST_CASE("random (head_dim, head_dim_v) pairs match the float64 reference") {
  Cpu cpu;
  std::mt19937_64 rng(0x18);
  std::uniform_int_distribution<int64_t> dim(1, 160);
  const int layouts[] = {FA_LAYOUT_DENSE, FA_LAYOUT_VARLEN, FA_LAYOUT_KV_CACHE, FA_LAYOUT_PAGED_KV};
  for (int i = 0; i < 16; ++i) {
    FeatureCase c;
    c.head_dim = dim(rng);
    do {
      c.head_dim_v = dim(rng);
    } while (c.head_dim_v == c.head_dim);
    c.layout = layouts[i % 4];
    c.causal = i % 3 != 0;
    c.heads_q = i % 2 == 0 ? 4 : 6;
    c.heads_kv = i % 2 == 0 ? 4 : 2;
    // Dense: one length per tensor; caches: one query length.
    const bool varlen = c.layout == FA_LAYOUT_VARLEN, dense = c.layout == FA_LAYOUT_DENSE;
    c.sq = varlen ? std::vector<int64_t>{7, 30} : std::vector<int64_t>{7, 7};
    c.sk = dense ? std::vector<int64_t>{30, 30} : std::vector<int64_t>{30, 45};
    c.page_size = 5;
    FeatureData d = fa_test::make_feature_data(c, 1900 + static_cast<uint64_t>(i));
    run_and_check(cpu, d);
  }
}

TEST_CASE("malformed index tensors are refused with the entry named; outputs untouched") {
  Cpu cpu;
  auto expect_refused = [&](FeatureData& d, const char* needle) {
    const std::vector<unsigned char> before = d.o;
    const fa_run_args args = d.host_args();
    CHECK(fa_forward_ex(cpu.ctx, &d.config, d.q.data(), d.k.data(), d.v.data(), d.o.data(),
                        d.lse.data(), &args, nullptr) == FA_STATUS_INVALID_ARGUMENT);
    INFO(std::string(fa_last_error_detail()));
    CHECK(std::string(fa_last_error_detail()).find(needle) != std::string::npos);
    CHECK(d.o == before);
  };
  FeatureCase v;
  v.layout = FA_LAYOUT_VARLEN;
  v.sq = {5, 7};
  v.sk = {9, 3};
  {
    FeatureData d = fa_test::make_feature_data(v, 1);
    d.cu_q[1] = 9;  // the second sequence would have length -2
    expect_refused(d, "[1] = 9");
  }
  {
    FeatureData d = fa_test::make_feature_data(v, 2);
    d.cu_k[2] = 11;  // total_k is 12
    expect_refused(d, "cu_seqlens_k[2]");
  }
  {
    FeatureData d = fa_test::make_feature_data(v, 3);
    d.cu_q[0] = 1;
    expect_refused(d, "cu_seqlens_q[0]");
  }
  FeatureCase p;
  p.layout = FA_LAYOUT_PAGED_KV;
  p.page_size = 4;
  p.sq = {1, 1};
  p.sk = {10, 3};
  {
    FeatureData d = fa_test::make_feature_data(p, 4);
    d.block_table[1] = static_cast<int32_t>(d.config.num_pages);  // one past the last page
    expect_refused(d, "block_table[0][1]");
  }
  {
    FeatureData d = fa_test::make_feature_data(p, 5);
    d.cache_seqlens[1] = static_cast<int32_t>(d.config.seqlen_k + 1);
    expect_refused(d, "cache_seqlens[1]");
  }
  {
    FeatureData d = fa_test::make_feature_data(p, 6);
    const std::vector<unsigned char> before = d.o;
    fa_run_args args = d.host_args();
    args.block_table = nullptr;
    CHECK(fa_forward_ex(cpu.ctx, &d.config, d.q.data(), d.k.data(), d.v.data(), d.o.data(),
                        nullptr, &args, nullptr) == FA_STATUS_INVALID_ARGUMENT);
    CHECK(std::string(fa_last_error_detail()).find("block_table is NULL") != std::string::npos);
    // fa_forward has no run arguments: a config that needs them is refused, not guessed.
    CHECK(fa_forward(cpu.ctx, &d.config, d.q.data(), d.k.data(), d.v.data(), d.o.data(), nullptr,
                     nullptr) == FA_STATUS_INVALID_ARGUMENT);
    CHECK(d.o == before);
  }
}

TEST_CASE("fa_config validation of the 0.3 fields names the field") {
  fa_config c;
  REQUIRE(fa_config_init(&c) == FA_STATUS_SUCCESS);
  struct Bad {
    const char* field;
    void (*set)(fa_config&);
  };
  const Bad bad[] = {
      {"layout", [](fa_config& x) { x.layout = 4; }},
      {"window", [](fa_config& x) { x.window = 2; }},
      {"window_left", [](fa_config& x) { x.window_left = 3; }},  // set while window = 0
      {"softcap", [](fa_config& x) { x.softcap = -1.0f; }},
      {"alibi", [](fa_config& x) { x.alibi = 3; }},
      {"sinks", [](fa_config& x) { x.sinks = 2; }},
      {"num_splits", [](fa_config& x) { x.num_splits = 257; }},
      {"total_q", [](fa_config& x) { x.total_q = 5; }},  // dense takes no total
      {"total_q", [](fa_config& x) { x.layout = FA_LAYOUT_VARLEN; }},
      {"page_size", [](fa_config& x) {
         x.layout = FA_LAYOUT_PAGED_KV;
         x.num_pages = 1;
         x.max_pages_per_seq = 1;
       }},
      {"max_pages_per_seq", [](fa_config& x) {
         x.layout = FA_LAYOUT_PAGED_KV;
         x.num_pages = 4;
         x.page_size = 2;
         x.max_pages_per_seq = 1;
         x.seqlen_k = 3;
       }},
      {"q_batch_stride", [](fa_config& x) {
         x.layout = FA_LAYOUT_VARLEN;
         x.total_q = x.total_k = 4;
         x.q_batch_stride = 8;
         x.q_seq_stride = x.q_head_stride = 1;
       }},
  };
  for (const Bad& b : bad) {
    fa_config x = c;
    b.set(x);
    INFO(b.field);
    CHECK(fa_config_validate(&x) == FA_STATUS_INVALID_ARGUMENT);
    CHECK(std::string(fa_last_error_detail()).find(b.field) != std::string::npos);
  }
}

TEST_CASE("a caller built against 0.2 (the shorter fa_config) keeps 0.2's behaviour") {
  Cpu cpu;
  FeatureCase c;
  c.sq = {33};
  c.sk = {40};
  c.causal = true;
  FeatureData d = fa_test::make_feature_data(c, 9);
  // 0.2's fa_config ended with the o strides: the new fields are simply not there.
  const size_t old_size = offsetof(fa_config, layout);
  std::vector<unsigned char> old(old_size);
  d.config.struct_size = old_size;
  std::memcpy(old.data(), &d.config, old_size);
  REQUIRE(fa_forward(cpu.ctx, reinterpret_cast<const fa_config*>(old.data()), d.q.data(),
                     d.k.data(), d.v.data(), d.o.data(), d.lse.data(), nullptr) == FA_STATUS_SUCCESS);
  const fa_test::FeatureErrors e =
      fa_test::compare_features(d, d.o.data(), d.lse.data(), fa_test::feature_reference(d));
  CHECK(e.bad == 0);
  CHECK(e.o_max <= o_bound(c.dtype));
  d.config.struct_size = old_size - 8;  // shorter than any published version
  CHECK(fa_config_validate(&d.config) == FA_STATUS_BAD_STRUCT_SIZE);
}

TEST_CASE("a caller whose fa_config ends before head_dim_v runs with head_dim_v = head_dim") {
  Cpu cpu;
  FeatureCase c;
  c.layout = FA_LAYOUT_PAGED_KV;  // a 0.3 field in use, so the tail cut is what is tested
  c.page_size = 4;
  c.sq = {9, 9};
  c.sk = {30, 12};
  c.causal = true;
  FeatureData d = fa_test::make_feature_data(c, 19);
  const size_t old_size = offsetof(fa_config, head_dim_v);
  // The bytes past the caller's struct hold what a caller's stack would: here a head_dim_v of
  // 32, which must not be read (it would make v and o 32 columns wide).
  fa_config padded = d.config;
  padded.head_dim_v = 32;
  padded.struct_size = old_size;
  const fa_run_args args = d.host_args();
  REQUIRE(fa_forward_ex(cpu.ctx, &padded, d.q.data(), d.k.data(), d.v.data(), d.o.data(),
                        d.lse.data(), &args, nullptr) == FA_STATUS_SUCCESS);
  const fa_test::FeatureErrors e =
      fa_test::compare_features(d, d.o.data(), d.lse.data(), fa_test::feature_reference(d));
  CHECK(e.bad == 0);
  CHECK(e.o_max <= o_bound(c.dtype));
  int64_t v_extent = 0;
  REQUIRE(fa_config_extents(&padded, nullptr, nullptr, &v_extent, nullptr, nullptr) ==
          FA_STATUS_SUCCESS);
  CHECK(v_extent == d.config.num_pages * c.page_size * c.heads_kv * c.head_dim);
  // The full struct reads it: v's rows keep their 64-element stride, of which the last one
  // spans 32 columns.
  padded.struct_size = sizeof padded;
  REQUIRE(fa_config_extents(&padded, nullptr, nullptr, &v_extent, nullptr, nullptr) ==
          FA_STATUS_SUCCESS);
  CHECK(v_extent == d.config.num_pages * c.page_size * c.heads_kv * c.head_dim - (c.head_dim - 32));
}

TEST_CASE("outputs overlapping inputs or each other are refused") {
  Cpu cpu;
  FeatureCase c;
  c.sq = {16};
  c.sk = {16};
  c.heads_q = c.heads_kv = 2;
  FeatureData d = fa_test::make_feature_data(c, 11);
  const std::vector<unsigned char> q_before = d.q;
  // o = q (the Python probe's forward(q, k, v, out=q)).
  CHECK(fa_forward(cpu.ctx, &d.config, d.q.data(), d.k.data(), d.v.data(), d.q.data(), nullptr,
                   nullptr) == FA_STATUS_INVALID_ARGUMENT);
  CHECK(std::string(fa_last_error_detail()).find("overlaps q") != std::string::npos);
  CHECK(d.q == q_before);
  // o starting inside v.
  CHECK(fa_forward(cpu.ctx, &d.config, d.q.data(), d.k.data(), d.v.data(), d.v.data() + 64,
                   nullptr, nullptr) == FA_STATUS_INVALID_ARGUMENT);
  // lse inside o.
  CHECK(fa_forward(cpu.ctx, &d.config, d.q.data(), d.k.data(), d.v.data(), d.o.data(),
                   reinterpret_cast<float*>(d.o.data()), nullptr) == FA_STATUS_INVALID_ARGUMENT);
  CHECK(std::string(fa_last_error_detail()).find("lse") != std::string::npos);
  // Inputs may overlap each other (q = k = v is self-attention on one tensor).
  CHECK(fa_forward(cpu.ctx, &d.config, d.q.data(), d.q.data(), d.q.data(), d.o.data(), nullptr,
                   nullptr) == FA_STATUS_SUCCESS);
}

TEST_CASE("outputs may not overlap the run-time arrays, which are read during the run") {
  Cpu cpu;
  FeatureCase c;
  c.dtype = FA_DTYPE_FP32;
  c.layout = FA_LAYOUT_VARLEN;
  c.sq = {5, 7};
  c.sk = {6, 9};
  c.sinks = true;
  FeatureData d = fa_test::make_feature_data(c, 31);
  // cu_seqlens_q and the sinks inside lse's range: lse's writes would rewrite the offsets the
  // CPU backend is still reading (a crash before the check).
  std::vector<float> lse_and_more(d.lse.size() + 8);
  std::vector<int32_t> const cu_q = d.cu_q;
  auto* cu_inside = reinterpret_cast<int32_t*>(lse_and_more.data() + 2);
  std::memcpy(cu_inside, cu_q.data(), cu_q.size() * sizeof(int32_t));
  fa_run_args args = d.host_args();
  args.cu_seqlens_q = cu_inside;
  CHECK(fa_forward_ex(cpu.ctx, &d.config, d.q.data(), d.k.data(), d.v.data(), d.o.data(),
                      lse_and_more.data(), &args, nullptr) == FA_STATUS_INVALID_ARGUMENT);
  CHECK(std::string(fa_last_error_detail()).find("overlaps cu_seqlens_q") != std::string::npos);
  CHECK(std::memcmp(cu_inside, cu_q.data(), cu_q.size() * sizeof(int32_t)) == 0);
  args = d.host_args();
  args.sinks = reinterpret_cast<float const*>(d.o.data()) + 3;
  CHECK(fa_forward_ex(cpu.ctx, &d.config, d.q.data(), d.k.data(), d.v.data(), d.o.data(),
                      nullptr, &args, nullptr) == FA_STATUS_INVALID_ARGUMENT);
  CHECK(std::string(fa_last_error_detail()).find("overlaps sinks") != std::string::npos);
  // The same run with separate buffers succeeds.
  run_and_check(cpu, d);
}

TEST_CASE("pointers are aligned to their elements on every backend") {
  Cpu cpu;
  FeatureCase c;
  c.dtype = FA_DTYPE_BF16;
  c.sinks = true;
  FeatureData d = fa_test::make_feature_data(c, 32);
  std::vector<unsigned char> q_shifted(d.q.size() + 1);
  std::memcpy(q_shifted.data() + 1, d.q.data(), d.q.size());
  fa_run_args args = d.host_args();
  CHECK(fa_forward_ex(cpu.ctx, &d.config, q_shifted.data() + 1, d.k.data(), d.v.data(),
                      d.o.data(), nullptr, &args, nullptr) == FA_STATUS_INVALID_ARGUMENT);
  CHECK(std::string(fa_last_error_detail()).find("q = ") != std::string::npos);
  std::vector<float> lse(d.lse.size() + 1);
  CHECK(fa_forward_ex(cpu.ctx, &d.config, d.q.data(), d.k.data(), d.v.data(), d.o.data(),
                      reinterpret_cast<float*>(reinterpret_cast<unsigned char*>(lse.data()) + 2),
                      &args, nullptr) == FA_STATUS_INVALID_ARGUMENT);
  CHECK(std::string(fa_last_error_detail()).find("lse") != std::string::npos);
  std::vector<float> sinks(d.sinks.size() + 1);
  std::memcpy(reinterpret_cast<unsigned char*>(sinks.data()) + 1, d.sinks.data(),
              d.sinks.size() * sizeof(float));
  args.sinks = reinterpret_cast<float const*>(reinterpret_cast<unsigned char*>(sinks.data()) + 1);
  CHECK(fa_forward_ex(cpu.ctx, &d.config, d.q.data(), d.k.data(), d.v.data(), d.o.data(),
                      nullptr, &args, nullptr) == FA_STATUS_INVALID_ARGUMENT);
  CHECK(std::string(fa_last_error_detail()).find("sinks") != std::string::npos);
}

TEST_CASE("a larger fa_run_args is taken only when its unknown bytes are 0") {
  Cpu cpu;
  FeatureCase c;
  c.sinks = true;
  FeatureData d = fa_test::make_feature_data(c, 33);
  struct Larger {
    fa_run_args args;
    uint64_t newer_field;
  } larger{};
  larger.args = d.host_args();
  larger.args.struct_size = sizeof larger;
  larger.newer_field = 1;
  CHECK(fa_forward_ex(cpu.ctx, &d.config, d.q.data(), d.k.data(), d.v.data(), d.o.data(),
                      nullptr, &larger.args, nullptr) == FA_STATUS_BAD_STRUCT_SIZE);
  CHECK(std::string(fa_last_error_detail()).find("fa_run_args") != std::string::npos);
  larger.newer_field = 0;
  CHECK(fa_forward_ex(cpu.ctx, &d.config, d.q.data(), d.k.data(), d.v.data(), d.o.data(),
                      nullptr, &larger.args, nullptr) == FA_STATUS_SUCCESS);
}

TEST_CASE("varlen length bounds beyond the rows there are run as the rows there") {
  Cpu cpu;
  FeatureCase c;
  c.dtype = FA_DTYPE_FP32;
  c.layout = FA_LAYOUT_VARLEN;
  c.sq = {1};
  c.sk = {3};
  FeatureData d = fa_test::make_feature_data(c, 34);
  // max_seqlen_q/k of 2^63 - 1 for one query row: 2^57 CPU work units before the clamp.
  d.config.seqlen_q = std::numeric_limits<int64_t>::max();
  d.config.seqlen_k = std::numeric_limits<int64_t>::max();
  run_and_check(cpu, d);
}

TEST_CASE("a NaN score makes its row NaN wherever it falls; the other rows stay finite") {
  // std::max drops a NaN: in a key tile before the row's first finite score (every score of the
  // tile NaN, or the row's only key) the row read as empty (o = 0, lse = -inf, or the sink),
  // and in the test reference likewise, whose comparison also dropped |got - NaN|.
  Cpu cpu;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  FeatureCase c;
  c.dtype = FA_DTYPE_FP32;
  c.heads_q = c.heads_kv = 1;
  c.head_dim = 8;
  for (bool sinks : {false, true}) {
    CAPTURE(sinks);
    c.sinks = sinks;
    // Keys 0-63 (the CPU's first key tile) NaN, key 64 finite: every row NaN.
    c.sq = {3};
    c.sk = {65};
    c.causal = false;
    FeatureData d = fa_test::make_feature_data(c, 41);
    for (int64_t j = 0; j < 64; ++j) fa_test::store_elem(c.dtype, d.k.data(), d.k_index(0, j, 0), nan);
    run_and_check(cpu, d);
    for (int64_t i = 0; i < 3; ++i) {
      CHECK(std::isnan(d.lse[static_cast<size_t>(d.lse_index(0, 0, i))]));
      CHECK(std::isnan(fa_test::load_elem(c.dtype, d.o.data(), d.o_index(0, i, 0))));
    }
    // Causal 3 x 3 with key 1 NaN: row 0 sees key 0 only and stays finite; rows 1 and 2 NaN.
    c.sq = {3};
    c.sk = {3};
    c.causal = true;
    d = fa_test::make_feature_data(c, 42);
    fa_test::store_elem(c.dtype, d.k.data(), d.k_index(0, 1, 0), nan);
    run_and_check(cpu, d);
    CHECK(std::isfinite(d.lse[static_cast<size_t>(d.lse_index(0, 0, 0))]));
    for (int64_t i = 1; i < 3; ++i) {
      CHECK(std::isnan(d.lse[static_cast<size_t>(d.lse_index(0, 0, i))]));
      CHECK(std::isnan(fa_test::load_elem(c.dtype, d.o.data(), d.o_index(0, i, 0))));
    }
    // A NaN query row: that row alone.
    d = fa_test::make_feature_data(c, 43);
    fa_test::store_elem(c.dtype, d.q.data(), d.q_index(0, 2, 0), nan);
    run_and_check(cpu, d);
    CHECK(std::isnan(d.lse[static_cast<size_t>(d.lse_index(0, 0, 2))]));
    CHECK(std::isfinite(d.lse[static_cast<size_t>(d.lse_index(0, 0, 1))]));
  }
}

TEST_CASE("a row that sees no key gets O = 0 beside a sink, whatever v_descale is") {
  // 0 (no visible key) times an infinite v_descale was NaN on the CPU and in the reference.
  Cpu cpu;
  FeatureCase c;
  c.dtype = FA_DTYPE_BF16;
  c.kv_dtype = FA_DTYPE_E4M3;
  c.descale = FA_DESCALE_PER_TENSOR;
  c.sq = {4};
  c.sk = {2};
  c.causal = true;  // rows 0 and 1 see no key
  c.sinks = true;
  FeatureData d = fa_test::make_feature_data(c, 44);
  d.v_descale.assign(d.v_descale.size(), std::numeric_limits<float>::infinity());
  const fa_run_args args = d.host_args();
  REQUIRE(fa_forward_ex(cpu.ctx, &d.config, d.q.data(), d.k.data(), d.v.data(), d.o.data(),
                        d.lse.data(), &args, nullptr) == FA_STATUS_SUCCESS);
  // The rows with keys hold v times inf (infinities, or NaN where terms of both signs meet):
  // only the empty rows are defined, on the backend and in the test reference alike.
  const fa_test::FeatureReference r = fa_test::feature_reference(d);
  for (int64_t h = 0; h < c.heads_q; ++h) {
    for (int64_t i = 0; i < 2; ++i) {
      const auto li = static_cast<size_t>(d.lse_index(0, h, i));
      CHECK(d.lse[li] == doctest::Approx(d.sinks[static_cast<size_t>(h)]));
      CHECK(r.lse[li] == doctest::Approx(d.sinks[static_cast<size_t>(h)]));
      for (int64_t x = 0; x < c.dim_v(); ++x) {
        CHECK(fa_test::load_elem(c.dtype, d.o.data(), d.o_index(0, i, h) + x) == 0.0);
        CHECK(r.o[static_cast<size_t>(d.o_index(0, i, h) + x)] == 0.0);
      }
    }
  }
}

TEST_CASE("a sink of -inf adds nothing, also to a row that sees no key") {
  Cpu cpu;
  FeatureCase c;
  c.dtype = FA_DTYPE_FP32;
  c.sq = {6};
  c.sk = {3};
  c.causal = true;  // rows 0 to 2 see no key
  c.sinks = true;
  FeatureData d = fa_test::make_feature_data(c, 35);
  std::fill(d.sinks.begin(), d.sinks.end(), -std::numeric_limits<float>::infinity());
  run_and_check(cpu, d);
  for (int64_t h = 0; h < c.heads_q; ++h) {
    CHECK(d.lse[static_cast<size_t>(d.lse_index(0, h, 0))] ==
          -std::numeric_limits<float>::infinity());
    CHECK(fa_test::load_elem(c.dtype, d.o.data(), d.q_index(0, 0, h)) == 0.0);
  }
}

TEST_CASE("merge_states of two disjoint key sets equals attention over their union") {
  Cpu cpu;
  for (int dtype : {FA_DTYPE_BF16, FA_DTYPE_FP32}) {
    FeatureCase c;
    c.dtype = dtype;
    c.sq = {13, 13};
    c.sk = {70, 70};
    FeatureData whole = fa_test::make_feature_data(c, 21);
    const fa_test::FeatureReference ref = fa_test::feature_reference(whole);
    // Keys [0, 30) and [30, 70) as two dense problems over views of the same K/V.
    const int64_t split = 30;
    const size_t row_bytes = static_cast<size_t>(c.heads_kv * c.head_dim) * fa_test::dtype_bytes(dtype);
    std::vector<std::vector<unsigned char>> o(2, whole.o);
    std::vector<std::vector<float>> lse(2, whole.lse);
    for (int part = 0; part < 2; ++part) {
      fa_config f = whole.config;
      f.seqlen_k = part == 0 ? split : 70 - split;
      f.k_batch_stride = f.v_batch_stride = 70 * c.heads_kv * c.head_dim;
      f.k_seq_stride = f.v_seq_stride = c.heads_kv * c.head_dim;
      f.k_head_stride = f.v_head_stride = c.head_dim;
      const size_t skip = part == 0 ? 0 : static_cast<size_t>(split) * row_bytes;
      REQUIRE(fa_forward(cpu.ctx, &f, whole.q.data(), whole.k.data() + skip, whole.v.data() + skip,
                         o[static_cast<size_t>(part)].data(), lse[static_cast<size_t>(part)].data(),
                         nullptr) == FA_STATUS_SUCCESS);
    }
    fa_merge_config m;
    REQUIRE(fa_merge_config_init(&m) == FA_STATUS_SUCCESS);
    m.dtype = dtype;
    m.batch = 2;
    m.seqlen = 13;
    m.heads = c.heads_q;
    m.head_dim = c.head_dim;
    // In place into the first part's buffers.
    REQUIRE(fa_merge_states(cpu.ctx, &m, o[0].data(), lse[0].data(), o[1].data(), lse[1].data(),
                            o[0].data(), lse[0].data(), nullptr) == FA_STATUS_SUCCESS);
    const fa_test::FeatureErrors e = fa_test::compare_features(whole, o[0].data(), lse[0].data(), ref);
    INFO("dtype " << dtype << ": o max err " << e.o_max << ", lse max err " << e.lse_max);
    CHECK(e.bad == 0);
    // Two roundings of O to the dtype (each part, then the merge).
    CHECK(e.o_max <= 2 * o_bound(dtype));
    CHECK(e.lse_max <= kLseBound);
    // A partial overlap of an output with an input is refused.
    CHECK(fa_merge_states(cpu.ctx, &m, o[0].data(), lse[0].data(), o[1].data(), lse[1].data(),
                          o[0].data() + 2, lse[0].data(), nullptr) == FA_STATUS_INVALID_ARGUMENT);
  }
}

// One row of two float32 columns per side.
fa_merge_config one_row_merge() {
  fa_merge_config m;
  REQUIRE(fa_merge_config_init(&m) == FA_STATUS_SUCCESS);
  m.dtype = FA_DTYPE_FP32;
  m.head_dim = 2;
  return m;
}

TEST_CASE("merge_states: empty sides") {
  Cpu cpu;
  fa_merge_config m = one_row_merge();
  const float inf = std::numeric_limits<float>::infinity();
  float oa[2] = {1.0f, 2.0f}, ob[2] = {3.0f, 4.0f}, o[2] = {};
  float la = -inf, lb = 0.5f, l = 0.0f;
  REQUIRE(fa_merge_states(cpu.ctx, &m, oa, &la, ob, &lb, o, &l, nullptr) == FA_STATUS_SUCCESS);
  CHECK(o[0] == 3.0f);
  CHECK(o[1] == 4.0f);
  CHECK(l == 0.5f);
  // An empty side's o may hold anything (a shard with no key may leave it unwritten).
  oa[0] = std::numeric_limits<float>::quiet_NaN();
  oa[1] = inf;
  REQUIRE(fa_merge_states(cpu.ctx, &m, oa, &la, ob, &lb, o, &l, nullptr) == FA_STATUS_SUCCESS);
  CHECK(o[0] == 3.0f);
  CHECK(o[1] == 4.0f);
  lb = -inf;
  REQUIRE(fa_merge_states(cpu.ctx, &m, oa, &la, ob, &lb, o, &l, nullptr) == FA_STATUS_SUCCESS);
  CHECK(o[0] == 0.0f);
  CHECK(l == -inf);
  m.heads = 0;
  CHECK(fa_merge_states(cpu.ctx, &m, oa, &la, ob, &lb, o, &l, nullptr) == FA_STATUS_INVALID_ARGUMENT);
  CHECK(std::string(fa_last_error_detail()).find("heads") != std::string::npos);
}

TEST_CASE("merge_states: an LSE of NaN or +inf on either side makes the row NaN, beside any other") {
  Cpu cpu;
  fa_merge_config const m = one_row_merge();
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (float bad : {nan, inf}) {
    for (float other : {-inf, 0.5f, inf, nan}) {
      for (bool bad_first : {true, false}) {
        float oa[2] = {1.0f, 2.0f}, ob[2] = {3.0f, 4.0f}, o[2] = {7.0f, 7.0f};
        float la = bad_first ? bad : other, lb = bad_first ? other : bad, l = 7.0f;
        CAPTURE(bad);
        CAPTURE(other);
        CAPTURE(bad_first);
        REQUIRE(fa_merge_states(cpu.ctx, &m, oa, &la, ob, &lb, o, &l, nullptr) ==
                FA_STATUS_SUCCESS);
        CHECK(std::isnan(o[0]));
        CHECK(std::isnan(o[1]));
        CHECK(std::isnan(l));
      }
    }
  }
}

}  // TEST_SUITE
