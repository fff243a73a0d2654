// FP8 (issue 19, host side) on the CPU backend: e4m3 queries, keys and values, and 16-bit queries
// against an e4m3 cache, with per-tensor and per-(batch, K/V head) descales, against a float64
// reference on the dequantised inputs (features.hpp); the validation of the new fields and run
// arguments; and callers whose structs end before them.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/features.hpp"
#include "flashattn.h"

namespace {

using fa_test::FeatureCase;
using fa_test::FeatureData;

struct Cpu {
  Cpu() { REQUIRE(fa_context_create(FA_DEVICE_CPU, &ctx) == FA_STATUS_SUCCESS); }
  ~Cpu() { fa_context_destroy(ctx); }
  Cpu(const Cpu&) = delete;
  Cpu& operator=(const Cpu&) = delete;
  fa_context_t* ctx = nullptr;
};

// The backend computes in fp32 on exactly decoded inputs and rounds O once to its type: the
// error is O's half ulp (2^-9 for bf16 below 1, 2^-12 for fp16) scaled by v_descale (up to 4),
// plus fp32 rounding. A dropped descale (factors in [0.25, 4]) or a misread e4m3 value moves O
// by far more.
double o_bound(const FeatureData& d) {
  double v_max = 1.0;
  for (float x : d.v_descale) v_max = std::max(v_max, static_cast<double>(x));
  return (d.c.o_type() == FA_DTYPE_BF16 ? 4e-3 : 6e-4) * v_max;
}
// Scores reach |softmax_scale * 16 * d| at most; fp32 keeps their LSE within this.
constexpr double kLseBound = 5e-4;

void run_and_check(const Cpu& cpu, FeatureData& d) {
  const fa_run_args args = d.host_args();
  const fa_status s = fa_forward_ex(cpu.ctx, &d.config, d.q.data(), d.k.data(), d.v.data(),
                                    d.o.data(), d.lse.data(), &args, nullptr);
  INFO(fa_test::describe(d.c) << ": " << fa_last_error_detail());
  REQUIRE(s == FA_STATUS_SUCCESS);
  const fa_test::FeatureErrors e =
      fa_test::compare_features(d, d.o.data(), d.lse.data(), fa_test::feature_reference(d));
  INFO("o max err " << e.o_max << ", lse max err " << e.lse_max << ", bad " << e.bad);
  CHECK(e.bad == 0);
  CHECK(e.written_past == 0);
  CHECK(e.o_max <= o_bound(d));
  CHECK(e.lse_max <= kLseBound);
}

// The type pairs fa_config allows with FP8: (dtype, kv_dtype, out_dtype).
struct Types {
  int dtype, kv_dtype, out_dtype;
};
constexpr Types kTypes[] = {
    {FA_DTYPE_E4M3, 0, 0},                           // all e4m3, o bf16 by default
    {FA_DTYPE_E4M3, FA_DTYPE_E4M3, FA_DTYPE_FP16},   // o fp16
    {FA_DTYPE_BF16, FA_DTYPE_E4M3, 0},               // bf16 queries, e4m3 cache
    {FA_DTYPE_FP16, FA_DTYPE_E4M3, 0},               // fp16 queries, e4m3 cache
};

std::string detail() { return fa_last_error_detail(); }

}  // namespace

TEST_SUITE("cpu") {

TEST_CASE("fp8: e4m3 decoding in the test reference follows e4m3fn") {
  // The yardstick's own decoder, pinned on values from the format's definition, so a wrong
  // decoder cannot agree with a wrong library.
  CHECK(fa_test::e4m3_bits_to_double(0x00) == 0.0);
  CHECK(fa_test::e4m3_bits_to_double(0x01) == 0.001953125);  // 2^-9, smallest subnormal
  CHECK(fa_test::e4m3_bits_to_double(0x08) == 0.015625);     // 2^-6, smallest normal
  CHECK(fa_test::e4m3_bits_to_double(0x38) == 1.0);
  CHECK(fa_test::e4m3_bits_to_double(0x7E) == 448.0);  // exponent 15 is finite
  CHECK(fa_test::e4m3_bits_to_double(0xFE) == -448.0);
  CHECK(std::isnan(fa_test::e4m3_bits_to_double(0x7F)));
  CHECK(std::isnan(fa_test::e4m3_bits_to_double(0xFF)));
  CHECK(fa_test::double_to_e4m3_bits(1.0625) == 0x38);  // a tie rounds to even
}

TEST_CASE("fp8: every e4m3 byte reaches the output exactly as e4m3fn defines it") {
  // One key and one value row per head: O = v_descale * V exactly (the softmax over one key
  // is 1), so O shows the backend's decode of each of the 256 values, through an fp32 output
  // path that rounds nothing (bf16 holds every e4m3 value times a power of two).
  Cpu cpu;
  FeatureCase c;
  c.dtype = FA_DTYPE_E4M3;
  c.heads_q = c.heads_kv = 1;
  c.head_dim = 256;
  c.sq = {1};
  c.sk = {1};
  c.descale = FA_DESCALE_PER_TENSOR;
  FeatureData d = fa_test::make_feature_data(c, 3);
  for (size_t i = 0; i < 256; ++i) d.v[i] = static_cast<unsigned char>(i);
  d.v_descale = {2.0f};
  const fa_run_args args = d.host_args();
  REQUIRE(fa_forward_ex(cpu.ctx, &d.config, d.q.data(), d.k.data(), d.v.data(), d.o.data(),
                        d.lse.data(), &args, nullptr) == FA_STATUS_SUCCESS);
  for (int64_t x = 0; x < 256; ++x) {
    const double want = 2.0 * fa_test::e4m3_bits_to_double(static_cast<uint8_t>(x));
    const double got = fa_test::load_elem(FA_DTYPE_BF16, d.o.data(), x);
    INFO("byte " << x);
    if (std::isnan(want)) {
      CHECK(std::isnan(got));
    } else {
      CHECK(got == want);
    }
  }
}

TEST_CASE("fp8: e4m3 inputs and e4m3 caches match the float64 reference on every layout") {
  Cpu cpu;
  uint64_t seed = 4000;
  int checked = 0;
  for (const Types& t : kTypes) {
    for (int descale : {-1, int{FA_DESCALE_PER_TENSOR}, int{FA_DESCALE_PER_HEAD_KV}}) {
      std::vector<FeatureCase> cases;
      FeatureCase base;
      base.dtype = t.dtype;
      base.kv_dtype = t.kv_dtype;
      base.out_dtype = t.out_dtype;
      base.descale = descale;
      {
        FeatureCase c = base;  // dense, causal, GQA, awkward lengths
        c.sq = {177, 177};
        c.sk = {177, 177};
        c.causal = true;
        cases.push_back(c);
        c.sq = {1, 1};
        c.sk = {17, 17};
        cases.push_back(c);
      }
      {
        FeatureCase c = base;  // varlen with lengths 1, 17, 177 and an empty sequence
        c.layout = FA_LAYOUT_VARLEN;
        c.sq = {1, 17, 0, 177};
        c.sk = {17, 177, 3, 177};
        c.causal = true;
        cases.push_back(c);
      }
      for (int64_t page : {1, 16}) {
        FeatureCase c = base;  // paged caches, decode and a short prefill
        c.layout = FA_LAYOUT_PAGED_KV;
        c.page_size = page;
        c.sq = {1, 1, 1};
        c.sk = {1, 17, 177};
        cases.push_back(c);
        c.sq = {17, 17};
        c.sk = {177, 17};
        c.causal = true;
        cases.push_back(c);
      }
      {
        FeatureCase c = base;  // contiguous cache with the score transforms and sinks
        c.layout = FA_LAYOUT_KV_CACHE;
        c.heads_q = 8;
        c.sq = {17, 17};
        c.sk = {40, 1};
        c.window = true;
        c.left = 9;
        c.right = 2;
        c.softcap = 5.0f;
        c.alibi = FA_ALIBI_PER_BATCH;
        c.sinks = true;
        c.head_dim_v = 24;
        cases.push_back(c);
      }
      for (const FeatureCase& c : cases) {
        FeatureData d = fa_test::make_feature_data(c, ++seed);
        run_and_check(cpu, d);
        ++checked;
      }
    }
  }
  MESSAGE(checked << " FP8 cases checked");
}

TEST_CASE("fp8: per-(batch, K/V head) descales are read per sequence and K/V head") {
  // Every factor distinct; swapping two of them must change the result (the test can fail).
  Cpu cpu;
  FeatureCase c;
  c.dtype = FA_DTYPE_E4M3;
  c.heads_q = 4;
  c.heads_kv = 2;
  c.sq = {5, 5};
  c.sk = {9, 9};
  c.descale = FA_DESCALE_PER_HEAD_KV;
  FeatureData d = fa_test::make_feature_data(c, 71);
  d.q_descale = {0.5f, 1.0f, 2.0f, 3.0f};
  d.k_descale = {1.5f, 0.25f, 1.0f, 2.5f};
  d.v_descale = {1.0f, 2.0f, 3.0f, 4.0f};
  run_and_check(cpu, d);
  std::vector<unsigned char> const first = d.o;
  std::swap(d.v_descale[1], d.v_descale[2]);
  run_and_check(cpu, d);
  CHECK(d.o != first);
}

TEST_CASE("fp8: fa_config type combinations outside the allowed ones are refused by name") {
  fa_config base;
  REQUIRE(fa_config_init(&base) == FA_STATUS_SUCCESS);
  struct Bad {
    int dtype, kv_dtype, out_dtype, descale, reserved1;
    const char* names;  // substrings the message must hold, '|' separated
  };
  const Bad bad[] = {
      {5, 0, 0, 0, 0, "dtype = 5"},
      {FA_DTYPE_E4M3, FA_DTYPE_BF16, 0, 0, 0, "kv_dtype = 2|dtype = 4"},
      {FA_DTYPE_E4M3, FA_DTYPE_FP16, 0, 0, 0, "kv_dtype = 1|dtype = 4"},
      {FA_DTYPE_E4M3, FA_DTYPE_FP32, 0, 0, 0, "kv_dtype = 3|dtype = 4"},
      {FA_DTYPE_FP32, FA_DTYPE_E4M3, 0, 0, 0, "kv_dtype = 4|dtype = 3"},
      {FA_DTYPE_BF16, FA_DTYPE_FP16, 0, 0, 0, "kv_dtype = 1|dtype = 2"},
      {FA_DTYPE_FP16, FA_DTYPE_FP32, 0, 0, 0, "kv_dtype = 3|dtype = 1"},
      {FA_DTYPE_BF16, 5, 0, 0, 0, "kv_dtype = 5"},
      {FA_DTYPE_BF16, -1, 0, 0, 0, "kv_dtype = -1"},
      {FA_DTYPE_E4M3, 0, FA_DTYPE_E4M3, 0, 0, "out_dtype = 4"},
      {FA_DTYPE_E4M3, 0, FA_DTYPE_FP32, 0, 0, "out_dtype = 3"},
      {FA_DTYPE_E4M3, 0, 7, 0, 0, "out_dtype = 7"},
      {FA_DTYPE_BF16, 0, FA_DTYPE_BF16, 0, 0, "out_dtype = 2"},
      {FA_DTYPE_BF16, FA_DTYPE_E4M3, FA_DTYPE_FP16, 0, 0, "out_dtype = 1"},
      {FA_DTYPE_E4M3, 0, 0, 2, 0, "descale = 2"},
      {FA_DTYPE_BF16, 0, 0, FA_DESCALE_PER_HEAD_KV, 0, "descale = 1"},
      {FA_DTYPE_E4M3, 0, 0, 0, 1, "reserved1 = 1"},
  };
  for (const Bad& b : bad) {
    fa_config x = base;
    x.dtype = b.dtype;
    x.kv_dtype = b.kv_dtype;
    x.out_dtype = b.out_dtype;
    x.descale = b.descale;
    x.reserved1 = b.reserved1;
    INFO(b.names);
    CHECK(fa_config_validate(&x) == FA_STATUS_INVALID_ARGUMENT);
    const std::string msg = detail();
    INFO(msg);
    std::string names = b.names;
    for (size_t at = 0; at <= names.size();) {
      const size_t bar = std::min(names.find('|', at), names.size());
      CHECK(msg.find(names.substr(at, bar - at)) != std::string::npos);
      at = bar + 1;
    }
  }
  // And what is allowed.
  for (const Types& t : kTypes) {
    fa_config x = base;
    x.dtype = t.dtype;
    x.kv_dtype = t.kv_dtype;
    x.out_dtype = t.out_dtype;
    x.descale = FA_DESCALE_PER_HEAD_KV;
    CHECK(fa_config_validate(&x) == FA_STATUS_SUCCESS);
  }
}

TEST_CASE("fp8: extents count e4m3 elements; alignment and overlap use each tensor's bytes") {
  Cpu cpu;
  FeatureCase c;
  c.dtype = FA_DTYPE_BF16;
  c.kv_dtype = FA_DTYPE_E4M3;
  c.sq = {16};
  c.sk = {16};
  c.descale = FA_DESCALE_PER_TENSOR;
  FeatureData d = fa_test::make_feature_data(c, 12);
  int64_t q = 0, k = 0, v = 0, o = 0;
  REQUIRE(fa_config_extents(&d.config, &q, &k, &v, &o, nullptr) == FA_STATUS_SUCCESS);
  CHECK(k == 16 * c.heads_kv * c.head_dim);
  CHECK(d.k.size() == static_cast<size_t>(k));  // one byte each
  CHECK(d.o.size() == static_cast<size_t>(o) * 2);
  // An e4m3 cache at an odd address is aligned to its 1-byte elements.
  std::vector<unsigned char> k_odd(d.k.size() + 1);
  std::memcpy(k_odd.data() + 1, d.k.data(), d.k.size());
  fa_run_args args = d.host_args();
  CHECK(fa_forward_ex(cpu.ctx, &d.config, d.q.data(), k_odd.data() + 1, d.v.data(), d.o.data(),
                      nullptr, &args, nullptr) == FA_STATUS_SUCCESS);
  // A bf16 o at an odd address is not.
  std::vector<unsigned char> o_odd(d.o.size() + 1);
  CHECK(fa_forward_ex(cpu.ctx, &d.config, d.q.data(), d.k.data(), d.v.data(), o_odd.data() + 1,
                      nullptr, &args, nullptr) == FA_STATUS_INVALID_ARGUMENT);
  CHECK(detail().find("o = ") != std::string::npos);
  // o ending one byte into an e4m3 v: o's range is o * 2 bytes, v's v bytes.
  std::vector<unsigned char> both(d.o.size() + d.v.size());
  std::memcpy(both.data() + d.o.size() - 2, d.v.data(), d.v.size() - 2);
  CHECK(fa_forward_ex(cpu.ctx, &d.config, d.q.data(), d.k.data(), both.data() + d.o.size() - 2,
                      both.data(), nullptr, &args, nullptr) == FA_STATUS_INVALID_ARGUMENT);
  CHECK(detail().find("overlaps v") != std::string::npos);
  // Descales are run-time arrays: 4-byte aligned, never under o.
  std::vector<float> factors(2, 1.0f);
  args.k_descale = reinterpret_cast<const float*>(reinterpret_cast<const unsigned char*>(factors.data()) + 2);
  CHECK(fa_forward_ex(cpu.ctx, &d.config, d.q.data(), d.k.data(), d.v.data(), d.o.data(),
                      nullptr, &args, nullptr) == FA_STATUS_INVALID_ARGUMENT);
  CHECK(detail().find("k_descale") != std::string::npos);
  args = d.host_args();
  args.v_descale = reinterpret_cast<const float*>(d.o.data()) + 1;
  CHECK(fa_forward_ex(cpu.ctx, &d.config, d.q.data(), d.k.data(), d.v.data(), d.o.data(),
                      nullptr, &args, nullptr) == FA_STATUS_INVALID_ARGUMENT);
  CHECK(detail().find("overlaps v_descale") != std::string::npos);
}

TEST_CASE("fp8: a descale for a tensor that is not e4m3 is refused by name") {
  Cpu cpu;
  const float one = 1.0f;
  struct Case {
    int dtype, kv_dtype;
    const float* fa_run_args::*field;
    const char* name;
  };
  const Case cases[] = {
      {FA_DTYPE_BF16, 0, &fa_run_args::q_descale, "q_descale"},
      {FA_DTYPE_BF16, 0, &fa_run_args::k_descale, "k_descale"},
      {FA_DTYPE_FP32, 0, &fa_run_args::v_descale, "v_descale"},
      {FA_DTYPE_FP16, FA_DTYPE_E4M3, &fa_run_args::q_descale, "q_descale"},
  };
  for (const Case& k : cases) {
    FeatureCase c;
    c.dtype = k.dtype;
    c.kv_dtype = k.kv_dtype;
    FeatureData d = fa_test::make_feature_data(c, 5);
    const std::vector<unsigned char> o_before = d.o;
    fa_run_args args = d.host_args();
    args.*k.field = &one;
    INFO(k.name);
    CHECK(fa_forward_ex(cpu.ctx, &d.config, d.q.data(), d.k.data(), d.v.data(), d.o.data(),
                        nullptr, &args, nullptr) == FA_STATUS_INVALID_ARGUMENT);
    CHECK(detail().find(k.name) != std::string::npos);
    CHECK(d.o == o_before);
  }
}

TEST_CASE("fp8: merged outputs are never e4m3") {
  fa_merge_config m;
  REQUIRE(fa_merge_config_init(&m) == FA_STATUS_SUCCESS);
  m.dtype = FA_DTYPE_E4M3;
  Cpu cpu;
  std::vector<uint16_t> o(1);
  std::vector<float> lse(1);
  CHECK(fa_merge_states(cpu.ctx, &m, o.data(), lse.data(), o.data(), lse.data(), o.data(),
                        lse.data(), nullptr) == FA_STATUS_INVALID_ARGUMENT);
  CHECK(detail().find("dtype = 4") != std::string::npos);
}

TEST_CASE("fp8: callers whose structs end before the FP8 fields keep their behaviour") {
  Cpu cpu;
  FeatureCase c;
  c.layout = FA_LAYOUT_PAGED_KV;  // fields of 0.3 in use, so only the tail is cut
  c.page_size = 4;
  c.sq = {9, 9};
  c.sk = {30, 12};
  c.causal = true;
  c.head_dim_v = 32;
  FeatureData d = fa_test::make_feature_data(c, 23);
  // The bytes past the caller's fa_config hold what its stack would: an e4m3 cache type and a
  // descale granularity, which must not be read.
  fa_config padded = d.config;
  padded.kv_dtype = FA_DTYPE_E4M3;
  padded.descale = 7;
  padded.struct_size = offsetof(fa_config, kv_dtype);
  // A fa_run_args from a header before the descales: the bytes past it are not read either.
  fa_run_args old = d.host_args();
  old.struct_size = offsetof(fa_run_args, q_descale);
  const float stray = 1000.0f;
  old.v_descale = &stray;
  REQUIRE(fa_forward_ex(cpu.ctx, &padded, d.q.data(), d.k.data(), d.v.data(), d.o.data(),
                        d.lse.data(), &old, nullptr) == FA_STATUS_SUCCESS);
  const fa_test::FeatureErrors e =
      fa_test::compare_features(d, d.o.data(), d.lse.data(), fa_test::feature_reference(d));
  CHECK(e.bad == 0);
  CHECK(e.written_past == 0);
  CHECK(e.o_max <= 4e-3);
  CHECK(e.lse_max <= kLseBound);
  // Shorter than any version of fa_run_args: refused.
  old.struct_size = offsetof(fa_run_args, q_descale) - 8;
  CHECK(fa_forward_ex(cpu.ctx, &padded, d.q.data(), d.k.data(), d.v.data(), d.o.data(),
                      d.lse.data(), &old, nullptr) == FA_STATUS_BAD_STRUCT_SIZE);
  CHECK(detail().find("fa_run_args.struct_size") != std::string::npos);
  // The full struct reads the fields: descale = 7 is refused by name.
  padded.struct_size = sizeof padded;
  CHECK(fa_config_validate(&padded) == FA_STATUS_INVALID_ARGUMENT);
  CHECK(detail().find("descale = 7") != std::string::npos);
}

}  // TEST_SUITE
