// Hostile input (issue 14): sizes at and past the validation bounds, misaligned merges, and the
// allocations and statuses each entry point may produce. Each case names the defect it pins.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/alloc_count.hpp"
#include "flashattn.h"

namespace {

constexpr int64_t kTwo60 = int64_t{1} << 60;

fa_config base_config() {
  fa_config c;
  REQUIRE(fa_config_init(&c) == FA_STATUS_SUCCESS);
  c.dtype = FA_DTYPE_FP32;
  c.head_dim = 4;
  return c;
}

fa_config paged_config(int64_t batch, int64_t max_pages) {
  fa_config c = base_config();
  c.layout = FA_LAYOUT_PAGED_KV;
  c.batch = batch;
  c.num_pages = 1;
  c.page_size = 1;
  c.max_pages_per_seq = max_pages;
  c.seqlen_k = 1;
  return c;
}

fa_config varlen_config(int64_t batch) {
  fa_config c = base_config();
  c.layout = FA_LAYOUT_VARLEN;
  c.batch = batch;
  c.total_q = c.total_k = 1;
  return c;
}

fa_status validate(fa_config const& c) { return fa_config_validate(&c); }

void expect_refused(fa_config const& c, char const* mentions) {
  CHECK(fa_config_validate(&c) == FA_STATUS_INVALID_ARGUMENT);
  std::string const detail = fa_last_error_detail();
  INFO("detail: " << detail);
  CHECK(detail.find(mentions) != std::string::npos);
}

fa_merge_config fp32_merge(int64_t batch, int64_t seqlen, int64_t heads, int64_t head_dim) {
  fa_merge_config m;
  REQUIRE(fa_merge_config_init(&m) == FA_STATUS_SUCCESS);
  m.dtype = FA_DTYPE_FP32;
  m.batch = batch;
  m.seqlen = seqlen;
  m.heads = heads;
  m.head_dim = head_dim;
  return m;
}

struct Cpu {
  fa_context_t* ctx = nullptr;
  Cpu() { REQUIRE(fa_context_create(FA_DEVICE_CPU, &ctx) == FA_STATUS_SUCCESS); }
  ~Cpu() { fa_context_destroy(ctx); }
};

}  // namespace

TEST_SUITE("api") {

// Defect 1: 2^61 + 1 pages per sequence passed validation, and the CPU forward's
// batch * max_pages_per_seq wrapped into a wild block-table address (SIGSEGV).
TEST_CASE("hostile: a paged cache's block table is bounded at validation") {
  expect_refused(paged_config(1, (int64_t{1} << 61) + 1), "block_table");
  expect_refused(paged_config(4, int64_t{1} << 62), "block_table");
  // At the bound itself: batch x max_pages_per_seq = 2^60 entries are accepted.
  CHECK(validate(paged_config(4, kTwo60 / 4)) == FA_STATUS_SUCCESS);

  Cpu cpu;
  fa_config const c = paged_config(1, (int64_t{1} << 61) + 1);
  std::vector<float> q(4), kv(4), o(4, -1.f);
  int32_t cache_seqlens[1] = {1}, table[1] = {0};
  fa_run_args args;
  REQUIRE(fa_run_args_init(&args) == FA_STATUS_SUCCESS);
  args.cache_seqlens = cache_seqlens;
  args.block_table = table;
  CHECK(fa_forward_ex(cpu.ctx, &c, q.data(), kv.data(), kv.data(), o.data(), nullptr, &args,
                      nullptr) == FA_STATUS_INVALID_ARGUMENT);
  CHECK(o[0] == -1.f);
}

// Defect 2: a varlen batch up to INT64_MAX passed validation; the forward's overlap check then
// computed (batch + 1) * 4 bytes of cu_seqlens in signed arithmetic and overflowed.
TEST_CASE("hostile: varlen offsets arrays are bounded at validation") {
  expect_refused(varlen_config(INT64_MAX), "cu_seqlens");
  expect_refused(varlen_config(kTwo60), "cu_seqlens");
  CHECK(validate(varlen_config(kTwo60 - 1)) == FA_STATUS_SUCCESS);

  Cpu cpu;
  fa_config const c = varlen_config(INT64_MAX);
  std::vector<float> q(4), kv(4), o(4, -1.f);
  int32_t cu[2] = {0, 1};
  fa_run_args args;
  REQUIRE(fa_run_args_init(&args) == FA_STATUS_SUCCESS);
  args.cu_seqlens_q = args.cu_seqlens_k = cu;
  CHECK(fa_forward_ex(cpu.ctx, &c, q.data(), kv.data(), kv.data(), o.data(), nullptr, &args,
                      nullptr) == FA_STATUS_INVALID_ARGUMENT);
  CHECK(o[0] == -1.f);
}

// The class of defects 1 and 2: in a varlen problem no tensor grows with the batch, so each
// run-time array sized by it is bounded on its own; per-batch ALiBi slopes (batch x heads_q)
// passed validation at 2^61 entries.
TEST_CASE("hostile: every run-time array is bounded at validation") {
  fa_config c = varlen_config(int64_t{1} << 59);
  c.heads_q = c.heads_kv = 2;
  CHECK(validate(c) == FA_STATUS_SUCCESS);
  c.alibi = FA_ALIBI_PER_BATCH;  // 2^60 slopes: at the bound
  CHECK(validate(c) == FA_STATUS_SUCCESS);
  c.alibi = FA_ALIBI_PER_HEAD;
  c.dtype = FA_DTYPE_BF16;
  c.kv_dtype = FA_DTYPE_E4M3;
  c.descale = FA_DESCALE_PER_HEAD_KV;  // 2^60 descales: at the bound
  CHECK(validate(c) == FA_STATUS_SUCCESS);
  c.batch = (int64_t{1} << 59) + 1;
  expect_refused(c, "q_descale, k_descale and v_descale");
  c.descale = 0;
  c.kv_dtype = 0;
  expect_refused(c, "varlen batch");  // the (sequence, query row, head) work list
}

// A varlen batch's LSE holds total_q rows, not batch: its (sequence, query row, head) work list
// and its per-(batch, K/V head) descales were unbounded, so a batch of many empty sequences
// wrapped them (the CPU then computed a wrapped share of o and returned success).
TEST_CASE("hostile: a varlen batch's work list and descales are bounded though its LSE is not") {
  fa_config c = varlen_config(int64_t{1} << 31);
  c.heads_q = c.heads_kv = int64_t{1} << 30;
  c.dtype = FA_DTYPE_BF16;  // bf16 queries against an e4m3 cache with per-head descales
  c.kv_dtype = FA_DTYPE_E4M3;
  c.descale = FA_DESCALE_PER_HEAD_KV;
  expect_refused(c, "q_descale, k_descale and v_descale");
  c.batch = int64_t{1} << 40;  // batch x heads_kv wraps int64
  expect_refused(c, "batch = 1099511627776");
  c.kv_dtype = 0;
  c.descale = 0;
  c.batch = int64_t{1} << 24;
  c.heads_q = c.heads_kv = (int64_t{1} << 40) + 1;  // batch x heads_q wraps to 2^24
  expect_refused(c, "heads_q = 1099511627777");
  c.heads_q = c.heads_kv = int64_t{1} << 40;  // wraps to 0
  expect_refused(c, "varlen batch");
  c.heads_q = c.heads_kv = int64_t{1} << 36;  // 2^60 units: at the bound
  CHECK(validate(c) == FA_STATUS_SUCCESS);
}

// head_dim_v (issue 18): its own sign check, and its own extents for v and o (the q and k
// extents keep head_dim), overflow included; a refused forward leaves o untouched.
TEST_CASE("hostile: head_dim_v is checked and bounds v and o by itself") {
  fa_config c = base_config();
  c.head_dim_v = -1;
  expect_refused(c, "head_dim_v = -1");
  c.head_dim_v = INT64_MIN;
  expect_refused(c, "head_dim_v");
  c.head_dim_v = INT64_MAX;  // packed v and o: seq x heads x head_dim_v fits int64, 2^60 not
  expect_refused(c, "head_dim_v");
  c.seqlen_k = 3;  // now the packed batch stride overflows int64
  expect_refused(c, "head_dim_v");
  c.seqlen_k = 1;
  c.head_dim_v = kTwo60;  // one row of 2^60 columns: at the bound
  expect_refused(c, "head_dim_v");
  c.head_dim_v = kTwo60 - 1;
  CHECK(validate(c) == FA_STATUS_SUCCESS);
  c.head_dim_v = (int64_t{1} << 58) + 1;  // 4 heads: v and o span 2^60 + 3 elements
  c.heads_q = c.heads_kv = 4;
  expect_refused(c, "head_dim_v");
  // Explicit strides: v's last row runs head_dim_v columns past its offset.
  c = base_config();
  c.seqlen_k = 2;
  c.v_batch_stride = 0;
  c.v_seq_stride = kTwo60 / 2;
  c.v_head_stride = 1;
  c.head_dim_v = kTwo60 / 2 - 1;
  CHECK(validate(c) == FA_STATUS_SUCCESS);
  c.head_dim_v = kTwo60 / 2;
  expect_refused(c, "tensor v");

  int64_t q = 0, k = 0, v = 0, o = 0;
  c = base_config();  // head_dim 4, one row of each
  c.heads_q = 4;
  c.heads_kv = 2;
  c.head_dim_v = 10;
  REQUIRE(fa_config_extents(&c, &q, &k, &v, &o, nullptr) == FA_STATUS_SUCCESS);
  CHECK(q == 4 * 4);
  CHECK(k == 2 * 4);
  CHECK(v == 2 * 10);
  CHECK(o == 4 * 10);

  Cpu cpu;
  c = base_config();
  c.head_dim_v = -4;
  std::vector<float> qkv(4), out(4, -1.f);
  CHECK(fa_forward(cpu.ctx, &c, qkv.data(), qkv.data(), qkv.data(), out.data(), nullptr,
                   nullptr) == FA_STATUS_INVALID_ARGUMENT);
  CHECK(std::string(fa_last_error_detail()).find("head_dim_v = -4") != std::string::npos);
  CHECK(out[0] == -1.f);
}

// Defect 3: fa_merge_states on a CPU context read misaligned floats (UBSan) where fa_forward
// refuses the same pointers.
TEST_CASE("hostile: fa_merge_states checks element alignment on every backend") {
  Cpu cpu;
  fa_merge_config const m = fp32_merge(1, 1, 1, 4);
  alignas(16) unsigned char bytes[64] = {};
  std::vector<float> o(4, -1.f), lse(1, -1.f), lse_a(1, 0.f), lse_b(1, 0.f);
  float* misaligned = reinterpret_cast<float*>(bytes + 2);
  std::vector<float> a(4, 1.f), b(4, 2.f);
  CHECK(fa_merge_states(cpu.ctx, &m, misaligned, lse_a.data(), b.data(), lse_b.data(), o.data(),
                        lse.data(), nullptr) == FA_STATUS_INVALID_ARGUMENT);
  CHECK(std::string(fa_last_error_detail()).find("o_a") != std::string::npos);
  CHECK(lse[0] == -1.f);
  auto* odd_lse = reinterpret_cast<float*>(bytes + 33);
  CHECK(fa_merge_states(cpu.ctx, &m, a.data(), odd_lse, b.data(), lse_b.data(), o.data(),
                        lse.data(), nullptr) == FA_STATUS_INVALID_ARGUMENT);
  CHECK(std::string(fa_last_error_detail()).find("lse_a") != std::string::npos);
  CHECK(o[0] == -1.f);
}

// Defect 4: fa_merge_states allocated a scratch row of head_dim floats, so it could return
// FA_STATUS_OUT_OF_MEMORY, which its documentation does not list. It allocates nothing now.
TEST_CASE("hostile: fa_merge_states allocates nothing on a CPU context") {
  Cpu cpu;
  fa_merge_config const m = fp32_merge(2, 3, 2, 64);
  std::vector<float> a(2 * 3 * 2 * 64, 1.f), b(a.size(), 3.f), o(a.size());
  std::vector<float> lse_a(12, 0.f), lse_b(12, 0.f), lse(12);
  long const before = allocations_on_this_thread();
  REQUIRE(fa_merge_states(cpu.ctx, &m, a.data(), lse_a.data(), b.data(), lse_b.data(), o.data(),
                          lse.data(), nullptr) == FA_STATUS_SUCCESS);
  CHECK(allocations_on_this_thread() == before);
  CHECK(o[5] == doctest::Approx(2.f));
  // In place, element by element: o = o_a.
  REQUIRE(fa_merge_states(cpu.ctx, &m, a.data(), lse_a.data(), b.data(), lse_b.data(), a.data(),
                          lse_a.data(), nullptr) == FA_STATUS_SUCCESS);
  CHECK(a[7] == doctest::Approx(2.f));
}

}  // TEST_SUITE

TEST_SUITE("api") {

// The header's list of functions that never return FA_STATUS_OUT_OF_MEMORY: they allocate
// nothing, checked by counting.
TEST_CASE("hostile: the functions documented as allocation-free allocate nothing") {
  Cpu cpu;
  fa_config c = paged_config(2, 3);
  fa_merge_config m = fp32_merge(1, 1, 1, 4);
  fa_run_args args;
  fa_kernel_config kc;
  int device = 0;
  int64_t q = 0;
  long const before = allocations_on_this_thread();
  CHECK(fa_config_init(&c) == FA_STATUS_SUCCESS);
  CHECK(fa_merge_config_init(&m) == FA_STATUS_SUCCESS);
  CHECK(fa_run_args_init(&args) == FA_STATUS_SUCCESS);
  CHECK(fa_kernel_config_init(&kc) == FA_STATUS_SUCCESS);
  CHECK(fa_config_validate(&c) == FA_STATUS_SUCCESS);
  CHECK(fa_config_extents(&c, &q, nullptr, nullptr, nullptr, nullptr) == FA_STATUS_SUCCESS);
  c.batch = -1;
  CHECK(fa_config_validate(&c) == FA_STATUS_INVALID_ARGUMENT);
  CHECK(fa_context_device(cpu.ctx, &device) == FA_STATUS_SUCCESS);
  CHECK(allocations_on_this_thread() == before);
}

}  // TEST_SUITE
