// The inference features on the GPU: the feature matrix (masks, biases, sinks, varlen, contiguous
// and paged KV caches, split counts) through the library's choice and through every registered
// kernel, against the float64 reference; malformed index tensors (run under compute-sanitizer
// memcheck by tools/device_check.sh: they must stay in bounds); a captured decode step replayed
// with new lengths and pages; merge_states. Every device buffer is allocated at its exact size,
// so memcheck sees any access past it.
#include <cuda_runtime_api.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/feature_cases.hpp"
#include "common/features.hpp"
#include "cuda/kernel_value_dim.hpp"
#include "flashattn.h"

namespace {

using fa_test::FeatureCase;
using fa_test::FeatureData;

#define CUDA_OK(call) REQUIRE_MESSAGE((call) == cudaSuccess, #call)

// The kernels round P to the dtype before P V (2^-8 relative for bf16, 2^-11 for fp16) and O
// once more; outputs are below 1 in magnitude. A wrong mask, bias or sink moves O by more than
// 0.05 on these inputs (at least 1/64 in magnitude each).
double o_bound(int dtype) { return dtype == FA_DTYPE_BF16 ? 1.2e-2 : 3e-3; }
constexpr double kLseBound = 2e-3;

// What Hopper's sums of FP8 products add to an LSE's error: 2^-13 of the largest sum of
// |products| a score can have (inputs below 1 in magnitude): head_dim times softmax_scale times
// the largest value of each of `descales` (an empty one reads 1), each taken as at least
// `floor`. Both the FP8 cases (e4m3 Q, K and V) and bf16 queries against an e4m3 cache (each
// query row as two e4m3 rows on the sm90 tiles) run S = Q K^T on wgmma's e4m3 form.
double fp8_sums_bound(FeatureData const& d,
                      std::initializer_list<std::vector<float> const*> descales, double floor) {
  double bound = 0x1p-13 * d.c.effective_scale() * static_cast<double>(d.c.head_dim);
  for (std::vector<float> const* f : descales) {
    double largest = f->empty() ? 1.0 : floor;
    for (float x : *f) largest = std::max(largest, static_cast<double>(x));
    bound *= largest;
  }
  return bound;
}

// One exact-size device allocation per non-empty host vector, its data `offset` bytes past the
// allocation's (256-byte aligned) start.
class DeviceCopy {
 public:
  template <class T>
  explicit DeviceCopy(std::vector<T> const& host, size_t offset = 0)
      : bytes_(host.size() * sizeof(T)) {
    if (bytes_ == 0) return;
    CUDA_OK(cudaMalloc(&base_, bytes_ + offset));
    ptr_ = static_cast<char*>(base_) + offset;
    CUDA_OK(cudaMemcpy(ptr_, host.data(), bytes_, cudaMemcpyHostToDevice));
  }
  ~DeviceCopy() { cudaFree(base_); }
  DeviceCopy(DeviceCopy const&) = delete;
  DeviceCopy& operator=(DeviceCopy const&) = delete;
  void* get() const { return ptr_; }
  template <class T>
  void fetch(std::vector<T>& host) const {
    CUDA_OK(cudaMemcpy(host.data(), ptr_, bytes_, cudaMemcpyDeviceToHost));
  }
  template <class T>
  void upload(std::vector<T> const& host) const {
    CUDA_OK(cudaMemcpy(ptr_, host.data(), bytes_, cudaMemcpyHostToDevice));
  }

 private:
  void* base_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// offset: q, k, v and o start that many bytes into their allocations (16: every row of a head
// dim that is an odd multiple of 8 starts where an aligned one's would not).
struct DeviceCase {
  explicit DeviceCase(FeatureData const& d, size_t offset = 0)
      : q(d.q, offset), k(d.k, offset), v(d.v, offset), o(d.o, offset), lse(d.lse), cu_q(d.cu_q),
        cu_k(d.cu_k),
        cache(d.cache_seqlens), table(d.block_table), slopes(d.slopes), sinks(d.sinks),
        q_descale(d.q_descale), k_descale(d.k_descale), v_descale(d.v_descale) {}
  fa_run_args args(FeatureData const& d) const {
    fa_run_args a =
        d.args(cu_q.get(), cu_k.get(), cache.get(), table.get(), slopes.get(), sinks.get());
    a.q_descale = static_cast<float const*>(q_descale.get());
    a.k_descale = static_cast<float const*>(k_descale.get());
    a.v_descale = static_cast<float const*>(v_descale.get());
    return a;
  }
  void fetch(FeatureData& d) const {
    o.fetch(d.o);
    lse.fetch(d.lse);
  }
  DeviceCopy q, k, v, o, lse, cu_q, cu_k, cache, table, slopes, sinks, q_descale, k_descale,
      v_descale;
};

struct Gpu {
  Gpu() { REQUIRE(fa_context_create(0, &ctx) == FA_STATUS_SUCCESS); }
  ~Gpu() { fa_context_destroy(ctx); }
  Gpu(Gpu const&) = delete;
  Gpu& operator=(Gpu const&) = delete;
  fa_context_t* ctx = nullptr;
};

// A plan of d's config (pinned to `kernel` when given) and the workspace it asks for, released
// together; args() are a DeviceCase's run arguments with that workspace.
struct PlannedRun {
  PlannedRun(Gpu const& gpu, FeatureData const& d, fa_kernel_config const* kernel = nullptr) {
    fa_status const made = kernel != nullptr
                               ? fa_plan_create_with_kernel(gpu.ctx, &d.config, kernel, &plan)
                               : fa_plan_create(gpu.ctx, &d.config, &plan);
    INFO(fa_test::describe(d.c) << ": " << std::string(fa_last_error_detail()));
    REQUIRE(made == FA_STATUS_SUCCESS);
    REQUIRE(fa_plan_workspace_size(plan, &bytes) == FA_STATUS_SUCCESS);
    if (bytes > 0) CUDA_OK(cudaMalloc(&workspace, bytes));
  }
  ~PlannedRun() {
    cudaFree(workspace);
    fa_plan_destroy(plan);
  }
  PlannedRun(PlannedRun const&) = delete;
  PlannedRun& operator=(PlannedRun const&) = delete;
  fa_run_args args(DeviceCase const& dev, FeatureData const& d) const {
    fa_run_args a = dev.args(d);
    a.workspace = workspace;
    a.workspace_size = bytes;
    return a;
  }
  fa_plan_t* plan = nullptr;
  void* workspace = nullptr;
  size_t bytes = 0;
};

// (dtype, head_dim) pairs the build has kernels for: 16-bit ones, or with `fp8` the FP8 kernels'
// (e4m3 Q, K and V; their bound and cases are their own, at the end of this file).
std::set<std::pair<int, int>> compiled_shapes(bool fp8 = false) {
  std::set<std::pair<int, int>> shapes;
  for (size_t i = 0; i < fa_kernel_count(); ++i) {
    fa_kernel_config k;
    fa_kernel_config_init(&k);
    REQUIRE(fa_kernel_get(i, &k) == FA_STATUS_SUCCESS);
    if ((k.dtype == FA_DTYPE_E4M3) == fp8) shapes.insert({k.dtype, k.d_head});
  }
  return shapes;
}

// A chunked prefill of this dtype and head dim (8 / 2 heads, 512 causal query rows against
// `keys` cached ones, one split) on a cache of pages of `page` rows, or contiguous (page 0).
FeatureCase chunked_prefill(int dtype, int dim, int64_t keys, int64_t page) {
  FeatureCase c;
  c.dtype = dtype;
  c.head_dim = dim;
  c.layout = page > 0 ? FA_LAYOUT_PAGED_KV : FA_LAYOUT_KV_CACHE;
  c.heads_q = 8;
  c.heads_kv = 2;
  c.sq = {512};
  c.sk = {keys};
  c.causal = true;
  c.num_splits = 1;
  c.page_size = page;
  return c;
}

// The kernel the library's choice plans for d's problem.
fa_kernel_config planned_kernel(Gpu const& gpu, FeatureData const& d) {
  fa_plan_t* plan = nullptr;
  REQUIRE(fa_plan_create(gpu.ctx, &d.config, &plan) == FA_STATUS_SUCCESS);
  fa_kernel_config k;
  fa_kernel_config_init(&k);
  REQUIRE(fa_plan_kernel(plan, &k) == FA_STATUS_SUCCESS);
  fa_plan_destroy(plan);
  return k;
}

// The same for c (its data made with `seed`).
fa_kernel_config planned_kernel(Gpu const& gpu, FeatureCase const& c, uint64_t seed) {
  return planned_kernel(gpu, fa_test::make_feature_data(c, seed));
}

// Whether a registered sm90 kernel of this dtype and head dim satisfies `pred`.
template <class Pred>
bool any_sm90_kernel(int dtype, int dim, Pred pred) {
  bool any = false;
  for (size_t i = 0; i < fa_kernel_count(); ++i) {
    fa_kernel_config k;
    fa_kernel_config_init(&k);
    REQUIRE(fa_kernel_get(i, &k) == FA_STATUS_SUCCESS);
    any |= k.family == FA_FAMILY_SM90 && k.dtype == dtype && k.d_head == dim && pred(k);
  }
  return any;
}

void check_result(FeatureData const& d, std::string const& what,
                  fa_test::FeatureReference const& reference) {
  fa_test::FeatureErrors const e = fa_test::compare_features(d, d.o.data(), d.lse.data(), reference);
  INFO(what << " " << fa_test::describe(d.c) << " | o max err " << e.o_max << ", lse max err "
            << e.lse_max << ", bad " << e.bad);
  // An e4m3 cache's O is v_descale (up to 4) times a result as accurate as a 16-bit cache's.
  double v_max = 1.0;
  for (float x : d.v_descale) v_max = std::max(v_max, static_cast<double>(x));
  CHECK(e.bad == 0);
  CHECK(e.written_past == 0);
  CHECK(e.o_max <= o_bound(d.c.o_type()) * v_max);
  // bf16 queries against an e4m3 cache run S = Q K^T on wgmma's e4m3 form on Hopper (the sm90
  // tiles' kE4M3Keys), whose sums of FP8 products keep fewer mantissa bits than fp32: the LSE
  // bound adds fp8_sums_bound over the k descales, taken as at least 1. Seen: 0.00202 at d 256,
  // causal, 177 rows, per-tensor descales. Other kernels reading such a cache (fp16 products)
  // get the same, looser bound.
  double lse_bound = kLseBound;
  if (d.c.dtype == FA_DTYPE_BF16 && d.c.kv_type() == FA_DTYPE_E4M3) {
    lse_bound += fp8_sums_bound(d, {&d.k_descale}, 1.0);
  }
  INFO("lse bound " << lse_bound);
  CHECK(e.lse_max <= lse_bound);
}
void check_result(FeatureData const& d, std::string const& what) {
  check_result(d, what, fa_test::feature_reference(d));
}

// Runs `d` through a plan (pinned to `kernel` when given) with the workspace the plan asks for
// (with `workspace` false, none: a split run then goes unsplit, an FP8 one transposes V in the
// kernel), its tensors `offset` bytes into their allocations (DeviceCase); returns the plan's
// split count and, in `bytes`, the workspace it asked for.
int run_plan(Gpu const& gpu, FeatureData& d, fa_kernel_config const* kernel,
             bool workspace = true, size_t* bytes = nullptr, size_t offset = 0) {
  PlannedRun run(gpu, d, kernel);
  int splits = 0;
  REQUIRE(fa_plan_num_splits(run.plan, &splits) == FA_STATUS_SUCCESS);
  if (d.c.num_splits > 0) CHECK(splits == d.c.num_splits);
  // A split needs its partials; otherwise only an FP8 run asks for a workspace (V's images).
  if (splits > 1 || d.c.dtype != FA_DTYPE_E4M3) CHECK((run.bytes == 0) == (splits == 1));
  if (bytes != nullptr) *bytes = run.bytes;
  DeviceCase dev(d, offset);
  fa_run_args args = run.args(dev, d);
  if (!workspace) {
    args.workspace = nullptr;
    args.workspace_size = 0;
  }
  fa_status const ran = fa_plan_run_ex(run.plan, dev.q.get(), dev.k.get(), dev.v.get(),
                                       dev.o.get(), static_cast<float*>(dev.lse.get()), &args,
                                       nullptr);
  INFO(std::string(fa_last_error_detail()));
  REQUIRE(ran == FA_STATUS_SUCCESS);
  CUDA_OK(cudaDeviceSynchronize());
  dev.fetch(d);
  return splits;
}

// FA_GPU_TEST_SAMPLE=N checks every N-th case only (for slow runs under compute-sanitizer).
int sample_step() {
  char const* sample = std::getenv("FA_GPU_TEST_SAMPLE");
  return sample != nullptr ? std::max(1, std::atoi(sample)) : 1;
}

}  // namespace

TEST_CASE("every inference feature on the library's choice matches the float64 reference") {
  Gpu gpu;
  uint64_t seed = 5000;
  int n = 0, split = 0, index = 0;
  int const step = sample_step();
  for (auto [dtype, dim] : compiled_shapes()) {
    for (FeatureCase const& c : fa_test::feature_cases(dtype, dim, 1013)) {
      if (index++ % step != 0) continue;
      FeatureData d = fa_test::make_feature_data(c, ++seed);
      split += run_plan(gpu, d, nullptr) > 1 ? 1 : 0;
      check_result(d, "choice");
      ++n;
    }
  }
  MESSAGE(n << " feature cases checked on the GPU, " << split << " of them split");
  CHECK(split > 0);
}

TEST_CASE("every registered kernel runs the features") {
  Gpu gpu;
  // A sample that covers each code path: paged decode with GQA packing, split and every bias;
  // a varlen batch with windows and sinks; a dense causal window with softcap and a negative
  // scale; a dense causal window with GQA and Sq != Sk; dense causal with every bias and more
  // queries than keys (rows that see no key but a sink); a dense two-sided window with sinks
  // alone; a contiguous cache with an empty sequence and ALiBi (the sm90 family runs them all,
  // the first by gathering its pages of 3 rows); head-major caches (each K/V head's rows
  // together): a chunked prefill on pages of 16 and a decode step split three ways.
  std::vector<FeatureCase> sample(9);
  sample[0].layout = FA_LAYOUT_PAGED_KV;
  sample[0].page_size = 3;
  sample[0].heads_q = 8;
  sample[0].heads_kv = 2;
  sample[0].sq = {4, 4};
  sample[0].sk = {700, 5};
  sample[0].causal = true;
  sample[0].alibi = FA_ALIBI_PER_HEAD;
  sample[0].softcap = 4.0f;
  sample[0].sinks = true;
  sample[0].num_splits = 3;
  sample[1].layout = FA_LAYOUT_VARLEN;
  sample[1].sq = {100, 0, 33};
  sample[1].sk = {130, 7, 33};
  sample[1].window = true;
  sample[1].left = 40;
  sample[1].right = 10;
  sample[1].sinks = true;
  sample[2].sq = {177, 177};
  sample[2].sk = {200, 200};
  sample[2].causal = true;
  sample[2].window = true;
  sample[2].left = 64;
  sample[2].right = -1;
  sample[2].softcap = 3.0f;
  sample[2].scale = -0.09f;
  sample[3].heads_q = 8;
  sample[3].heads_kv = 2;
  sample[3].sq = {177, 177};
  sample[3].sk = {300, 300};
  sample[3].causal = true;
  sample[3].window = true;
  sample[3].left = 100;
  sample[3].right = -1;
  sample[4].heads_q = 8;
  sample[4].heads_kv = 2;
  sample[4].sq = {300, 300};
  sample[4].sk = {150, 150};
  sample[4].causal = true;
  sample[4].softcap = 5.0f;
  sample[4].alibi = FA_ALIBI_PER_BATCH;
  sample[4].sinks = true;
  sample[5].heads_q = 4;
  sample[5].heads_kv = 4;
  sample[5].sq = {64, 64};
  sample[5].sk = {1013, 1013};
  sample[5].window = true;
  sample[5].left = 200;
  sample[5].right = 50;
  sample[5].sinks = true;
  sample[6].layout = FA_LAYOUT_KV_CACHE;
  sample[6].heads_q = 8;
  sample[6].heads_kv = 2;
  sample[6].sq = {5, 5, 5};
  sample[6].sk = {600, 0, 77};
  sample[6].causal = true;
  sample[6].alibi = FA_ALIBI_PER_HEAD;
  sample[7].layout = FA_LAYOUT_PAGED_KV;
  sample[7].page_size = 16;
  sample[7].head_major = true;
  sample[7].heads_q = 8;
  sample[7].heads_kv = 2;
  sample[7].sq = {33, 33};
  sample[7].sk = {400, 90};
  sample[7].causal = true;
  sample[8].layout = FA_LAYOUT_KV_CACHE;
  sample[8].head_major = true;
  sample[8].heads_q = 8;
  sample[8].heads_kv = 1;
  sample[8].sq = {1, 1, 1};
  sample[8].sk = {600, 0, 77};
  sample[8].num_splits = 3;
  int kernels = 0;
  uint64_t seed = 9000;
  for (size_t i = 0; i < fa_kernel_count(); i += static_cast<size_t>(sample_step())) {
    fa_kernel_config k;
    fa_kernel_config_init(&k);
    REQUIRE(fa_kernel_get(i, &k) == FA_STATUS_SUCCESS);
    if (k.dtype == FA_DTYPE_E4M3) continue;
    int const dv = fa_test::kernel_value_dim(gpu.ctx, k);
    for (FeatureCase c : sample) {
      c.dtype = k.dtype;
      c.head_dim = k.d_head;
      c.head_dim_v = dv == k.d_head ? 0 : dv;
      FeatureData d = fa_test::make_feature_data(c, ++seed);
      char name[128];
      fa_kernel_config_name(&k, name, sizeof name, nullptr);
      run_plan(gpu, d, &k);
      check_result(d, name);
    }
    ++kernels;
  }
  MESSAGE(kernels << " kernels x " << sample.size() << " feature cases");
}

TEST_CASE("every sm90 kernel reads paged caches of every page size") {
  Gpu gpu;
  // Page sizes against the family's B_c of 64, 80, 128 and 192: 8, 16, 48, 64 and 256 (TMA
  // boxes of 8 to 192 rows: 16 at B_c 80, 48 at B_c 192) and 1, 3, 100 (boxes of 1, 3 or 4
  // rows: gathered by the producer warpgroup).
  int64_t const pages[] = {8, 16, 48, 64, 256, 1, 3, 100};
  // Decode, speculative and chunked prefill against caches of uneven lengths (an empty one, one
  // shorter than a page, one ending mid-block), GQA 1, 4 and 8, causal or not.
  struct Shape {
    int64_t heads_q, heads_kv, sq;
    std::vector<int64_t> sk;
    bool causal;
  };
  std::vector<Shape> const shapes = {{8, 1, 1, {700, 0, 5}, false},
                                     {8, 2, 16, {300, 16, 77}, true},
                                     {4, 4, 177, {1013, 200}, true},
                                     {4, 1, 64, {129, 1013}, false}};
  int kernels = 0, index = 0;
  uint64_t seed = 12000;
  for (size_t i = 0; i < fa_kernel_count(); ++i) {
    fa_kernel_config k;
    fa_kernel_config_init(&k);
    REQUIRE(fa_kernel_get(i, &k) == FA_STATUS_SUCCESS);
    if (k.dtype == FA_DTYPE_E4M3) continue;
    if (k.family != FA_FAMILY_SM90 || index++ % sample_step() != 0) continue;
    char name[128];
    fa_kernel_config_name(&k, name, sizeof name, nullptr);
    int const dv = fa_test::kernel_value_dim(gpu.ctx, k);
    for (size_t j = 0; j < shapes.size(); ++j) {
      Shape const& shape = shapes[j];
      FeatureCase c;
      c.dtype = k.dtype;
      c.head_dim = k.d_head;
      c.head_dim_v = dv == k.d_head ? 0 : dv;
      c.layout = FA_LAYOUT_PAGED_KV;
      // Each kernel's four shapes take every other page size from its own start, so every
      // kernel reads both TMA boxes (8, 48, 256 or 16, 64) and gathered rows (3 or 1, 100).
      c.page_size = pages[(size_t(kernels) + 2 * j) % std::size(pages)];
      c.heads_q = shape.heads_q;
      c.heads_kv = shape.heads_kv;
      c.sq.assign(shape.sk.size(), shape.sq);
      c.sk = shape.sk;
      c.causal = shape.causal;
      c.num_splits = j == 0 ? 3 : 1;  // decode split three ways: the partials and the combine
      FeatureData d = fa_test::make_feature_data(c, ++seed);
      run_plan(gpu, d, &k);
      check_result(d, name);
    }
    // Malformed lengths and tables (negative, past the pool, padding) stay in bounds: memcheck
    // under tools/device_check.sh sees any access past the exact-size buffers.
    FeatureCase m;
    m.dtype = k.dtype;
    m.head_dim = k.d_head;
    m.head_dim_v = dv == k.d_head ? 0 : dv;
    m.layout = FA_LAYOUT_PAGED_KV;
    m.page_size = kernels % 2 == 0 ? 16 : 1;  // TMA boxes, gathered rows
    m.sq = {3, 3, 3};
    m.sk = {100, 20, 300};
    m.num_splits = 1;
    FeatureData e = fa_test::make_feature_data(m, ++seed);
    for (size_t t = 0; t < e.block_table.size(); ++t) {
      e.block_table[t] = t % 3 == 0 ? -7 : t % 3 == 1 ? 1 << 30 : e.block_table[t];
    }
    e.cache_seqlens = {1 << 30, -5, 300};
    {
      DeviceCase dev(e);
      fa_plan_t* plan = nullptr;
      REQUIRE(fa_plan_create_with_kernel(gpu.ctx, &e.config, &k, &plan) == FA_STATUS_SUCCESS);
      fa_run_args args = dev.args(e);
      CHECK(fa_plan_run_ex(plan, dev.q.get(), dev.k.get(), dev.v.get(), dev.o.get(),
                           static_cast<float*>(dev.lse.get()), &args, nullptr) == FA_STATUS_SUCCESS);
      CUDA_OK(cudaDeviceSynchronize());
      fa_plan_destroy(plan);
    }
    ++kernels;
  }
  MESSAGE(kernels << " sm90 kernels x " << shapes.size() << " paged cases");
}

// The largest head dim per dtype in this build.
std::set<std::pair<int, int>> top_dims() {
  std::set<std::pair<int, int>> top;
  for (auto [dtype, d] : compiled_shapes()) {
    auto const same =
        std::find_if(top.begin(), top.end(), [&](auto const& t) { return t.first == dtype; });
    if (same != top.end() && same->second >= d) continue;
    if (same != top.end()) top.erase(same);
    top.insert({dtype, d});
  }
  return top;
}

// Three shapes that cross a head dim below a kernel's with the paths that touch columns: a
// dense causal GQA problem of 177 queries against 1013 keys (sm90: TMA loads, O by TMA or by
// the threads), decode on a paged cache of pages of 3 rows split three ways (sm90: gathered
// loads; the partials and the combine; mma.sync: its decode kernels), and a contiguous cache
// with ALiBi and sinks.
std::vector<FeatureCase> head_dim_cases(int dtype, int64_t d) {
  std::vector<FeatureCase> cases(3);
  for (FeatureCase& c : cases) {
    c.dtype = dtype;
    c.head_dim = d;
  }
  cases[0].heads_q = 8;
  cases[0].heads_kv = 2;
  cases[0].sq = {177, 177};
  cases[0].sk = {1013, 1013};
  cases[0].causal = true;
  cases[1].layout = FA_LAYOUT_PAGED_KV;
  cases[1].page_size = 3;
  cases[1].heads_q = 8;
  cases[1].heads_kv = 1;
  cases[1].sq = {1, 1};
  cases[1].sk = {700, 17};
  cases[1].num_splits = 3;
  cases[2].layout = FA_LAYOUT_KV_CACHE;
  cases[2].heads_q = 4;
  cases[2].heads_kv = 4;
  cases[2].sq = {16, 16};
  cases[2].sk = {300, 1};
  cases[2].causal = true;
  cases[2].alibi = FA_ALIBI_PER_HEAD;
  cases[2].sinks = true;
  return cases;
}

// Every FA_GPU_TEST_SAMPLE-th registered kernel this device runs (the build holds its code for
// the device: sm90 kernels on sm_90 only, and there in a default build the mma.sync decode tiles
// only; with FA_GPU_TEST_FAMILY=F those of family F only, as the kernel suite), with its name.
template <class Body>
int for_each_runnable_kernel(Body const& body) {
  Gpu gpu;
  char const* family = std::getenv("FA_GPU_TEST_FAMILY");
  int index = 0, ran = 0;
  for (size_t i = 0; i < fa_kernel_count(); ++i) {
    fa_kernel_config k;
    fa_kernel_config_init(&k);
    REQUIRE(fa_kernel_get(i, &k) == FA_STATUS_SUCCESS);
    if (k.dtype == FA_DTYPE_E4M3) continue;
    if (family != nullptr && k.family != std::atoi(family)) continue;
    if (!fa_test::kernel_runs_here(gpu.ctx, k) || index++ % sample_step() != 0) continue;
    char name[128];
    fa_kernel_config_name(&k, name, sizeof name, nullptr);
    body(k, std::string(name));
    ++ran;
  }
  return ran;
}

TEST_CASE("every multiple of 8 up to the largest built head dim runs on the library's choice") {
  Gpu gpu;
  int n = 0;
  uint64_t seed = 15000;
  for (auto [dtype, largest] : top_dims()) {
    for (int64_t d = 8; d <= largest; d += 8) {
      // One shape per head dim, in turn: every dim meets every path across the dims.
      FeatureCase const c = head_dim_cases(dtype, d)[size_t(d / 8) % 3];
      FeatureData fd = fa_test::make_feature_data(c, ++seed);
      run_plan(gpu, fd, nullptr);
      check_result(fd, "choice, head_dim " + std::to_string(d));
      ++n;
    }
  }
  MESSAGE(n << " head dims checked on the library's choice");
}

TEST_CASE("every kernel runs head dims below its own with zero columns") {
  Gpu gpu;
  uint64_t seed = 16000;
  int runs = 0;
  int const kernels = for_each_runnable_kernel([&](fa_kernel_config const& k, std::string const& name) {
    // Every multiple of 8 in the 56 columns below its own (an sm90 kernel's narrow pairs, every
    // 16 columns: narrow.hpp's Narrow, each at its width and 8 under it; a partial last
    // 64-column block), and half-way down (a whole block of zeros at d 192 and 256). Each dim
    // runs a problem without general features (on sm90: its narrow pair, or the general
    // instantiation where none fits) and one with them (splits, or ALiBi and sinks), in turn.
    // The first is, by turns, dense (every other one with its tensors 16 bytes into their
    // allocations, so at an odd multiple of 8 the first K/V head's rows start 16 bytes into a
    // sector, not the second's: a narrow pair's column shifts, narrow.hpp), or a chunked prefill
    // on pages of 16 (TMA boxes) or of 3 (gathered row by row by the producer warpgroup), so a
    // pair's dims meet all three. A kernel holding V in fewer columns (d 192 with 128 keys: 128)
    // takes value head dims up to those.
    int const dv = fa_test::kernel_value_dim(gpu.ctx, k);
    std::set<int64_t> dims{k.d_head / 2 + 8};
    for (int64_t d = std::max<int64_t>(8, k.d_head - 56); d < k.d_head; d += 8) dims.insert(d);
    for (int64_t d : dims) {
      std::vector<FeatureCase> const cases = head_dim_cases(k.dtype, d);
      FeatureCase paged = cases[1];
      paged.page_size = d / 8 % 3 == 1 ? 16 : 3;
      paged.heads_kv = 2;
      paged.sq = {64, 64};
      paged.sk = {700, 300};
      paged.causal = true;
      paged.num_splits = 1;
      bool const dense = d / 8 % 3 == 0;
      size_t offset = dense && d / 24 % 2 == 1 ? 16 : 0;
      for (FeatureCase c : {dense ? cases[0] : paged, cases[1 + size_t(d / 16) % 2]}) {
        if (d > dv) c.head_dim_v = dv;
        FeatureData fd = fa_test::make_feature_data(c, ++seed);
        INFO(name << ", head_dim " << d << ", offset " << offset << ": " << fa_test::describe(c));
        run_plan(gpu, fd, &k, true, nullptr, offset);
        offset = 0;
        check_result(fd, name + ", head_dim " + std::to_string(d));
        ++runs;
      }
    }
  });
  MESSAGE(kernels << " kernels, " << runs << " problems of head dims below theirs");
}

TEST_CASE("a NaN in one K/V head's columns stays in that head at head dims 8 below a kernel's") {
  // At an odd multiple of 8 an sm90 narrow pair reads V's boxes past a head's columns from the
  // next head, and a shifted head's from the one before (launch.cuh's flat V map, narrow.hpp's
  // column shifts): those columns reach only o's columns past head_dim_v, which no store writes.
  // K's must be zeros: one NaN there times Q's zero columns would make a score NaN. So NaN in
  // K/V head 1's first K column makes its query heads NaN and leaves head 0's finite; NaN in
  // head 0's last V column and head 1's first makes exactly those o columns NaN. Packed heads,
  // by turns at the allocation's start and 16 bytes into it (the first or the second head
  // shifted).
  Gpu gpu;
  double const nan = std::numeric_limits<double>::quiet_NaN();
  uint64_t seed = 17000;
  int runs = 0;
  int const kernels = for_each_runnable_kernel([&](fa_kernel_config const& k, std::string const& name) {
    int const dv = fa_test::kernel_value_dim(gpu.ctx, k);
    FeatureCase c;
    c.dtype = k.dtype;
    c.head_dim = k.d_head - 8;
    c.head_dim_v = dv == k.d_head ? 0 : dv - 8;
    c.heads_q = 4;
    c.heads_kv = 2;
    c.sq = {70, 70};
    c.sk = {300, 300};
    int64_t const dim_v = c.dim_v();
    for (int in_v = 0; in_v < 2; ++in_v) {
      FeatureData d = fa_test::make_feature_data(c, ++seed);
      for (int64_t b = 0; b < 2; ++b) {
        for (int64_t j = 0; j < 300; ++j) {
          if (in_v == 0) {
            fa_test::store_elem(c.dtype, d.k.data(), d.k_index(b, j, 1), nan);
          } else {
            fa_test::store_elem(c.dtype, d.v.data(), d.v_index(b, j, 0) + dim_v - 1, nan);
            fa_test::store_elem(c.dtype, d.v.data(), d.v_index(b, j, 1), nan);
          }
        }
      }
      size_t const offset = (runs % 2) * 16;
      INFO(name << (in_v ? ", NaN in V" : ", NaN in K") << ", offset " << offset << ": "
                << fa_test::describe(c));
      run_plan(gpu, d, &k, true, nullptr, offset);
      check_result(d, name);
      int64_t wrong = 0;
      for (int64_t b = 0; b < 2; ++b) {
        for (int64_t i = 0; i < 70; ++i) {
          for (int64_t h = 0; h < 4; ++h) {
            int64_t const kv_head = h / 2;
            for (int64_t col = 0; col < dim_v; ++col) {
              bool const want = in_v == 0 ? kv_head == 1
                                          : (kv_head == 0 ? col == dim_v - 1 : col == 0);
              double const o = fa_test::load_elem(c.dtype, d.o.data(), d.o_index(b, i, h) + col);
              wrong += std::isnan(o) != want ? 1 : 0;
            }
          }
        }
      }
      CHECK(wrong == 0);
      ++runs;
    }
  });
  MESSAGE(kernels << " kernels, " << runs << " problems with a NaN in one head");
}

TEST_CASE("a value head dim below head_dim runs on the choice and on every kernel, o's padding untouched") {
  Gpu gpu;
  std::set<std::pair<int, int>> const top = top_dims();
  int n = 0;
  uint64_t seed = 17000;
  // DeepSeek-V2/V3 prefill's 192/128 and pairs around the built head dims; o carries
  // FeatureCase::kOutPad poisoned columns per head that must stay so.
  std::pair<int64_t, int64_t> const pairs[] = {{192, 128}, {128, 64}, {256, 136}, {64, 40}, {96, 72}};
  for (auto [dtype, largest] : top) {
    for (size_t i = 0; i < std::size(pairs); ++i) {
      auto [d, dv] = pairs[i];
      if (d > largest) continue;
      FeatureCase c = head_dim_cases(dtype, d)[i % 3];
      c.head_dim_v = dv;
      FeatureData fd = fa_test::make_feature_data(c, ++seed);
      run_plan(gpu, fd, nullptr);
      check_result(fd, "choice, head_dim " + std::to_string(d) + "/" + std::to_string(dv));
      ++n;
    }
  }
  for_each_runnable_kernel([&](fa_kernel_config const& k, std::string const& name) {
    for (FeatureCase c : head_dim_cases(k.dtype, k.d_head)) {
      c.head_dim_v = k.d_head / 2;
      FeatureData fd = fa_test::make_feature_data(c, ++seed);
      run_plan(gpu, fd, &k);
      check_result(fd, name + ", head_dim_v " + std::to_string(c.head_dim_v));
      ++n;
    }
  });
  MESSAGE(n << " value head dim cases");
}

TEST_CASE("a chunked prefill on a paged cache gets the family its contiguous cache gets, page size 1 or 16") {
  Gpu gpu;
  // A chunked prefill planned first on a cache of pages of 1 row, then of 16, then contiguous:
  // each plan gets the family the same shape's contiguous cache gets (before the cache was keyed
  // by page size, a page-1 fallback became every later page size's pick).
  for (auto [dtype, dim] : compiled_shapes()) {
    int const page1 = planned_kernel(gpu, chunked_prefill(dtype, dim, 2048, 1), 31).family;
    int const page16 = planned_kernel(gpu, chunked_prefill(dtype, dim, 2048, 16), 31).family;
    int const contiguous = planned_kernel(gpu, chunked_prefill(dtype, dim, 2048, 0), 32).family;
    INFO("dtype " << dtype << " d " << dim);
    CHECK(page1 == contiguous);
    CHECK(page16 == contiguous);
  }
}

TEST_CASE("a chunked prefill on gathered pages gets a three-stage sm90 kernel, where built") {
  Gpu gpu;
  // Pages of 1 and 3 rows are gathered by the producer warpgroup; a third stage keeps another
  // block's copies in flight (1.12-1.27x at d 64 and 128 on the H200). The table's d 128 picks
  // have two stages, its autotuning candidates a three-stage one.
  for (auto [dtype, dim] : compiled_shapes()) {
    bool const three =
        any_sm90_kernel(dtype, dim, [](fa_kernel_config const& k) { return k.stages >= 3; });
    for (int64_t page : {1, 3}) {
      fa_kernel_config const k = planned_kernel(gpu, chunked_prefill(dtype, dim, 16384, page), 34);
      INFO("dtype " << dtype << " d " << dim << " page " << page << " stages " << k.stages);
      if (k.family == FA_FAMILY_SM90 && three) CHECK(k.stages >= 3);
    }
  }
}

TEST_CASE("a chunked prefill on pages of 64 or 256 gets a key block its pages hold, where built") {
  Gpu gpu;
  // The table's d 256 pick has B_c 80 (TMA boxes of 16 rows at these pages); a registered sm90
  // kernel of the same dtype and head dim whose B_c divides the page size takes its place.
  for (auto [dtype, dim] : compiled_shapes()) {
    for (int64_t page : {64, 256}) {
      bool const whole = any_sm90_kernel(dtype, dim, [&](fa_kernel_config const& k) {
        return page % k.B_c == 0 && fa_test::kernel_value_dim(gpu.ctx, k) == dim;
      });
      fa_kernel_config const k = planned_kernel(gpu, chunked_prefill(dtype, dim, 16384, page), 33);
      INFO("dtype " << dtype << " d " << dim << " page " << page << " B_c " << k.B_c);
      if (k.family == FA_FAMILY_SM90 && whole) CHECK(std::gcd(int64_t(k.B_c), page) >= 64);
    }
  }
}

TEST_CASE("fa_forward_ex: automatic splits need a workspace, forced ones fail without") {
  Gpu gpu;
  FeatureCase c;
  c.layout = FA_LAYOUT_KV_CACHE;
  c.heads_q = 8;
  c.heads_kv = 2;
  c.head_dim = 128;
  c.sq = {1};
  c.sk = {8000};
  if (compiled_shapes().count({c.dtype, 128}) == 0) return;
  FeatureData d = fa_test::make_feature_data(c, 42);
  DeviceCase dev(d);
  fa_run_args args = dev.args(d);
  // No workspace: runs unsplit, and right.
  REQUIRE(fa_forward_ex(gpu.ctx, &d.config, dev.q.get(), dev.k.get(), dev.v.get(), dev.o.get(),
                        static_cast<float*>(dev.lse.get()), &args, nullptr) == FA_STATUS_SUCCESS);
  CUDA_OK(cudaDeviceSynchronize());
  dev.fetch(d);
  check_result(d, "fa_forward_ex, no workspace");
  d.config.num_splits = 4;
  CHECK(fa_forward_ex(gpu.ctx, &d.config, dev.q.get(), dev.k.get(), dev.v.get(), dev.o.get(),
                      static_cast<float*>(dev.lse.get()), &args, nullptr) ==
        FA_STATUS_WORKSPACE_TOO_SMALL);
  CHECK(std::string(fa_last_error_detail()).find("workspace") != std::string::npos);
}

// ---- e4m3 (FP8) caches with 16-bit queries ---------------------------------------------------

namespace {

std::string name_of(fa_kernel_config const& k) {
  char name[160];
  REQUIRE(fa_kernel_config_name(&k, name, sizeof name, nullptr) == FA_STATUS_SUCCESS);
  return name;
}

// The registered kernels of d's dtype and head dim `dim` that run its e4m3 cache, but the
// library's choice (a plan pinned to them is made; the others refuse it:
// FA_STATUS_KERNEL_NOT_AVAILABLE); `found` counts the choice too.
std::vector<fa_kernel_config> e4m3_kernels(Gpu const& gpu, FeatureData const& d, int dim,
                                           int* found) {
  fa_kernel_config const chosen = planned_kernel(gpu, d);
  std::vector<fa_kernel_config> out;
  *found = 0;
  for (size_t i = 0; i < fa_kernel_count(); ++i) {
    fa_kernel_config k;
    fa_kernel_config_init(&k);
    REQUIRE(fa_kernel_get(i, &k) == FA_STATUS_SUCCESS);
    if (k.dtype != d.c.dtype || k.d_head != dim) continue;
    fa_plan_t* plan = nullptr;
    fa_status const s = fa_plan_create_with_kernel(gpu.ctx, &d.config, &k, &plan);
    if (s == FA_STATUS_SUCCESS) {
      ++*found;
      if (name_of(k) != name_of(chosen)) out.push_back(k);
      fa_plan_destroy(plan);
    } else {
      CHECK(s == FA_STATUS_KERNEL_NOT_AVAILABLE);
    }
  }
  return out;
}

// `base` (its types and head dims) on a contiguous cache with soft-capping, ALiBi per sequence, a
// window and sinks, split three ways: 8 / 2 heads, 17 rows against 300 and 40 keys.
FeatureCase all_transforms(FeatureCase c) {
  c.layout = FA_LAYOUT_KV_CACHE;
  c.heads_q = 8;
  c.heads_kv = 2;
  c.sq = {17, 17};
  c.sk = {300, 40};
  c.window = true;
  c.left = 100;
  c.right = 2;
  c.softcap = 5.0f;
  c.alibi = FA_ALIBI_PER_BATCH;
  c.sinks = true;
  c.num_splits = 3;
  return c;
}

// Decode (pages 1, 3, 16, 64, 256, shuffled), speculative and chunked prefill rows, dense and
// varlen problems, the score transforms and sinks, a value head dim and a head dim below the
// kernel's, over GQA 1-8, splits 1, 3 and automatic, and the three descale forms.
std::vector<FeatureCase> e4m3_cache_cases(int dtype, int64_t dim) {
  std::vector<FeatureCase> cases;
  int const descales[] = {-1, FA_DESCALE_PER_TENSOR, FA_DESCALE_PER_HEAD_KV};
  int64_t const gqa[][2] = {{4, 4}, {4, 2}, {8, 2}, {8, 1}};
  int const splits[] = {0, 1, 3};
  int n = 0;
  FeatureCase base;
  base.dtype = dtype;
  base.kv_dtype = FA_DTYPE_E4M3;
  base.head_dim = dim;
  // Descales and (where num_splits is -1) split counts in turn.
  auto add = [&](FeatureCase c) {
    c.descale = descales[n % 3];
    if (c.num_splits < 0) c.num_splits = splits[n % 3];
    ++n;
    cases.push_back(c);
  };
  int g = 0;
  for (int64_t page : {1, 3, 16, 64, 256}) {
    FeatureCase c = base;  // decode against caches of 1 to 1013 rows
    c.layout = FA_LAYOUT_PAGED_KV;
    c.page_size = page;
    c.heads_q = gqa[g % 4][0];
    c.heads_kv = gqa[g % 4][1];
    ++g;
    c.sq = {1, 1, 1};
    c.sk = {1, 177, 1013};
    c.num_splits = -1;
    add(c);
    c.sq = {16, 16};  // speculative rows, causal (a cache's sequences share seqlen_q)
    c.sk = {1013, 17};
    c.causal = true;
    add(c);
  }
  for (int64_t page : {0, 1, 16}) {
    FeatureCase c = base;  // chunked prefill: 177 (or 64) new rows against 100-500 cached, causal
    c.layout = page == 0 ? FA_LAYOUT_KV_CACHE : FA_LAYOUT_PAGED_KV;
    c.page_size = page;
    c.heads_q = 4;
    c.heads_kv = 2;
    c.sq = page == 1 ? std::vector<int64_t>{64, 64} : std::vector<int64_t>{177};
    c.sk = page == 1 ? std::vector<int64_t>{300, 100} : std::vector<int64_t>{500};
    c.causal = true;
    c.num_splits = -1;
    add(c);
  }
  add(all_transforms(base));
  {
    FeatureCase c = base;  // dense causal and varlen, GQA 2
    c.heads_q = 4;
    c.heads_kv = 2;
    c.sq = {177};
    c.sk = {177};
    c.causal = true;
    add(c);
    c.layout = FA_LAYOUT_VARLEN;
    c.sq = {1, 17, 0, 177};
    c.sk = {17, 177, 3, 177};
    add(c);
  }
  {
    // A value head dim and a head dim below the kernel's, paged (a multiple of 16: an e4m3
    // cache's rows and heads start at 16-byte boundaries).
    FeatureCase c = base;
    c.layout = FA_LAYOUT_PAGED_KV;
    c.page_size = 16;
    c.heads_q = 8;
    c.heads_kv = 2;
    c.sq = {5, 5};
    c.sk = {500, 33};
    c.head_dim = dim - 16;
    add(c);
    c.head_dim = dim;
    c.head_dim_v = dim / 2;
    add(c);
  }
  return cases;
}

// Shapes with 16-bit dtypes (the e4m3 caches' queries).
std::vector<std::pair<int, int>> e4m3_shapes() {
  std::vector<std::pair<int, int>> out;
  for (auto [dtype, dim] : compiled_shapes()) {
    if (dtype == FA_DTYPE_BF16 || dtype == FA_DTYPE_FP16) out.push_back({dtype, dim});
  }
  return out;
}

// An e4m3 cache of head dim `dim` with per-tensor descales, read with `dtype` queries.
FeatureCase e4m3_case(int dtype, int dim) {
  FeatureCase c;
  c.dtype = dtype;
  c.kv_dtype = FA_DTYPE_E4M3;
  c.descale = FA_DESCALE_PER_TENSOR;
  c.head_dim = dim;
  return c;
}

// The exactness cases' shape: one head, `batch` sequences of `rows` query rows against one
// cached key each, contiguous, unsplit.
FeatureCase one_key_case(int dtype, int dim, int64_t batch, int64_t rows) {
  FeatureCase c = e4m3_case(dtype, dim);
  c.layout = FA_LAYOUT_KV_CACHE;
  c.heads_q = c.heads_kv = 1;
  c.sq.assign(static_cast<size_t>(batch), rows);
  c.sk.assign(static_cast<size_t>(batch), 1);
  c.num_splits = 1;
  return c;
}

// `d` run on the library's choice, then on every other kernel that reads it: check(result,
// what) after each.
template <class Check>
void on_every_e4m3_kernel(Gpu const& gpu, FeatureData const& d, int dim, Check&& check) {
  int found = 0;
  std::vector<fa_kernel_config> const kernels = e4m3_kernels(gpu, d, dim, &found);
  for (size_t run = 0; run <= kernels.size(); ++run) {
    FeatureData e = d;
    run_plan(gpu, e, run == 0 ? nullptr : &kernels[run - 1]);
    check(e, run == 0 ? std::string("the choice") : name_of(kernels[run - 1]));
  }
}

}  // namespace

TEST_CASE("an e4m3 cache reads every byte exactly: K through the LSE, V through O") {
  // Query row i of a sequence is one-hot at column i against one cached key, so its LSE is
  // softmax_scale * k_descale * k[i] and its output v_descale * V, with descales that are
  // powers of two: the GPU's decode of each of the 254 finite e4m3 values (subnormals
  // included, which random inputs of magnitude >= 1/64 never hold) shows exactly.
  Gpu gpu;
  for (auto [dtype, dim] : e4m3_shapes()) {
    int64_t const batch = (256 + dim - 1) / dim;
    FeatureCase const c = one_key_case(dtype, dim, batch, dim);
    FeatureData d = fa_test::make_feature_data(c, 9);
    auto byte_of = [&](int64_t b, int64_t i) {
      int64_t const x = (b * dim + i) % 256;
      return static_cast<uint8_t>(x == 0x7f || x == 0xff ? 0 : x);  // NaN bytes: not finite
    };
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t i = 0; i < dim; ++i) {
        d.k[static_cast<size_t>(d.k_index(b, 0, 0) + i)] = byte_of(b, i);
        d.v[static_cast<size_t>(d.v_index(b, 0, 0) + i)] = byte_of(b, i);
        for (int64_t j = 0; j < dim; ++j) {
          fa_test::store_elem(dtype, d.q.data(), d.q_index(b, i, 0) + j, i == j ? 1.0 : 0.0);
        }
      }
    }
    d.k_descale = {0.5f};
    d.v_descale = {2.0f};
    double const scale = c.effective_scale();
    // The choice, then every other kernel that reads the problem (both families' e4m3 tiles).
    on_every_e4m3_kernel(gpu, d, dim, [&](FeatureData const& e, std::string const& what) {
      int wrong_k = 0, wrong_v = 0;
      for (int64_t b = 0; b < batch; ++b) {
        for (int64_t i = 0; i < dim; ++i) {
          double const k = 0.5 * fa_test::e4m3_bits_to_double(byte_of(b, i));
          double const lse = e.lse[static_cast<size_t>(e.lse_index(b, 0, i))];
          if (std::fabs(lse - static_cast<float>(scale) * k) > 1e-6 * std::max(1.0, std::fabs(k))) {
            if (wrong_k++ < 4) MESSAGE("k byte " << int(byte_of(b, i)) << ": lse " << lse);
          }
          for (int64_t j = 0; j < dim; ++j) {
            double const want = 2.0 * fa_test::e4m3_bits_to_double(byte_of(b, j));
            double const got = fa_test::load_elem(dtype, e.o.data(), e.o_index(b, i, 0) + j);
            if (got != want && wrong_v++ < 4) {
              MESSAGE("v byte " << int(byte_of(b, j)) << ": o " << got << ", want " << want);
            }
          }
        }
      }
      INFO("dtype " << dtype << " d " << dim << ", " << what);
      CHECK(wrong_k == 0);
      CHECK(wrong_v == 0);
    });
  }
}

TEST_CASE("16-bit queries reach an e4m3 cache's scores exactly: q through the LSE") {
  // Sequence b holds one key, one-hot at column b (the e4m3 byte of 1.0), so query row i's LSE
  // is softmax_scale * k_descale * q[i][b]. The rows' values take random 7-bit mantissas and
  // magnitudes from their row's largest down to 2^-9 of it, times a power of two per row: the
  // range in which the sm90 kernels that multiply K's bytes as loaded (bf16 queries at d 128 and
  // 256) hold a query row exactly as two e4m3 rows, and the mma.sync tiles and fp16 queries as
  // fp16. A lost low part, or one row's factor applied to another, shows in the LSE. 192 rows a
  // sequence: both consumer warpgroups of a 128-row tile, and half of the next. One row holds an
  // infinity at its checked column: its LSE is not finite, and no other row's changes.
  Gpu gpu;
  for (auto [dtype, dim] : e4m3_shapes()) {
    int64_t const rows = 192;
    FeatureCase const c = one_key_case(dtype, dim, dim, rows);
    FeatureData d = fa_test::make_feature_data(c, 41);
    std::mt19937_64 rng(4100 + dim);
    for (int64_t b = 0; b < dim; ++b) {
      for (int64_t j = 0; j < dim; ++j) {
        d.k[static_cast<size_t>(d.k_index(b, 0, 0) + j)] = j == b ? 0x38 : 0;  // 1.0
      }
      for (int64_t i = 0; i < rows; ++i) {
        double const row_factor = std::ldexp(1.0, static_cast<int>((b * rows + i) % 7) - 3);
        for (int64_t j = 0; j < dim; ++j) {
          uint64_t const r = rng();
          double const x = (1.0 + static_cast<double>(r % 128) / 128.0) *
                           std::ldexp(1.0, -static_cast<int>((r >> 7) % 9)) * row_factor;
          fa_test::store_elem(dtype, d.q.data(), d.q_index(b, i, 0) + j, (r >> 40) & 1 ? -x : x);
        }
      }
    }
    int64_t const inf_b = 1, inf_i = 70;  // warpgroup 1's rows of the first tile
    fa_test::store_elem(dtype, d.q.data(), d.q_index(inf_b, inf_i, 0) + inf_b,
                        std::numeric_limits<double>::infinity());
    d.k_descale = {0.5f};
    double const scale = c.effective_scale();
    on_every_e4m3_kernel(gpu, d, dim, [&](FeatureData const& e, std::string const& what) {
      int wrong = 0;
      for (int64_t b = 0; b < dim; ++b) {
        for (int64_t i = 0; i < rows; ++i) {
          double const q = fa_test::load_elem(dtype, d.q.data(), d.q_index(b, i, 0) + b);
          double const want = scale * 0.5 * q;
          double const lse = e.lse[static_cast<size_t>(e.lse_index(b, 0, i))];
          bool const ok = b == inf_b && i == inf_i
                              ? !std::isfinite(lse)
                              : std::fabs(lse - want) <= 1e-6 * std::max(1.0, std::fabs(want));
          if (!ok && wrong++ < 4) {
            MESSAGE("sequence " << b << " row " << i << ": lse " << lse << ", want " << want);
          }
        }
      }
      INFO("dtype " << dtype << " d " << dim << ", " << what);
      CHECK(wrong == 0);
    });
  }
}

TEST_CASE("e4m3 caches with 16-bit queries match the float64 reference on the choice and every kernel that reads them") {
  Gpu gpu;
  uint64_t seed = 7000;
  int n = 0, pinned = 0;
  int const step = sample_step();
  int index = 0;
  for (auto [dtype, dim] : e4m3_shapes()) {
    int kernels_found = 0;
    for (FeatureCase const& c : e4m3_cache_cases(dtype, dim)) {
      if (index++ % step != 0) continue;
      FeatureData d = fa_test::make_feature_data(c, ++seed);
      INFO(fa_test::describe(c));
      int found = 0;
      std::vector<fa_kernel_config> const kernels = e4m3_kernels(gpu, d, dim, &found);
      kernels_found = std::max(kernels_found, found);
      fa_test::FeatureReference const reference = fa_test::feature_reference(d);
      run_plan(gpu, d, nullptr);
      check_result(d, "choice", reference);
      ++n;
      for (fa_kernel_config const& k : kernels) {
        FeatureData e = fa_test::make_feature_data(c, seed);
        run_plan(gpu, e, &k);
        check_result(e, "kernel (" + std::to_string(k.d_head) + ", " + std::to_string(k.B_r) +
                            ", " + std::to_string(k.B_c) + ")", reference);
        ++pinned;
      }
    }
    INFO("dtype " << dtype << " d " << dim);
    CHECK(kernels_found >= 1);  // every built 16-bit shape reads e4m3 caches
  }
  MESSAGE(n << " e4m3-cache cases on the choice, " << pinned << " on other kernels that read them");
}

TEST_CASE("e4m3 NaN bytes in a cache's rows past a sequence's length never reach o") {
  // The rows after cache_seqlens (a contiguous cache's capacity, a page's tail) hold what the
  // caller left there: NaN bytes here. No kernel may let them into O (fp16 decodes them as
  // NaN, and P = 0 times NaN is NaN). Chunked prefill and decode, on the choice and on every
  // kernel that reads the problem.
  Gpu gpu;
  for (auto [dtype, dim] : e4m3_shapes()) {
    for (int64_t page : {0, 16}) {
      for (int64_t sq : {64, 1}) {
        FeatureCase c = e4m3_case(dtype, dim);
        c.heads_q = 4;
        c.heads_kv = 2;
        c.layout = page == 0 ? FA_LAYOUT_KV_CACHE : FA_LAYOUT_PAGED_KV;
        c.page_size = page;
        c.sq = {sq, sq};
        c.sk = {177, 90};
        c.capacity_extra = 100;
        c.causal = true;
        c.num_splits = 1;
        FeatureData d = fa_test::make_feature_data(c, 17);
        for (int64_t b = 0; b < 2; ++b) {
          // A contiguous sequence's rows up to the capacity; a paged one's last page's tail
          // (the table's padding entries may name other sequences' pages).
          int64_t const sk = c.sk[static_cast<size_t>(b)];
          int64_t const rows = page == 0 ? c.capacity() : (sk + page - 1) / page * page;
          for (int64_t j = sk; j < rows; ++j) {
            for (int64_t g = 0; g < c.heads_kv; ++g) {
              for (int64_t i = 0; i < dim; ++i) {
                d.k[static_cast<size_t>(d.k_index(b, j, g) + i)] = 0x7f;
                d.v[static_cast<size_t>(d.v_index(b, j, g) + i)] = 0xff;
              }
            }
          }
        }
        fa_test::FeatureReference const reference = fa_test::feature_reference(d);
        int found = 0;
        std::vector<fa_kernel_config> kernels = e4m3_kernels(gpu, d, dim, &found);
        for (size_t run = 0; run <= kernels.size(); ++run) {
          FeatureData e = d;
          run_plan(gpu, e, run == 0 ? nullptr : &kernels[run - 1]);
          check_result(e, run == 0 ? std::string("choice") : name_of(kernels[run - 1]), reference);
        }
      }
    }
  }
}

TEST_CASE("bf16 queries far outside fp16's range read an e4m3 cache exactly as in range") {
  // Both families run bf16 queries against an e4m3 cache in fp16, each query row times a
  // power of two that puts its largest magnitude just under fp16's 65504 (q_bf16_to_fp16).
  // Queries of magnitude ~2^20 (past fp16's range) and ~2^-30 (under its smallest subnormal),
  // with the scale divided by the same factor, are attention at ordinary magnitudes: a kernel
  // that converted without scaling rows, or scaled the scores wrongly, would give inf or zero
  // scores. Each row also carries its own power of two, 2^-2 to 2^2 (row r: 2^(r % 5 - 2)),
  // so the rows' exponents differ and a row scored with another row's factor is off 2-16x.
  Gpu gpu;
  for (auto [dtype, dim] : e4m3_shapes()) {
    if (dtype != FA_DTYPE_BF16) continue;
    for (double factor : {0x1p20, 0x1p-30}) {
      for (int64_t sq : {177, 1}) {
        FeatureCase c = e4m3_case(dtype, dim);
        c.layout = FA_LAYOUT_KV_CACHE;
        c.heads_q = sq == 1 ? 8 : 4;  // decode: 4 query heads per K/V head, packed
        c.heads_kv = 2;
        c.sq = {sq, sq};
        c.sk = {1013, 300};
        c.causal = true;
        c.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dim)) / factor);
        FeatureData d = fa_test::make_feature_data(c, 23);
        for (int64_t i = 0; i < static_cast<int64_t>(d.q.size()) / 2; ++i) {
          double const x = fa_test::load_elem(dtype, d.q.data(), i);
          double const row_factor = std::ldexp(1.0, static_cast<int>(i / dim % 5) - 2);
          fa_test::store_elem(dtype, d.q.data(), i, x * factor * row_factor);
        }
        fa_test::FeatureReference const reference = fa_test::feature_reference(d);
        int found = 0;
        std::vector<fa_kernel_config> kernels = e4m3_kernels(gpu, d, dim, &found);
        CHECK(found >= 1);
        for (size_t run = 0; run <= kernels.size(); ++run) {
          FeatureData e = d;
          run_plan(gpu, e, run == 0 ? nullptr : &kernels[run - 1]);
          INFO("q times " << factor);
          check_result(e, run == 0 ? std::string("choice") : name_of(kernels[run - 1]), reference);
        }
      }
    }
  }
}

namespace {

// A chunked prefill of 512 rows against `keys` keys of an e4m3 cache (contiguous, or in pages of
// `page` rows), `dtype` queries, 8 / 2 heads, causal.
FeatureCase e4m3_prefill(int dtype, int dim, int64_t keys, int64_t page) {
  FeatureCase c;
  c.dtype = dtype;
  c.kv_dtype = FA_DTYPE_E4M3;
  c.head_dim = dim;
  c.heads_q = 8;
  c.heads_kv = 2;
  c.layout = page == 0 ? FA_LAYOUT_KV_CACHE : FA_LAYOUT_PAGED_KV;
  c.page_size = page;
  c.sq = {512};
  c.sk = {keys};
  c.causal = true;
  return c;
}

}  // namespace

TEST_CASE("on Hopper an e4m3 chunked prefill at head dims 64, 128 and 256 runs on the sm90 family") {
  // The table's picks for chunked prefill refuse e4m3 caches (not fp8_kv_tile kernels); its
  // fallback rows name mma.sync tiles, which the choice skips for them, so the largest runnable
  // tile, the sm90 e4m3 one, takes the problem (choice.cpp).
  Gpu gpu;
  int major = 0;
  CUDA_OK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  int checked = 0;
  bool built_any = false;
  for (auto [dtype, dim] : e4m3_shapes()) {
    // Built: an sm90 kernel of this shape that reads e4m3 caches (rules::fp8_kv_tile's; a plan
    // pinned to it is made for one of these problems), not just any sm90 kernel of it.
    bool built = false;
    if (major == 9) {
      FeatureData const probe = fa_test::make_feature_data(e4m3_prefill(dtype, dim, 512, 0), 5);
      built = any_sm90_kernel(dtype, dim, [&](fa_kernel_config const& k) {
        fa_plan_t* plan = nullptr;
        if (fa_plan_create_with_kernel(gpu.ctx, &probe.config, &k, &plan) != FA_STATUS_SUCCESS)
          return false;
        fa_plan_destroy(plan);
        return true;
      });
    }
    // d 192 reads e4m3 caches on the mma.sync family (config.hpp's fp8_kv_tile says why).
    built_any |= built && dim != 192;
    if (!built || dim == 192) continue;
    for (int64_t keys : {512, 1024, 2048, 16384}) {
      for (int64_t page : {0, 16}) {
        fa_kernel_config const k = planned_kernel(gpu, e4m3_prefill(dtype, dim, keys, page), 5);
        INFO("dtype " << dtype << " d " << dim << " keys " << keys << " page " << page << ": "
                      << name_of(k));
        CHECK(k.family == FA_FAMILY_SM90);
        ++checked;
      }
    }
  }
  // A build without sm90 kernels of d 64, 128 or 256 (FA_HEAD_DIMS=192, say) has nothing to check.
  if (major == 9 && built_any) CHECK(checked > 0);
  MESSAGE(checked << " e4m3 chunked prefills checked for the sm90 family"
                  << std::string(built_any ? ""
                                           : " (skipped: no sm90 kernel of d 64, 128 or 256 built)"));
}

TEST_CASE("malformed index tensors on the GPU stay in bounds") {
  Gpu gpu;
  for (auto [dtype, dim] : compiled_shapes()) {
    FeatureCase v;
    v.dtype = dtype;
    v.head_dim = dim;
    v.layout = FA_LAYOUT_VARLEN;
    v.sq = {30, 20};
    v.sk = {40, 10};
    FeatureData d = fa_test::make_feature_data(v, 1);
    d.cu_q = {-50, 1000000, 7};
    d.cu_k = {7, -3, 2000000000};
    {
      DeviceCase dev(d);
      fa_run_args args = dev.args(d);
      CHECK(fa_forward_ex(gpu.ctx, &d.config, dev.q.get(), dev.k.get(), dev.v.get(), dev.o.get(),
                          static_cast<float*>(dev.lse.get()), &args, nullptr) == FA_STATUS_SUCCESS);
      CUDA_OK(cudaDeviceSynchronize());
    }
    // 16-bit and e4m3 caches (the e4m3 tiles copy their bytes through their own loads).
    for (int kv_dtype : {0, int{FA_DTYPE_E4M3}}) {
    FeatureCase p;
    p.dtype = dtype;
    p.kv_dtype = kv_dtype;
    p.descale = kv_dtype != 0 ? FA_DESCALE_PER_HEAD_KV : -1;
    p.head_dim = dim;
    p.layout = FA_LAYOUT_PAGED_KV;
    p.page_size = 16;
    p.sq = {3, 3};
    p.sk = {100, 20};
    p.num_splits = 2;
    FeatureData e = fa_test::make_feature_data(p, 2);
    for (size_t i = 0; i < e.block_table.size(); ++i) {
      e.block_table[i] = i % 2 == 0 ? -7 : 1 << 30;
    }
    e.cache_seqlens = {1 << 30, -5};
    {
      DeviceCase dev(e);
      PlannedRun run(gpu, e);
      fa_run_args args = run.args(dev, e);
      CHECK(fa_plan_run_ex(run.plan, dev.q.get(), dev.k.get(), dev.v.get(), dev.o.get(),
                           static_cast<float*>(dev.lse.get()), &args, nullptr) == FA_STATUS_SUCCESS);
      CUDA_OK(cudaDeviceSynchronize());
    }
    }
  }
}

TEST_CASE("one captured decode step replays with new lengths and page tables") {
  Gpu gpu;
  for (auto [dtype, dim] : compiled_shapes()) {
    FeatureCase c;
    c.dtype = dtype;
    c.head_dim = dim;
    c.layout = FA_LAYOUT_PAGED_KV;
    c.page_size = 16;
    c.heads_q = 8;
    c.heads_kv = 2;
    c.sq = {1, 1, 1};
    c.sk = {900, 300, 17};
    c.capacity_extra = 200;
    c.alibi = FA_ALIBI_PER_HEAD;
    c.sinks = true;
    FeatureData d = fa_test::make_feature_data(c, 77);
    DeviceCase dev(d);
    PlannedRun run(gpu, d);
    fa_run_args args = run.args(dev, d);
    cudaStream_t stream;
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaGraph_t graph;
    CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    fa_status const captured =
        fa_plan_run_ex(run.plan, dev.q.get(), dev.k.get(), dev.v.get(), dev.o.get(),
                       static_cast<float*>(dev.lse.get()), &args, reinterpret_cast<fa_stream_t>(stream));
    CUDA_OK(cudaStreamEndCapture(stream, &graph));
    REQUIRE(captured == FA_STATUS_SUCCESS);
    cudaGraphExec_t exec;
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    // Three decode steps: each grows the sequences and reshuffles their pages, in place.
    for (int step = 0; step < 3; ++step) {
      FeatureCase next = c;
      next.sk = {900 + 61 * step, 300 + 7 * step, 17 + 100 * step};
      next.capacity_extra = c.capacity() - next.max_sk();  // same buffers, same config
      FeatureData fresh = fa_test::make_feature_data(next, 78 + static_cast<uint64_t>(step));
      fresh.q = d.q;  // the tensors stay where the graph captured them; only their contents change
      dev.q.upload(fresh.q);
      dev.k.upload(fresh.k);
      dev.v.upload(fresh.v);
      dev.cache.upload(fresh.cache_seqlens);
      dev.table.upload(fresh.block_table);
      dev.slopes.upload(fresh.slopes);
      dev.sinks.upload(fresh.sinks);
      dev.o.upload(fresh.o);
      CUDA_OK(cudaGraphLaunch(exec, stream));
      CUDA_OK(cudaStreamSynchronize(stream));
      dev.fetch(fresh);
      check_result(fresh, "graph replay step " + std::to_string(step));
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
  }
}

TEST_CASE("calls back to back read the previous call's output: each kernel waits for the one before") {
  // Sm_90 launches every kernel as a programmatic dependent of the stream's previous one
  // (launch.cpp): it may be placed early and must wait on the device before reading. Here each
  // call's q is the previous call's o, once with no synchronisation between calls and once with
  // the host waiting after each: a kernel that read q before its producer finished would give
  // other bytes. Decode on pages (split three ways: split kernel, combine, next split kernel)
  // and a causal prefill (one kernel per call, the sm90 family on Hopper).
  Gpu gpu;
  for (auto [dtype, dim] : compiled_shapes()) {
    for (bool decode : {true, false}) {
      FeatureCase c;
      c.dtype = dtype;
      c.head_dim = dim;
      c.heads_q = c.heads_kv = 4;
      if (decode) {
        c.layout = FA_LAYOUT_PAGED_KV;
        c.page_size = 16;
        c.sq = {1, 1};
        c.sk = {900, 300};
        c.num_splits = 3;
      } else {
        c.sq = {512, 512};
        c.sk = {512, 512};
        c.causal = true;
      }
      FeatureData d = fa_test::make_feature_data(c, 91);
      DeviceCase dev(d);
      PlannedRun run(gpu, d);
      fa_run_args args = run.args(dev, d);
      // q and o (the same shape and strides here) trade places after every call.
      std::vector<std::vector<unsigned char>> results;
      for (bool wait : {false, true}) {
        DeviceCopy x(d.q), y(d.o);
        void* in = x.get();
        void* out = y.get();
        for (int step = 0; step < 8; ++step) {
          REQUIRE(fa_plan_run_ex(run.plan, in, dev.k.get(), dev.v.get(), out, nullptr, &args,
                                 nullptr) == FA_STATUS_SUCCESS);
          if (wait) CUDA_OK(cudaDeviceSynchronize());
          std::swap(in, out);
        }
        CUDA_OK(cudaDeviceSynchronize());
        std::vector<unsigned char> last(d.o.size());
        CUDA_OK(cudaMemcpy(last.data(), in, last.size(), cudaMemcpyDeviceToHost));
        results.push_back(last);
      }
      INFO("dtype " << dtype << " d " << dim << (decode ? " decode" : " prefill"));
      CHECK(results[0] == results[1]);
    }
  }
}

TEST_CASE("merge_states on the GPU matches the CPU backend") {
  Gpu gpu;
  fa_context_t* cpu = nullptr;
  REQUIRE(fa_context_create(FA_DEVICE_CPU, &cpu) == FA_STATUS_SUCCESS);
  for (int dtype : {FA_DTYPE_FP16, FA_DTYPE_BF16}) {
    fa_merge_config m;
    REQUIRE(fa_merge_config_init(&m) == FA_STATUS_SUCCESS);
    m.dtype = dtype;
    m.batch = 3;
    m.seqlen = 17;
    m.heads = 5;
    m.head_dim = 72;
    int64_t const n = m.batch * m.seqlen * m.heads * m.head_dim, rows = m.batch * m.seqlen * m.heads;
    std::vector<unsigned char> oa = fa_test::random_bytes(dtype, n, 1), ob = fa_test::random_bytes(dtype, n, 2);
    std::vector<float> la(static_cast<size_t>(rows)), lb(static_cast<size_t>(rows));
    for (int64_t i = 0; i < rows; ++i) {
      la[static_cast<size_t>(i)] = i % 7 == 0 ? -INFINITY : 0.1f * static_cast<float>(i % 11);
      lb[static_cast<size_t>(i)] = i % 5 == 0 ? -INFINITY : 0.3f - 0.05f * static_cast<float>(i % 13);
    }
    std::vector<unsigned char> o_cpu(oa.size()), o_gpu(oa.size());
    std::vector<float> l_cpu(la.size()), l_gpu(la.size());
    REQUIRE(fa_merge_states(cpu, &m, oa.data(), la.data(), ob.data(), lb.data(), o_cpu.data(),
                            l_cpu.data(), nullptr) == FA_STATUS_SUCCESS);
    DeviceCopy da(oa), db(ob), dla(la), dlb(lb), doo(o_gpu), dl(l_gpu);
    REQUIRE(fa_merge_states(gpu.ctx, &m, da.get(), static_cast<float*>(dla.get()), db.get(),
                            static_cast<float*>(dlb.get()), doo.get(), static_cast<float*>(dl.get()),
                            nullptr) == FA_STATUS_SUCCESS);
    CUDA_OK(cudaDeviceSynchronize());
    doo.fetch(o_gpu);
    dl.fetch(l_gpu);
    double worst = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      worst = std::max(worst, std::fabs(fa_test::load_elem(dtype, o_gpu.data(), i) -
                                        fa_test::load_elem(dtype, o_cpu.data(), i)));
    }
    // One output rounding apart at most (|o| <= 1): an ulp of the dtype.
    CHECK(worst <= (dtype == FA_DTYPE_BF16 ? 8e-3 : 1e-3));
    for (size_t i = 0; i < l_cpu.size(); ++i) {
      if (std::isinf(l_cpu[i])) {
        CHECK(l_gpu[i] == l_cpu[i]);
      } else {
        CHECK(std::fabs(l_gpu[i] - l_cpu[i]) <= 1e-5f);
      }
    }
  }
  fa_context_destroy(cpu);
}

TEST_CASE("merge_states on the GPU: an LSE of NaN or +inf on either side makes the row NaN") {
  // fmaxf drops a NaN: a NaN side beside an empty one (-inf) merged to o = 0, lse = -inf, and
  // beside a finite one to lse = -inf (the CPU backend's test has the same grid).
  Gpu gpu;
  float const inf = std::numeric_limits<float>::infinity();
  float const nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> la, lb;
  for (float bad : {nan, inf}) {
    for (float other : {-inf, 0.5f, inf, nan}) {
      la.push_back(bad);
      lb.push_back(other);
      la.push_back(other);
      lb.push_back(bad);
    }
  }
  for (int dtype : {FA_DTYPE_FP16, FA_DTYPE_BF16}) {
    fa_merge_config m;
    REQUIRE(fa_merge_config_init(&m) == FA_STATUS_SUCCESS);
    m.dtype = dtype;
    m.seqlen = static_cast<int64_t>(la.size());
    m.head_dim = 8;
    int64_t const n = m.seqlen * m.head_dim;
    std::vector<unsigned char> oa = fa_test::random_bytes(dtype, n, 3), ob = fa_test::random_bytes(dtype, n, 4);
    std::vector<unsigned char> o(oa.size());
    std::vector<float> l(la.size(), 7.0f);
    DeviceCopy da(oa), db(ob), dla(la), dlb(lb), doo(o), dl(l);
    REQUIRE(fa_merge_states(gpu.ctx, &m, da.get(), static_cast<float*>(dla.get()), db.get(),
                            static_cast<float*>(dlb.get()), doo.get(), static_cast<float*>(dl.get()),
                            nullptr) == FA_STATUS_SUCCESS);
    CUDA_OK(cudaDeviceSynchronize());
    doo.fetch(o);
    dl.fetch(l);
    for (int64_t i = 0; i < m.seqlen; ++i) {
      CAPTURE(dtype);
      CAPTURE(la[static_cast<size_t>(i)]);
      CAPTURE(lb[static_cast<size_t>(i)]);
      CHECK(std::isnan(l[static_cast<size_t>(i)]));
      for (int64_t c = 0; c < m.head_dim; ++c) {
        CHECK(std::isnan(fa_test::load_elem(dtype, o.data(), i * m.head_dim + c)));
      }
    }
  }
}

TEST_CASE("a NaN score makes its row NaN on every kernel, split or not; the other rows stay finite") {
  // The header's contract, which the CPU backend keeps: a NaN among a row's visible scores makes
  // its o and lse NaN. A running maximum or a split combine that drops a NaN (fmaxf) reads a
  // block of NaN scores as no keys. Each case also runs against the float64 reference (which
  // counts a NaN on one side only as wrong).
  Gpu gpu;
  double const nan = std::numeric_limits<double>::quiet_NaN();
  int kernels = 0;
  uint64_t seed = 15000;
  for (size_t i = 0; i < fa_kernel_count(); i += static_cast<size_t>(sample_step())) {
    fa_kernel_config k;
    fa_kernel_config_init(&k);
    REQUIRE(fa_kernel_get(i, &k) == FA_STATUS_SUCCESS);
    if (k.dtype == FA_DTYPE_E4M3) continue;
    char name[128];
    fa_kernel_config_name(&k, name, sizeof name, nullptr);
    int const dv = fa_test::kernel_value_dim(gpu.ctx, k);
    FeatureCase c;
    c.dtype = k.dtype;
    c.head_dim = k.d_head;
    c.head_dim_v = dv == k.d_head ? 0 : dv;
    c.layout = FA_LAYOUT_KV_CACHE;
    c.heads_q = 4;
    c.heads_kv = 2;
    for (int splits : {1, 3}) {
      c.num_splits = splits;
      // Every key of K/V head 0 but key 0 NaN, so whichever block a kernel or a split takes
      // first holds NaN scores only: heads 0 and 1 NaN, heads 2 and 3 finite.
      c.sq = {3};
      c.sk = {400};
      FeatureData d = fa_test::make_feature_data(c, ++seed);
      for (int64_t j = 1; j < 400; ++j) {
        fa_test::store_elem(c.dtype, d.k.data(), d.k_index(0, j, 0), nan);
      }
      run_plan(gpu, d, &k);
      check_result(d, name);
      for (int64_t h = 0; h < 4; ++h) {
        for (int64_t r = 0; r < 3; ++r) {
          INFO(name << " splits " << splits << " head " << h << " row " << r);
          float const lse = d.lse[static_cast<size_t>(d.lse_index(0, h, r))];
          double const o = fa_test::load_elem(c.dtype, d.o.data(), d.o_index(0, r, h));
          CHECK(std::isnan(lse) == (h < 2));
          CHECK(std::isnan(o) == (h < 2));
        }
      }
    }
    // Causal, 3 queries against 3 keys with key 1 NaN: row 0 sees key 0 alone and stays finite,
    // rows 1 and 2 are NaN.
    c.sk = {3};
    c.causal = true;
    c.num_splits = 1;
    FeatureData d = fa_test::make_feature_data(c, ++seed);
    fa_test::store_elem(c.dtype, d.k.data(), d.k_index(0, 1, 0), nan);
    run_plan(gpu, d, &k);
    check_result(d, name);
    for (int64_t r = 0; r < 3; ++r) {
      INFO(name << " causal row " << r);
      CHECK(std::isnan(d.lse[static_cast<size_t>(d.lse_index(0, 0, r))]) == (r > 0));
    }
    ++kernels;
  }
  MESSAGE(kernels << " kernels with NaN scores");
}

// ---- FP8 (e4m3 Q, K and V) on the sm90 family's FP8 kernels ----------------------------------

namespace {

// The FP8 kernels round P to e4m3 for P V, so their O is bounded against the float64 reference
// by twice the error of a naive FP8 reference (normalised P rounded to e4m3, exact otherwise)
// plus O's own rounding to its 16-bit type. The scores are exact products of e4m3 values, but
// Hopper's tensor cores sum FP8 products with fewer mantissa bits than fp32 (LSE errors up to
// 0.0085 here at d 256, where the 16-bit kernels stay under 2e-3): the LSE bound adds
// fp8_sums_bound over the q and k descales.
void check_fp8(FeatureData const& d, std::string const& what, fa_test::FeatureReference const& exact,
               double naive_error) {
  double const lse_bound = kLseBound + fp8_sums_bound(d, {&d.q_descale, &d.k_descale}, 0.0);
  fa_test::FeatureErrors const e = fa_test::compare_features(d, d.o.data(), d.lse.data(), exact);
  double o_max = 0.0;
  for (double x : exact.o) {
    if (std::isfinite(x)) o_max = std::max(o_max, std::fabs(x));
  }
  double const rounding = o_max * (d.c.o_type() == FA_DTYPE_BF16 ? 0x1p-8 : 0x1p-11);
  INFO(what << " " << fa_test::describe(d.c) << " | o max err " << e.o_max << " (naive FP8 "
            << naive_error << ", |o| up to " << o_max << "), lse max err " << e.lse_max
            << " (bound " << lse_bound << "), bad " << e.bad);
  CHECK(e.bad == 0);
  CHECK(e.written_past == 0);
  CHECK(e.o_max <= 2.0 * naive_error + rounding + 1e-3);
  CHECK(e.lse_max <= lse_bound);
}

// Dense causal and not at awkward lengths (1, 17, 177, 1013 against 1013, 17, 1024, 1), GQA 1-8,
// varlen, contiguous and paged caches (pages of 16, 64 and 256, shuffled) for decode and
// chunked prefill, a head dim 16 below the kernel's and a value head dim below it, the score
// transforms, a window and sinks split three ways, both output types and the three descale forms.
std::vector<FeatureCase> fp8_cases(int64_t dim) {
  std::vector<FeatureCase> cases;
  int const descales[] = {-1, FA_DESCALE_PER_TENSOR, FA_DESCALE_PER_HEAD_KV};
  int64_t const gqa[][2] = {{4, 4}, {4, 2}, {8, 2}, {8, 1}};
  int n = 0;
  FeatureCase base;
  base.dtype = FA_DTYPE_E4M3;
  base.kv_dtype = FA_DTYPE_E4M3;
  base.head_dim = dim;
  auto add = [&](FeatureCase c) {
    c.descale = descales[n % 3];
    if (c.out_dtype == 0) c.out_dtype = n % 2 == 0 ? FA_DTYPE_BF16 : FA_DTYPE_FP16;
    c.heads_q = c.heads_q == 0 ? gqa[n % 4][0] : c.heads_q;
    c.heads_kv = c.heads_kv == 0 ? gqa[n % 4][1] : c.heads_kv;
    ++n;
    cases.push_back(c);
  };
  // Two sequences, or one where both lengths pass 1000 (the float64 references' cost).
  int64_t const lengths[][2] = {{1, 1013}, {17, 17}, {177, 1024}, {1013, 1}, {1013, 1013}};
  for (auto [sq, sk] : lengths) {
    for (bool causal : {false, true}) {
      FeatureCase c = base;
      c.heads_q = c.heads_kv = 0;
      c.sq = sq * sk > 1000000 ? std::vector<int64_t>{sq} : std::vector<int64_t>{sq, sq};
      c.sk = sq * sk > 1000000 ? std::vector<int64_t>{sk} : std::vector<int64_t>{sk, sk};
      c.causal = causal;
      add(c);
    }
  }
  {
    FeatureCase c = base;  // varlen, GQA 2, with an empty sequence
    c.layout = FA_LAYOUT_VARLEN;
    c.heads_q = 4;
    c.heads_kv = 2;
    c.sq = {1, 17, 0, 177};
    c.sk = {17, 177, 3, 300};
    c.causal = true;
    add(c);
  }
  for (int64_t page : {0, 16, 64, 256}) {
    FeatureCase c = base;  // chunked prefill and decode against a cache
    c.layout = page == 0 ? FA_LAYOUT_KV_CACHE : FA_LAYOUT_PAGED_KV;
    c.page_size = page;
    c.heads_q = 8;
    c.heads_kv = 2;
    c.sq = {177, 177};
    c.sk = {500, 1013};
    c.causal = true;
    add(c);
    c.sq = {1, 1, 1};
    c.sk = {1, 300, 1013};
    c.heads_q = 0;
    c.heads_kv = 0;
    add(c);
  }
  {
    FeatureCase c = all_transforms(base);
    add(c);
    c.softcap = 0.0f;  // sinks and a window without transforms: the plain scale
    c.alibi = FA_ALIBI_NONE;
    c.layout = FA_LAYOUT_DENSE;
    c.sk = {300, 300};
    c.num_splits = 0;
    add(c);
  }
  {
    FeatureCase c = base;  // head dims below the kernel's
    c.heads_q = 4;
    c.heads_kv = 2;
    c.sq = {177};
    c.sk = {300};
    c.head_dim = dim - 16;
    add(c);
    c.head_dim = dim;
    c.head_dim_v = dim / 2;
    c.causal = true;
    add(c);
  }
  {
    // V transposed ahead of the run (dense, 24 query tiles per V block: sm90/family.cpp's
    // images_pay): keys ending mid-block, then V in fewer columns than the kernel's (zeros past
    // them in the images).
    FeatureCase c = base;
    c.heads_q = 8;
    c.heads_kv = 1;
    c.sq = {300};
    c.sk = {1013};
    add(c);
    c.head_dim_v = dim - 16;
    add(c);
    // The same in a varlen batch (16 query tiles per V block on average): sequences starting
    // mid-block in the packed rows, an empty one, and blocks past a short sequence's keys.
    c.layout = FA_LAYOUT_VARLEN;
    c.head_dim_v = 0;
    c.sq = {300, 17, 0, 500};
    c.sk = {1013, 40, 3, 600};
    add(c);
  }
  return cases;
}

// The registered FP8 kernels of head dim `dim` that run d's problem, the choice first.
std::vector<fa_kernel_config> fp8_kernels(Gpu const& gpu, FeatureData const& d, int dim) {
  fa_plan_t* plan = nullptr;
  REQUIRE(fa_plan_create(gpu.ctx, &d.config, &plan) == FA_STATUS_SUCCESS);
  fa_kernel_config chosen;
  fa_kernel_config_init(&chosen);
  REQUIRE(fa_plan_kernel(plan, &chosen) == FA_STATUS_SUCCESS);
  fa_plan_destroy(plan);
  CHECK(chosen.dtype == FA_DTYPE_E4M3);
  std::vector<fa_kernel_config> out{chosen};
  for (size_t i = 0; i < fa_kernel_count(); ++i) {
    fa_kernel_config k;
    fa_kernel_config_init(&k);
    REQUIRE(fa_kernel_get(i, &k) == FA_STATUS_SUCCESS);
    if (k.dtype != FA_DTYPE_E4M3 || k.d_head != dim || name_of(k) == name_of(chosen)) continue;
    fa_plan_t* pinned = nullptr;
    if (fa_plan_create_with_kernel(gpu.ctx, &d.config, &k, &pinned) == FA_STATUS_SUCCESS) {
      out.push_back(k);
      fa_plan_destroy(pinned);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("e4m3 queries, keys and values on the FP8 kernels: within twice a naive FP8 reference's error") {
  Gpu gpu;
  uint64_t seed = 16000;
  int n = 0, runs = 0, image_runs = 0;
  int const step = sample_step();
  int index = 0;
  for (auto [dtype, dim] : compiled_shapes(true)) {
    for (FeatureCase const& c : fp8_cases(dim)) {
      if (index++ % step != 0) continue;
      FeatureData d = fa_test::make_feature_data(c, ++seed);
      INFO(fa_test::describe(c));
      fa_test::FeatureReference naive;
      fa_test::FeatureReference const exact = fa_test::feature_reference(d, &naive);
      double naive_error = 0.0;
      for (size_t i = 0; i < exact.o.size(); ++i) {
        if (std::isfinite(exact.o[i])) naive_error = std::max(naive_error, std::fabs(naive.o[i] - exact.o[i]));
      }
      for (fa_kernel_config const& k : fp8_kernels(gpu, d, dim)) {
        // With the plan's workspace (a dense problem's V transposed ahead of the run where the
        // schedule finds it pays) and without (the kernel transposes V itself).
        for (bool workspace : {true, false}) {
          if (!workspace && c.num_splits > 1) continue;  // a forced split needs its workspace
          FeatureData e = fa_test::make_feature_data(c, seed);
          size_t bytes = 0;
          int const splits = run_plan(gpu, e, &k, workspace, &bytes);
          check_fp8(e, name_of(k) + (workspace ? " with" : " without") + " workspace", exact,
                    naive_error);
          image_runs += workspace && splits == 1 && bytes > 0 ? 1 : 0;
          ++runs;
        }
      }
      ++n;
    }
  }
  MESSAGE(n << " FP8 cases, " << runs << " kernel runs, " << image_runs
            << " of them on V's images");
  CHECK(n > 0);
  if (step == 1) CHECK(image_runs > 0);
}

TEST_CASE("e4m3 queries: the FP8 kernels' RMSE beside a naive FP8 reference's, on inputs with outliers") {
  // Random-normal Q, K and V (each tensor's values scaled into e4m3 by its descale) with 0.1% of
  // them of magnitude 10; the RMSE of O against the exact result of the unquantised inputs, ours
  // and a naive FP8 reference's (quantise, then compute with P rounded to e4m3), both reported;
  // ours must not be worse.
  Gpu gpu;
  for (auto [dtype, dim] : compiled_shapes(true)) {
    FeatureCase c;
    c.dtype = c.kv_dtype = FA_DTYPE_E4M3;
    c.out_dtype = FA_DTYPE_BF16;
    c.descale = FA_DESCALE_PER_TENSOR;
    c.head_dim = dim;
    c.heads_q = 8;
    c.heads_kv = 2;
    c.sq = {1013};
    c.sk = {1013};
    c.causal = true;
    FeatureData d = fa_test::make_feature_data(c, 17000 + dim);
    std::mt19937_64 rng(18000 + dim);
    std::normal_distribution<double> normal(0.0, 1.0);
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    // The unquantised values, then their e4m3 bytes at descale amax / 448.
    auto fill = [&](std::vector<unsigned char>& bytes, std::vector<float>& descale) {
      std::vector<double> x(bytes.size());
      double amax = 0.0;
      for (double& v : x) {
        v = unit(rng) < 0.001 ? (unit(rng) < 0.5 ? -10.0 : 10.0) : normal(rng);
        amax = std::max(amax, std::fabs(v));
      }
      descale.assign(1, static_cast<float>(amax / 448.0));
      for (size_t i = 0; i < x.size(); ++i) {
        bytes[i] = fa_test::double_to_e4m3_bits(x[i] / descale[0]);
      }
      return x;
    };
    std::vector<double> const q = fill(d.q, d.q_descale), k = fill(d.k, d.k_descale),
                              v = fill(d.v, d.v_descale);
    // The exact result of the unquantised inputs: the float64 reference on a copy whose e4m3
    // bytes are replaced by those values (fp32 queries, keys and values, descales 1).
    FeatureCase u = c;
    u.dtype = u.kv_dtype = FA_DTYPE_FP32;
    u.out_dtype = 0;
    u.descale = -1;
    FeatureData exact_in = fa_test::make_feature_data(u, 1);
    for (size_t i = 0; i < q.size(); ++i) fa_test::store_elem(FA_DTYPE_FP32, exact_in.q.data(), int64_t(i), q[i]);
    for (size_t i = 0; i < k.size(); ++i) fa_test::store_elem(FA_DTYPE_FP32, exact_in.k.data(), int64_t(i), k[i]);
    for (size_t i = 0; i < v.size(); ++i) fa_test::store_elem(FA_DTYPE_FP32, exact_in.v.data(), int64_t(i), v[i]);
    fa_test::FeatureReference const exact = fa_test::feature_reference(exact_in);
    fa_test::FeatureReference naive;
    fa_test::feature_reference(d, &naive);
    run_plan(gpu, d, nullptr);
    double ours = 0.0, theirs = 0.0;
    for (size_t i = 0; i < exact.o.size(); ++i) {
      double const got = fa_test::load_elem(FA_DTYPE_BF16, d.o.data(), int64_t(i));
      ours += (got - exact.o[i]) * (got - exact.o[i]);
      theirs += (naive.o[i] - exact.o[i]) * (naive.o[i] - exact.o[i]);
    }
    ours = std::sqrt(ours / double(exact.o.size()));
    theirs = std::sqrt(theirs / double(exact.o.size()));
    MESSAGE("d " << dim << ": RMSE of O against the unquantised inputs: FP8 kernel " << ours
                 << ", naive FP8 reference " << theirs);
    CHECK(ours <= theirs);
  }
}

TEST_CASE("e4m3 queries on pages the FP8 kernels would gather are refused by name") {
  Gpu gpu;
  for (auto [dtype, dim] : compiled_shapes(true)) {
    FeatureCase c;
    c.dtype = c.kv_dtype = FA_DTYPE_E4M3;
    c.head_dim = dim;
    c.layout = FA_LAYOUT_PAGED_KV;
    c.page_size = 1;
    c.sq = {4};
    c.sk = {100};
    FeatureData d = fa_test::make_feature_data(c, 19000);
    fa_plan_t* plan = nullptr;
    CHECK(fa_plan_create(gpu.ctx, &d.config, &plan) == FA_STATUS_UNSUPPORTED);
    CHECK(std::string(fa_last_error_detail()).find("page_size = 1") != std::string::npos);
  }
}

TEST_CASE("e4m3 queries: persistent FP8 blocks walking many tiles give each sequence's result bit for bit") {
  // 4 sequences x 16 heads x 8 query tiles = 512 tiles: every persistent block walks several,
  // carrying its pipeline's stage and raw V slot phases and its Q buffer from tile to tile. Each
  // sequence alone (128 tiles, at most one per block on a 132-SM H100 or H200) must give the
  // same bytes: a tile's arithmetic does not depend on which block runs it.
  Gpu gpu;
  for (auto [dtype, dim] : compiled_shapes(true)) {
    for (int64_t page : {int64_t(0), int64_t(16)}) {
      for (bool causal : {false, true}) {
        FeatureCase c;
        c.dtype = c.kv_dtype = FA_DTYPE_E4M3;
        c.head_dim = dim;
        c.heads_q = 16;
        c.heads_kv = 4;
        c.causal = causal;
        c.descale = FA_DESCALE_PER_TENSOR;
        c.layout = page == 0 ? FA_LAYOUT_DENSE : FA_LAYOUT_PAGED_KV;
        c.page_size = page;
        c.capacity_extra = 0;
        c.sq = {1024, 1024, 1024, 1024};
        c.sk = page == 0 ? c.sq : std::vector<int64_t>{2048, 2048, 2048, 2048};
        FeatureData all = fa_test::make_feature_data(c, 21000 + dim + page);
        FeatureCase one = c;
        one.sq = {c.sq[0]};
        one.sk = {c.sk[0]};
        for (fa_kernel_config const& k : fp8_kernels(gpu, all, dim)) {
          FeatureData batch = all;
          run_plan(gpu, batch, &k);
          size_t const o_seq = batch.o.size() / 4, q_seq = all.q.size() / 4;
          for (size_t b = 0; b < 4; ++b) {
            FeatureData alone = fa_test::make_feature_data(one, 1);
            std::copy_n(all.q.begin() + b * q_seq, q_seq, alone.q.begin());
            if (page == 0) {
              size_t const kv_seq = all.k.size() / 4;
              std::copy_n(all.k.begin() + b * kv_seq, kv_seq, alone.k.begin());
              std::copy_n(all.v.begin() + b * kv_seq, kv_seq, alone.v.begin());
            } else {
              // The sequence's pages, in its table's order, as the one sequence's pool.
              size_t const page_bytes = alone.k.size() / alone.config.num_pages;
              int64_t const per_seq = all.config.max_pages_per_seq;
              for (int64_t i = 0; i < per_seq; ++i) {
                size_t const from = size_t(all.block_table[size_t(b * per_seq + i)]) * page_bytes;
                size_t const to = size_t(alone.block_table[size_t(i)]) * page_bytes;
                std::copy_n(all.k.begin() + from, page_bytes, alone.k.begin() + to);
                std::copy_n(all.v.begin() + from, page_bytes, alone.v.begin() + to);
              }
            }
            alone.q_descale = all.q_descale;
            alone.k_descale = all.k_descale;
            alone.v_descale = all.v_descale;
            run_plan(gpu, alone, &k);
            INFO(name_of(k) << " sequence " << b << " page " << page << " causal " << causal);
            CHECK(std::equal(alone.o.begin(), alone.o.end(), batch.o.begin() + b * o_seq));
          }
        }
      }
    }
  }
}
