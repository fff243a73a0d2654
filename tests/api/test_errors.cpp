// Every documented error path: the status, a detail message naming the bad value, and outputs left
// untouched.
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "flashattn.h"

namespace {

constexpr uint32_t kSentinel = 0xA5A5A5A5u;

// A small fp32 CPU problem with its buffers; o and lse start as a sentinel pattern.
struct Fixture {
  fa_context_t* ctx = nullptr;
  fa_config cfg;
  std::vector<float> q, k, v, o;
  std::vector<float> lse;

  Fixture() {
    REQUIRE(fa_context_create(FA_DEVICE_CPU, &ctx) == FA_STATUS_SUCCESS);
    REQUIRE(fa_config_init(&cfg) == FA_STATUS_SUCCESS);
    cfg.dtype = FA_DTYPE_FP32;
    cfg.batch = 2;
    cfg.seqlen_q = 5;
    cfg.seqlen_k = 7;
    cfg.heads_q = 4;
    cfg.heads_kv = 2;
    cfg.head_dim = 8;
    q.assign(2 * 5 * 4 * 8, 0.25f);
    k.assign(2 * 7 * 2 * 8, -0.5f);
    v.assign(2 * 7 * 2 * 8, 0.75f);
    o.resize(q.size());
    lse.resize(2 * 4 * 5);
    poison();
  }
  ~Fixture() { fa_context_destroy(ctx); }
  void poison() {
    std::memset(o.data(), 0xA5, o.size() * sizeof(float));
    std::memset(lse.data(), 0xA5, lse.size() * sizeof(float));
  }
  bool untouched() const {
    auto all = [](std::vector<float> const& x) {
      for (float f : x) {
        uint32_t bits;
        std::memcpy(&bits, &f, 4);
        if (bits != kSentinel) return false;
      }
      return true;
    };
    return all(o) && all(lse);
  }
  fa_status forward(fa_config const* c) {
    return fa_forward(ctx, c, q.data(), k.data(), v.data(), o.data(), lse.data(), nullptr);
  }
};

// Runs `call`, then checks status, message and untouched outputs.
void expect_error(Fixture& f, fa_status status, char const* mentions,
                  std::function<fa_status()> const& call) {
  f.poison();
  INFO("expected detail mentioning: " << std::string(mentions));
  CHECK(call() == status);
  std::string detail = fa_last_error_detail();
  INFO("detail: " << detail);
  CHECK(detail.find(mentions) != std::string::npos);
  CHECK(f.untouched());
}

}  // namespace

TEST_SUITE("api") {

TEST_CASE("the fixture itself succeeds, writes every output, and clears the detail message") {
  Fixture f;
  fa_config bad = f.cfg;
  bad.batch = 0;
  REQUIRE(f.forward(&bad) != FA_STATUS_SUCCESS);
  REQUIRE(std::strlen(fa_last_error_detail()) > 0);
  REQUIRE(f.forward(&f.cfg) == FA_STATUS_SUCCESS);
  CHECK(std::string(fa_last_error_detail()).empty());
  for (float x : f.o) CHECK(x == doctest::Approx(0.75f));
  for (float x : f.lse) CHECK(std::isfinite(x));
}

TEST_CASE("fa_forward: NULL arguments") {
  Fixture f;
  expect_error(f, FA_STATUS_INVALID_ARGUMENT, "ctx", [&] {
    return fa_forward(nullptr, &f.cfg, f.q.data(), f.k.data(), f.v.data(), f.o.data(),
                      f.lse.data(), nullptr);
  });
  expect_error(f, FA_STATUS_INVALID_ARGUMENT, "config", [&] { return f.forward(nullptr); });
  expect_error(f, FA_STATUS_INVALID_ARGUMENT, "q is NULL", [&] {
    return fa_forward(f.ctx, &f.cfg, nullptr, f.k.data(), f.v.data(), f.o.data(), f.lse.data(),
                      nullptr);
  });
  expect_error(f, FA_STATUS_INVALID_ARGUMENT, "k is NULL", [&] {
    return fa_forward(f.ctx, &f.cfg, f.q.data(), nullptr, f.v.data(), f.o.data(), f.lse.data(),
                      nullptr);
  });
  expect_error(f, FA_STATUS_INVALID_ARGUMENT, "v is NULL", [&] {
    return fa_forward(f.ctx, &f.cfg, f.q.data(), f.k.data(), nullptr, f.o.data(), f.lse.data(),
                      nullptr);
  });
  f.poison();
  CHECK(fa_forward(f.ctx, &f.cfg, f.q.data(), f.k.data(), f.v.data(), nullptr, f.lse.data(),
                   nullptr) == FA_STATUS_INVALID_ARGUMENT);
  CHECK(std::string(fa_last_error_detail()).find("o is NULL") != std::string::npos);
  CHECK(f.untouched());
}

TEST_CASE("fa_forward: sizes must be >= 1") {
  Fixture f;
  struct Field {
    char const* name;
    int64_t fa_config::*member;
  };
  for (Field field : {Field{"batch", &fa_config::batch}, Field{"seqlen_q", &fa_config::seqlen_q},
                      Field{"seqlen_k", &fa_config::seqlen_k}, Field{"heads_q", &fa_config::heads_q},
                      Field{"heads_kv", &fa_config::heads_kv},
                      Field{"head_dim", &fa_config::head_dim}}) {
    for (int64_t value : {int64_t(0), int64_t(-3)}) {
      fa_config c = f.cfg;
      c.*field.member = value;
      std::string mention = std::string(field.name) + " = " + std::to_string(value);
      expect_error(f, FA_STATUS_INVALID_ARGUMENT, mention.c_str(), [&] { return f.forward(&c); });
    }
  }
}

TEST_CASE("fa_forward: heads_q must be a multiple of heads_kv") {
  Fixture f;
  fa_config c = f.cfg;
  c.heads_q = 12;
  c.heads_kv = 5;
  expect_error(f, FA_STATUS_INVALID_ARGUMENT, "heads_q = 12 is not a multiple of heads_kv = 5",
               [&] { return f.forward(&c); });
}

TEST_CASE("fa_forward: enums, flags, scale and reserved fields") {
  Fixture f;
  fa_config c = f.cfg;
  c.dtype = 7;
  expect_error(f, FA_STATUS_INVALID_ARGUMENT, "dtype = 7", [&] { return f.forward(&c); });
  c = f.cfg;
  c.causal = 2;
  expect_error(f, FA_STATUS_INVALID_ARGUMENT, "causal = 2", [&] { return f.forward(&c); });
  c = f.cfg;
  c.softmax_scale = std::numeric_limits<float>::quiet_NaN();
  expect_error(f, FA_STATUS_INVALID_ARGUMENT, "softmax_scale", [&] { return f.forward(&c); });
  c.softmax_scale = std::numeric_limits<float>::infinity();
  expect_error(f, FA_STATUS_INVALID_ARGUMENT, "softmax_scale", [&] { return f.forward(&c); });
  c = f.cfg;
  c.reserved0 = 1;
  expect_error(f, FA_STATUS_INVALID_ARGUMENT, "reserved0", [&] { return f.forward(&c); });
}

TEST_CASE("fa_forward: struct_size") {
  Fixture f;
  fa_config c = f.cfg;
  c.struct_size = 8;
  expect_error(f, FA_STATUS_BAD_STRUCT_SIZE, "struct_size = 8", [&] { return f.forward(&c); });
  c.struct_size = 0;
  expect_error(f, FA_STATUS_BAD_STRUCT_SIZE, "struct_size = 0", [&] { return f.forward(&c); });

  // A newer caller's larger struct is accepted while the fields unknown here are zero.
  struct Newer {
    fa_config base;
    int64_t future_field;
  } newer;
  std::memset(&newer, 0, sizeof newer);
  std::memcpy(&newer.base, &f.cfg, sizeof f.cfg);
  newer.base.struct_size = sizeof newer;
  f.poison();
  CHECK(f.forward(&newer.base) == FA_STATUS_SUCCESS);
  newer.future_field = 1;
  expect_error(f, FA_STATUS_BAD_STRUCT_SIZE, "is not 0", [&] { return f.forward(&newer.base); });
}

TEST_CASE("fa_forward: strides") {
  Fixture f;
  fa_config c = f.cfg;
  c.k_batch_stride = 7 * 2 * 8;
  c.k_seq_stride = -16;
  c.k_head_stride = 8;
  expect_error(f, FA_STATUS_INVALID_ARGUMENT, "k_seq_stride = -16", [&] { return f.forward(&c); });

  // Two query heads writing the same output row.
  c = f.cfg;
  c.o_batch_stride = 5 * 4 * 8;
  c.o_seq_stride = 4 * 8;
  c.o_head_stride = 4;
  expect_error(f, FA_STATUS_INVALID_ARGUMENT, "overlap", [&] { return f.forward(&c); });

  // Offsets past 2^63: 6 seq steps of 2^61.
  c = f.cfg;
  c.v_batch_stride = 16;
  c.v_seq_stride = int64_t(1) << 61;
  c.v_head_stride = 8;
  expect_error(f, FA_STATUS_INVALID_ARGUMENT, "2^60", [&] { return f.forward(&c); });
  // Offsets below 2^63 whose byte offsets or extent (last offset + 1) would not fit: 6 seq steps
  // of 2^60 - 1 (found by review: fa_config_extents returned a negative extent near 2^63).
  c.v_seq_stride = (int64_t(1) << 60) - 1;
  expect_error(f, FA_STATUS_INVALID_ARGUMENT, "2^60", [&] { return f.forward(&c); });
  int64_t ext[5];
  CHECK(fa_config_extents(&c, &ext[0], &ext[1], &ext[2], &ext[3], &ext[4]) ==
        FA_STATUS_INVALID_ARGUMENT);

  // Packed strides that overflow int64 (found by review: they used to wrap silently).
  c = f.cfg;
  c.seqlen_k = int64_t(96076792050570582);  // * 3 heads * 32 > 2^63
  c.heads_kv = 3;
  c.heads_q = 3;
  c.head_dim = 32;
  expect_error(f, FA_STATUS_INVALID_ARGUMENT, "overflows int64", [&] { return f.forward(&c); });

  // Inputs may overlap: a batch stride of 0 broadcasts K across the batch.
  c = f.cfg;
  c.k_batch_stride = 0;
  c.k_seq_stride = 2 * 8;
  c.k_head_stride = 8;
  f.poison();
  CHECK(f.forward(&c) == FA_STATUS_SUCCESS);
}

TEST_CASE("fa_config_validate and fa_config_extents") {
  Fixture f;
  CHECK(fa_config_validate(&f.cfg) == FA_STATUS_SUCCESS);
  int64_t q = 0, k = 0, v = 0, o = 0, lse = 0;
  REQUIRE(fa_config_extents(&f.cfg, &q, &k, &v, &o, &lse) == FA_STATUS_SUCCESS);
  CHECK(q == static_cast<int64_t>(f.q.size()));
  CHECK(k == static_cast<int64_t>(f.k.size()));
  CHECK(v == static_cast<int64_t>(f.v.size()));
  CHECK(o == static_cast<int64_t>(f.o.size()));
  CHECK(lse == static_cast<int64_t>(f.lse.size()));
  // Strided: q rows padded by 8 elements, k as the first half of a [batch, seq, 2 * heads] tensor.
  fa_config c = f.cfg;
  c.q_head_stride = 8;
  c.q_seq_stride = 4 * 8 + 8;
  c.q_batch_stride = 5 * c.q_seq_stride;
  c.k_head_stride = 8;
  c.k_seq_stride = 2 * 2 * 8;
  c.k_batch_stride = 7 * c.k_seq_stride;
  REQUIRE(fa_config_extents(&c, &q, &k, nullptr, nullptr, nullptr) == FA_STATUS_SUCCESS);
  CHECK(q == 1 * c.q_batch_stride + 4 * c.q_seq_stride + 3 * 8 + 8);
  CHECK(k == 1 * c.k_batch_stride + 6 * c.k_seq_stride + 1 * 8 + 8);
  // Both report invalid configs and leave the outputs alone.
  c = f.cfg;
  c.heads_kv = 3;
  q = -1;
  CHECK(fa_config_validate(&c) == FA_STATUS_INVALID_ARGUMENT);
  CHECK(std::string(fa_last_error_detail()).find("heads_kv = 3") != std::string::npos);
  CHECK(fa_config_extents(&c, &q, nullptr, nullptr, nullptr, nullptr) == FA_STATUS_INVALID_ARGUMENT);
  CHECK(q == -1);
  CHECK(fa_config_validate(nullptr) == FA_STATUS_INVALID_ARGUMENT);
}

TEST_CASE("CPU contexts take no stream and pin no GPU kernel") {
  Fixture f;
  int fake_stream_storage = 0;
  auto stream = reinterpret_cast<fa_stream_t>(&fake_stream_storage);
  expect_error(f, FA_STATUS_WRONG_CONTEXT, "stream", [&] {
    return fa_forward(f.ctx, &f.cfg, f.q.data(), f.k.data(), f.v.data(), f.o.data(),
                      f.lse.data(), stream);
  });
  fa_kernel_config kc;
  REQUIRE(fa_kernel_config_init(&kc) == FA_STATUS_SUCCESS);
  REQUIRE(fa_kernel_config_parse("(BF16, 128, 128, 64, 4): async+eager+swizzled+load_2_2_0_tiles",
                                 &kc) == FA_STATUS_SUCCESS);
  fa_plan_t* plan = reinterpret_cast<fa_plan_t*>(&fake_stream_storage);
  CHECK(fa_plan_create_with_kernel(f.ctx, &f.cfg, &kc, &plan) == FA_STATUS_WRONG_CONTEXT);
  CHECK(plan == reinterpret_cast<fa_plan_t*>(&fake_stream_storage));

  CHECK(fa_context_set_kernel(f.ctx, &f.cfg, &kc) == FA_STATUS_WRONG_CONTEXT);
  CHECK(fa_autotune(f.ctx, &f.cfg, f.q.data(), f.k.data(), f.v.data(), f.o.data(), f.lse.data(),
                    nullptr, nullptr, nullptr) == FA_STATUS_WRONG_CONTEXT);
  CHECK(fa_context_save_tuning(f.ctx, "tuning.txt") == FA_STATUS_WRONG_CONTEXT);
  CHECK(fa_context_load_tuning(f.ctx, "tuning.txt") == FA_STATUS_WRONG_CONTEXT);
  CHECK(fa_context_save_tuning(nullptr, "tuning.txt") == FA_STATUS_INVALID_ARGUMENT);
  CHECK(fa_context_load_tuning(nullptr, "tuning.txt") == FA_STATUS_INVALID_ARGUMENT);
  CHECK(fa_autotune(nullptr, &f.cfg, f.q.data(), f.k.data(), f.v.data(), f.o.data(), nullptr,
                    nullptr, nullptr, nullptr) == FA_STATUS_INVALID_ARGUMENT);
  size_t tuned = 99;
  CHECK(fa_context_tuned_count(f.ctx, &tuned) == FA_STATUS_SUCCESS);
  CHECK(tuned == 0);
  CHECK(fa_context_tuned_count(f.ctx, nullptr) == FA_STATUS_INVALID_ARGUMENT);

  REQUIRE(fa_plan_create(f.ctx, &f.cfg, &plan) == FA_STATUS_SUCCESS);
  CHECK(fa_plan_kernel(plan, &kc) == FA_STATUS_WRONG_CONTEXT);
  size_t workspace = 99;
  CHECK(fa_plan_workspace_size(plan, &workspace) == FA_STATUS_SUCCESS);
  CHECK(workspace == 0);
  fa_plan_destroy(plan);
}

TEST_CASE("contexts: bad device ordinals") {
  fa_context_t* ctx = nullptr;
  CHECK(fa_context_create(-2, &ctx) == FA_STATUS_INVALID_ARGUMENT);
  CHECK(std::string(fa_last_error_detail()).find("device = -2") != std::string::npos);
  CHECK(ctx == nullptr);
  CHECK(fa_context_create(FA_DEVICE_CPU, nullptr) == FA_STATUS_INVALID_ARGUMENT);
  // Far past any machine's device count: no device, whether or not a GPU is present.
  CHECK(fa_context_create(1 << 20, &ctx) == FA_STATUS_NO_DEVICE);
  CHECK(ctx == nullptr);
  int device = 5;
  CHECK(fa_context_device(nullptr, &device) == FA_STATUS_INVALID_ARGUMENT);
  CHECK(device == 5);
  fa_context_destroy(nullptr);
}

TEST_CASE("plans: NULL arguments") {
  Fixture f;
  fa_plan_t* plan = nullptr;
  CHECK(fa_plan_create(nullptr, &f.cfg, &plan) == FA_STATUS_INVALID_ARGUMENT);
  CHECK(fa_plan_create(f.ctx, nullptr, &plan) == FA_STATUS_INVALID_ARGUMENT);
  CHECK(fa_plan_create(f.ctx, &f.cfg, nullptr) == FA_STATUS_INVALID_ARGUMENT);
  CHECK(plan == nullptr);
  CHECK(fa_plan_run(nullptr, f.q.data(), f.k.data(), f.v.data(), f.o.data(), nullptr, nullptr, 0,
                    nullptr) == FA_STATUS_INVALID_ARGUMENT);
  CHECK(fa_plan_workspace_size(nullptr, nullptr) == FA_STATUS_INVALID_ARGUMENT);
  fa_plan_destroy(nullptr);

  REQUIRE(fa_plan_create(f.ctx, &f.cfg, &plan) == FA_STATUS_SUCCESS);
  expect_error(f, FA_STATUS_INVALID_ARGUMENT, "q is NULL", [&] {
    return fa_plan_run(plan, nullptr, f.k.data(), f.v.data(), f.o.data(), f.lse.data(), nullptr, 0,
                       nullptr);
  });
  f.poison();
  CHECK(fa_plan_run(plan, f.q.data(), f.k.data(), f.v.data(), f.o.data(), f.lse.data(), nullptr, 0,
                    nullptr) == FA_STATUS_SUCCESS);
  CHECK_FALSE(f.untouched());
  fa_plan_destroy(plan);
}

TEST_CASE("registry queries: NULL arguments and small buffers") {
  fa_kernel_config kc;
  CHECK(fa_kernel_config_init(nullptr) == FA_STATUS_INVALID_ARGUMENT);
  REQUIRE(fa_kernel_config_init(&kc) == FA_STATUS_SUCCESS);
  REQUIRE(fa_kernel_config_parse("(FP16, 128, 64, 64, 4): async+load_0_0_0_tiles", &kc) ==
          FA_STATUS_SUCCESS);
  CHECK(fa_kernel_config_validate(nullptr) == FA_STATUS_INVALID_ARGUMENT);
  CHECK(fa_kernel_config_parse(nullptr, &kc) == FA_STATUS_INVALID_ARGUMENT);
  CHECK(fa_kernel_config_parse("(FP16, 128, 64, 64, 4): load_0_0_0_tiles", nullptr) ==
        FA_STATUS_INVALID_ARGUMENT);

  char buf[8];
  std::memset(buf, 'x', sizeof buf);
  size_t needed = 0;
  CHECK(fa_kernel_config_name(&kc, buf, sizeof buf, &needed) == FA_STATUS_INVALID_ARGUMENT);
  CHECK(needed == std::strlen("(FP16, 128, 64, 64, 4): async+load_0_0_0_tiles") + 1);
  CHECK(buf[0] == 'x');
  CHECK(fa_kernel_config_name(&kc, nullptr, 0, &needed) == FA_STATUS_INVALID_ARGUMENT);

  fa_kernel_config small = kc;
  small.struct_size = 4;
  CHECK(fa_kernel_config_validate(&small) == FA_STATUS_BAD_STRUCT_SIZE);
  // A CPU-only build registers no kernel, so index 0 is out of range before the size is read.
  if (fa_kernel_count() > 0) CHECK(fa_kernel_get(0, &small) == FA_STATUS_BAD_STRUCT_SIZE);

  // A caller built against 0.2 passes the struct without family and stages: it reads as the
  // mma.sync family, writes of mma.sync kernels fill it, and an sm90 kernel does not fit it.
  // Its fields end at byte 60 and its sizeof was 64: the 4 bytes of tail padding a 0.2 caller
  // passes (struct_size = 64, any contents) lie where `family` is now, and are never read.
  size_t const size_0_2 = offsetof(fa_kernel_config, family);
  fa_kernel_config old = kc;
  for (size_t size : {size_0_2, size_0_2 + 4}) {
    CAPTURE(size);
    old.struct_size = size;
    old.family = 7;  // past the caller's fields: never read
    CHECK(fa_kernel_config_validate(&old) == FA_STATUS_SUCCESS);
    char name[128];
    REQUIRE(fa_kernel_config_name(&old, name, sizeof name, nullptr) == FA_STATUS_SUCCESS);
    CHECK(std::string(name).find("sm90") == std::string::npos);
  }
  old.struct_size = size_0_2;
  fa_kernel_config sm90;
  REQUIRE(fa_kernel_config_init(&sm90) == FA_STATUS_SUCCESS);
  REQUIRE(fa_kernel_config_parse("(BF16, 128, 128, 128, 12): sm90+stages_2", &sm90) ==
          FA_STATUS_SUCCESS);
  CHECK(sm90.family == FA_FAMILY_SM90);
  CHECK(sm90.stages == 2);
  old.family = 7;
  CHECK(fa_kernel_config_parse("(BF16, 128, 128, 128, 12): sm90+stages_2", &old) ==
        FA_STATUS_BAD_STRUCT_SIZE);
  CHECK(std::string(fa_last_error_detail()).find("(a 0.2 struct cannot hold an sm90 kernel)") !=
        std::string::npos);
  CHECK(old.family == 7);
  CHECK(fa_kernel_config_parse("(FP16, 128, 64, 64, 4): async+load_0_0_0_tiles", &old) ==
        FA_STATUS_SUCCESS);
  CHECK(old.family == 7);  // the 0.2 caller's struct ends before it
  int flag = 0;
  CHECK(fa_kernel_config_autotune_filter(&kc, nullptr) == FA_STATUS_INVALID_ARGUMENT);
  CHECK(fa_kernel_is_registered(&kc, nullptr) == FA_STATUS_INVALID_ARGUMENT);
  kc.swizzled = 2;
  CHECK(fa_kernel_is_registered(&kc, &flag) == FA_STATUS_INVALID_ARGUMENT);
  CHECK(std::string(fa_last_error_detail()).find("swizzled = 2") != std::string::npos);
}

TEST_CASE("status strings and version") {
  std::vector<std::string> seen;
  for (int s = FA_STATUS_SUCCESS; s <= FA_STATUS_TUNING_ENTRIES_IGNORED; ++s) {
    std::string text = fa_status_string(static_cast<fa_status>(s));
    CHECK(text.rfind("FA_STATUS_", 0) == 0);
    CHECK(text != "FA_STATUS_UNKNOWN");
    for (std::string const& other : seen) CHECK(other != text);
    seen.push_back(text);
  }
  CHECK(std::string(fa_status_string(static_cast<fa_status>(999))) == "FA_STATUS_UNKNOWN");
  CHECK(fa_version_number() == FA_VERSION_NUMBER);
  CHECK(std::string(fa_version_string()) == FA_VERSION_STRING);
}

}  // TEST_SUITE
