// Every registered GPU kernel against the CPU backend, on fresh random data with poisoned outputs,
// plus the GPU-only error paths and CUDA-graph capture of a plan. Exits with 77 (ctest: skipped)
// when there is no CUDA device.
#define DOCTEST_CONFIG_IMPLEMENT
#include <cuda_runtime_api.h>
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <algorithm>
#include <atomic>
#include <map>
#include <sstream>
#include <memory>
#include <thread>
#include <tuple>
#include <random>
#include <string>
#include <vector>

#include "common/reference.hpp"
#include "cuda/kernel_value_dim.hpp"
#include "flashattn.h"

namespace {

using namespace fa_test;

fa_context_t* g_ctx = nullptr;
uint64_t g_seed = 0;    // fresh per run (printed), or FA_TEST_SEED to reproduce one
double g_worst = 0.0;   // the largest (o error) / (its bound) seen
std::string g_worst_what;


#define CUDA_OK(call) REQUIRE_MESSAGE((call) == cudaSuccess, #call)

// Device copies of a problem's buffers; o is poisoned before every run.
struct DeviceBuffers {
  void* in = nullptr;
  void* out = nullptr;
  float* lse = nullptr;
  size_t in_bytes = 0, out_bytes = 0, lse_bytes = 0;

  DeviceBuffers(TestProblem const& p, HostBuffers const& h) {
    in_bytes = h.in.size();
    out_bytes = h.out.size();
    lse_bytes = h.lse.size() * sizeof(float);
    CUDA_OK(cudaMalloc(&in, in_bytes));
    CUDA_OK(cudaMalloc(&out, out_bytes));
    CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&lse), lse_bytes));
    CUDA_OK(cudaMemcpy(in, h.in.data(), in_bytes, cudaMemcpyHostToDevice));
    (void)p;
  }
  ~DeviceBuffers() {
    cudaFree(in);
    cudaFree(out);
    cudaFree(lse);
  }
  DeviceBuffers(DeviceBuffers const&) = delete;
  DeviceBuffers& operator=(DeviceBuffers const&) = delete;

  void poison(TestProblem const& p) {
    std::vector<unsigned char> o(out_bytes);
    fa_test::poison(p.dtype, o.data(), p.out_elems);
    std::vector<float> l(lse_bytes / sizeof(float));
    poison_lse(l.data(), static_cast<int64_t>(l.size()));
    CUDA_OK(cudaMemcpy(out, o.data(), out_bytes, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(lse, l.data(), lse_bytes, cudaMemcpyHostToDevice));
  }
  void const* q(TestProblem const& p) const { return elem_ptr(in, p.dtype, p.q.offset); }
  void const* k(TestProblem const& p) const { return elem_ptr(in, p.dtype, p.k.offset); }
  void const* v(TestProblem const& p) const { return elem_ptr(in, p.dtype, p.v.offset); }
  void* o(TestProblem const& p) const { return elem_ptr(out, p.dtype, p.o.offset); }
  void fetch(HostBuffers& h) const {
    CUDA_OK(cudaMemcpy(h.out.data(), out, out_bytes, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(h.lse.data(), lse, lse_bytes, cudaMemcpyDeviceToHost));
  }
};

// One problem with its inputs, device copies, and two references: the CPU backend on fp32 copies
// of the inputs (the accurate result) and a naive same-precision attention (the yardstick for
// 16-bit error).
struct Checked {
  TestProblem p;
  HostBuffers host;
  std::vector<double> ref_o, ref_lse;
  double naive_err = 0.0;  // max |naive same-precision - CPU backend| over o
  std::unique_ptr<DeviceBuffers> dev;
};

// Fills the inputs and references of `c` (no doctest assertions: runs on worker threads). Returns
// an error message, or "" on success.
std::string prepare(Checked& c, uint64_t seed) {
  TestProblem const& p = c.p;
  c.host = make_buffers(p, seed);
  TestProblem p32 = p;
  p32.dtype = FA_DTYPE_FP32;
  std::vector<float> in32(static_cast<size_t>(p.in_elems));
  for (int64_t i = 0; i < p.in_elems; ++i) {
    in32[i] = static_cast<float>(load_elem(p.dtype, c.host.in.data(), i));
  }
  std::vector<float> out32(static_cast<size_t>(p.out_elems));
  std::vector<float> lse32(c.host.lse.size());
  fa_context_t* cpu = nullptr;
  if (fa_context_create(FA_DEVICE_CPU, &cpu) != FA_STATUS_SUCCESS) return fa_last_error_detail();
  fa_config cfg = make_config(p32);
  fa_status s = fa_forward(cpu, &cfg, in32.data() + p.q.offset, in32.data() + p.k.offset,
                           in32.data() + p.v.offset, out32.data() + p.o.offset, lse32.data(),
                           nullptr);
  fa_context_destroy(cpu);
  if (s != FA_STATUS_SUCCESS) return fa_last_error_detail();
  c.ref_o.assign(static_cast<size_t>(p.batch * p.seqlen_q * p.heads_q * p.dim_v()), 0.0);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t i = 0; i < p.seqlen_q; ++i)
      for (int64_t h = 0; h < p.heads_q; ++h)
        for (int64_t d = 0; d < p.dim_v(); ++d)
          c.ref_o[ref_o_index(p, b, i, h, d)] = out32[elem_index(p.o, b, i, h, d)];
  c.ref_lse.assign(lse32.begin(), lse32.end());
  c.naive_err = max_abs_diff(reference_same_precision(p, c.host.in.data()).o, c.ref_o);
  return "";
}

// The problems every kernel of (dtype, d) with value head dim dv runs: every pair of lengths 1, 17, 64, 177, 1013, 1024
// (so Sq != Sk both ways, tails of every size, and rows with no visible key under causal when
// Sq > Sk), causal off and on, with GQA ratios 1, 2, 4, 8, batch 2 on the smaller ones, a
// non-default scale now and then, and four layouts (packed, padded rows, [b, h, s, d], views of a
// packed QKV tensor); then two batches of many small tiles.
// FA_GPU_TEST_MAX_WORK=N keeps the problems with seqlen_q * seqlen_k <= N only (for slow runs
// under compute-sanitizer; 200000 still has 1013 keys against 177 queries, several pipeline
// wraps of every kernel).
std::vector<Checked> problems_for(int dtype, int d, int dv, uint64_t seed) {
  int64_t const lengths[] = {1, 17, 64, 177, 1013, 1024};
  int const ratios[] = {1, 2, 4, 8};
  char const* max_work_env = std::getenv("FA_GPU_TEST_MAX_WORK");
  int64_t const max_work = max_work_env != nullptr ? std::atoll(max_work_env) : INT64_MAX;
  std::vector<Checked> out;
  int index = 0;
  for (bool causal : {false, true}) {
    for (int64_t sq : lengths) {
      for (int64_t sk : lengths) {
        if (sq * sk > max_work) {
          ++index;
          continue;
        }
        bool const big = sq * sk > 200000;
        int64_t const heads_kv = !big && index % 3 == 0 ? 2 : 1;
        int64_t const heads_q = heads_kv * ratios[index % 4];
        int64_t const batch = sq * sk <= 64 * 1024 ? 2 : 1;
        TestProblem p = make_problem(dtype, batch, sq, sk, heads_q, heads_kv, d, causal,
                                     index % 5 == 0 ? 0.3f : 0.f, dv == d ? 0 : dv);
        switch (index % 4) {
          case 1: layout_padded(p, 8); break;
          case 2: layout_heads_major(p); break;
          case 3: if (sq == sk) layout_qkv_packed(p); else layout_padded(p, 16); break;
          default: break;  // packed
        }
        out.push_back(Checked{p, {}, {}, {}, 0.0, nullptr});
        ++index;
      }
    }
  }
  // More query tiles than an H100 or H200 has SMs (132), so the blocks of a persistent kernel
  // each walk several: 160 one-block tiles, and 576 causal ones of which 384 see no key (rows
  // 0-255 of 300 against 17 keys) and must still be written, between tiles that do.
  TestProblem many = make_problem(dtype, 40, 17, 177, 4, 2, d, false, 0.f, dv == d ? 0 : dv);
  layout_padded(many, 8);
  out.push_back(Checked{many, {}, {}, {}, 0.0, nullptr});
  out.push_back(Checked{make_problem(dtype, 24, 300, 17, 8, 2, d, true, 0.f, dv == d ? 0 : dv),
                        {}, {}, {}, 0.0, nullptr});
  // References are the slow part (naive attention in double): spread them over the cores.
  std::vector<std::string> errors(out.size());
  std::atomic<size_t> next{0};
  std::vector<std::thread> workers;
  unsigned const n_workers = std::max(1u, std::thread::hardware_concurrency());
  for (unsigned w = 0; w < n_workers; ++w) {
    workers.emplace_back([&] {
      for (size_t i; (i = next++) < out.size();) errors[i] = prepare(out[i], seed + 31 * i);
    });
  }
  for (std::thread& w : workers) w.join();
  for (size_t i = 0; i < out.size(); ++i) {
    INFO("problem " << i);
    REQUIRE(errors[i] == "");
    out[i].dev = std::make_unique<DeviceBuffers>(out[i].p, out[i].host);
  }
  return out;
}

// problems_for(), computed once per (dtype, d, dv) and shared by the test cases.
std::vector<Checked>& problems(int dtype, int d, int dv) {
  static std::map<std::tuple<int, int, int>, std::vector<Checked>> cache;
  auto key = std::make_tuple(dtype, d, dv);
  if (!cache.count(key)) cache[key] = problems_for(dtype, d, dv, g_seed + 1000 * dtype + d + dv);
  return cache[key];
}
std::vector<Checked>& problems(int dtype, int d) { return problems(dtype, d, d); }

std::string describe(TestProblem const& p) {
  std::ostringstream os;
  os << "batch " << p.batch << ", Sq " << p.seqlen_q << ", Sk " << p.seqlen_k << ", heads "
     << p.heads_q << "/" << p.heads_kv << ", d " << p.head_dim << ":" << p.dim_v()
     << (p.causal ? ", causal" : "")
     << ", strides q (" << p.q.batch_stride << ", " << p.q.seq_stride << ", " << p.q.head_stride
     << ")";
  return os.str();
}

std::string name_of(fa_kernel_config const& k) {
  char buf[128];
  REQUIRE(fa_kernel_config_name(&k, buf, sizeof buf, nullptr) == FA_STATUS_SUCCESS);
  return buf;
}

// Runs `plan` on `c` and checks O (error <= 2x the naive same-precision error + atol), LSE, and
// that nothing outside o's view was written.
// Runs the plan directly, or (`captured`) recorded into a CUDA graph on a side stream and
// replayed, then checks the result.
void run_and_check(fa_plan_t* plan, Checked& c, std::string const& what, bool captured) {
  TestProblem const& p = c.p;
  DeviceBuffers& dev = *c.dev;
  dev.poison(p);
  if (captured) {
    cudaStream_t stream;
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaGraph_t graph;
    CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    fa_status const s = fa_plan_run(plan, dev.q(p), dev.k(p), dev.v(p), dev.o(p), dev.lse,
                                    nullptr, 0, reinterpret_cast<fa_stream_t>(stream));
    CUDA_OK(cudaStreamEndCapture(stream, &graph));
    REQUIRE(s == FA_STATUS_SUCCESS);
    cudaGraphExec_t exec;
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    CUDA_OK(cudaGraphLaunch(exec, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
  } else {
    REQUIRE(fa_plan_run(plan, dev.q(p), dev.k(p), dev.v(p), dev.o(p), dev.lse, nullptr, 0,
                        nullptr) == FA_STATUS_SUCCESS);
  }
  CUDA_OK(cudaDeviceSynchronize());
  dev.fetch(c.host);
  double const atol = p.dtype == FA_DTYPE_BF16 ? 1e-3 : 2e-4;
  ErrorStats eo = compare_output(p, c.host.out.data(), c.ref_o, Tolerance{2 * c.naive_err + atol, 0, 0});
  ErrorStats el = compare_lse(c.host.lse.data(), c.ref_lse, Tolerance{2e-3, 0, 0});
  INFO(what << " on " << describe(p) << " | o: max err " << eo.max_abs << " (bound "
            << 2 * c.naive_err + atol << "), bad " << eo.n_bad << ", worst got " << eo.worst_got
            << " ref " << eo.worst_ref << " | lse: max err " << el.max_abs << ", bad " << el.n_bad
            << ", worst got " << el.worst_got << " ref " << el.worst_ref);
  CHECK(eo.n_bad == 0);
  CHECK_FALSE(eo.non_finite);
  CHECK(el.n_bad == 0);
  CHECK(output_padding_intact(p, c.host.out.data()));
  double ratio = eo.max_abs / (2 * c.naive_err + atol);
  if (ratio > g_worst) {
    g_worst = ratio;
    g_worst_what = what + " (max error " + std::to_string(eo.max_abs) + ", naive same-precision " +
                   std::to_string(c.naive_err) + ")";
  }
}

}  // namespace

TEST_CASE("every registered kernel matches the CPU backend") {
  size_t n = fa_kernel_count();
  REQUIRE(n > 0);
  // FA_GPU_TEST_SAMPLE=N checks every N-th kernel only, FA_GPU_TEST_FAMILY=F the kernels of
  // family F only, and FA_GPU_TEST_KERNEL=S those whose name contains S (for slow runs under
  // compute-sanitizer, and a new tile's first run).
  size_t step = 1;
  if (char const* sample = std::getenv("FA_GPU_TEST_SAMPLE")) step = std::max(1, std::atoi(sample));
  char const* family = std::getenv("FA_GPU_TEST_FAMILY");
  char const* name_part = std::getenv("FA_GPU_TEST_KERNEL");
  int major = 0;
  REQUIRE(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) == cudaSuccess);
  std::vector<fa_kernel_config> kernels;
  int elsewhere = 0;  // registered, with no code for this device
  for (size_t i = 0; i < n; ++i) {
    fa_kernel_config kc;
    REQUIRE(fa_kernel_config_init(&kc) == FA_STATUS_SUCCESS);
    REQUIRE(fa_kernel_get(i, &kc) == FA_STATUS_SUCCESS);
    if (family != nullptr && kc.family != std::atoi(family)) continue;
    if (name_part != nullptr && name_of(kc).find(name_part) == std::string::npos) continue;
    // FP8 kernels (e4m3 Q, K and V) have their own bound and cases: test_gpu_features.cpp.
    if (kc.dtype == FA_DTYPE_E4M3) continue;
    if (!fa_test::kernel_runs_here(g_ctx, kc)) {
      // Only these two kinds are built without code for a device the build targets: the sm90
      // family off sm_90, and on sm_90 the mma.sync prefill tiles (not its decode tiles of 64
      // query rows), which FA_MMA_SYNC_SM90=decode compiles for the other archs only.
      INFO(name_of(kc) << " has no code for this sm_" << major << "x device");
      CHECK(((kc.family == FA_FAMILY_SM90 && major != 9) ||
             (kc.family == FA_FAMILY_MMA_SYNC && major == 9 && kc.B_r != 64)));
      ++elsewhere;
      continue;
    }
    kernels.push_back(kc);
  }
  if (elsewhere > 0) MESSAGE(elsewhere << " registered kernels have no code for this device");
  REQUIRE_MESSAGE(!kernels.empty(), "no registered kernel passes FA_GPU_TEST_FAMILY/KERNEL");
  int checked_kernels = 0;
  size_t checked_problems = 0;
  for (size_t i = 0; i < kernels.size(); i += step) {
    fa_kernel_config kc = kernels[i];
    std::string name = name_of(kc);
    for (Checked& c : problems(kc.dtype, kc.d_head, fa_test::kernel_value_dim(g_ctx, kc))) {
      fa_config cfg = make_config(c.p);
      fa_plan_t* plan = nullptr;
      fa_status s = fa_plan_create_with_kernel(g_ctx, &cfg, &kc, &plan);
      INFO(name << " on " << describe(c.p) << ": " << std::string(fa_last_error_detail()));
      REQUIRE(s == FA_STATUS_SUCCESS);
      fa_kernel_config bound;
      REQUIRE(fa_kernel_config_init(&bound) == FA_STATUS_SUCCESS);
      REQUIRE(fa_plan_kernel(plan, &bound) == FA_STATUS_SUCCESS);
      CHECK(name_of(bound) == name);
      // Every ninth problem through a captured graph: each kernel's launch is capturable.
      run_and_check(plan, c, name, checked_problems % 9 == 0);
      fa_plan_destroy(plan);
      ++checked_problems;
    }
    ++checked_kernels;
  }
  MESSAGE(checked_kernels << " kernels checked on " << checked_problems
                          << " problems in all; worst o error / bound = " << g_worst << ": "
                          << g_worst_what);
}

TEST_CASE("fa_forward picks a kernel and matches the CPU backend; a captured plan replays") {
  struct Dims {
    int d, dv;
  };
  for (int dtype : {FA_DTYPE_FP16, FA_DTYPE_BF16}) {
    // 192 / 128: DeepSeek's prefill, the choice table's "192:128" rows.
    for (auto [d, dv] : {Dims{64, 64}, Dims{128, 128}, Dims{192, 192}, Dims{192, 128}, Dims{256, 256}}) {
      fa_kernel_config probe;
      REQUIRE(fa_kernel_config_init(&probe) == FA_STATUS_SUCCESS);
      bool built = false;  // the build may leave this (dtype, head dim) out
      for (size_t i = 0; i < fa_kernel_count() && !built; ++i) {
        REQUIRE(fa_kernel_get(i, &probe) == FA_STATUS_SUCCESS);
        built = probe.dtype == dtype && probe.d_head == d;
      }
      if (!built) continue;
      for (Checked& c : problems(dtype, d, dv)) {
        TestProblem const& p = c.p;
        DeviceBuffers& dev = *c.dev;
        fa_config cfg = make_config(p);
        INFO(describe(p));
        // The plan's launch is capturable: record it into a graph on a side stream, replay it.
        fa_plan_t* plan = nullptr;
        REQUIRE(fa_plan_create(g_ctx, &cfg, &plan) == FA_STATUS_SUCCESS);
        fa_kernel_config chosen;
        REQUIRE(fa_kernel_config_init(&chosen) == FA_STATUS_SUCCESS);
        REQUIRE(fa_plan_kernel(plan, &chosen) == FA_STATUS_SUCCESS);
        cudaStream_t stream;
        CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        dev.poison(p);
        cudaGraph_t graph;
        CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
        fa_status captured = fa_plan_run(plan, dev.q(p), dev.k(p), dev.v(p), dev.o(p), dev.lse,
                                         nullptr, 0, reinterpret_cast<fa_stream_t>(stream));
        CUDA_OK(cudaStreamEndCapture(stream, &graph));
        REQUIRE(captured == FA_STATUS_SUCCESS);
        cudaGraphExec_t exec;
        CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
        CUDA_OK(cudaGraphLaunch(exec, stream));
        CUDA_OK(cudaStreamSynchronize(stream));
        dev.fetch(c.host);
        ErrorStats eg = compare_output(p, c.host.out.data(), c.ref_o,
                                       Tolerance{2 * c.naive_err + 1e-3, 0, 0});
        CHECK(eg.n_bad == 0);
        CHECK(output_padding_intact(p, c.host.out.data()));
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
        cudaStreamDestroy(stream);
        fa_plan_destroy(plan);

        // The one-shot call computes the same result, with the same kernel (the context caches
        // one choice per shape, and a plan made after it reports that choice).
        dev.poison(p);
        fa_status s = fa_forward(g_ctx, &cfg, dev.q(p), dev.k(p), dev.v(p), dev.o(p), dev.lse,
                                 nullptr);
        INFO(name_of(chosen) << ": " << std::string(fa_last_error_detail()));
        REQUIRE(s == FA_STATUS_SUCCESS);
        CUDA_OK(cudaDeviceSynchronize());
        dev.fetch(c.host);
        ErrorStats eo = compare_output(p, c.host.out.data(), c.ref_o,
                                       Tolerance{2 * c.naive_err + 1e-3, 0, 0});
        ErrorStats el = compare_lse(c.host.lse.data(), c.ref_lse, Tolerance{2e-3, 0, 0});
        CHECK(eo.n_bad == 0);
        CHECK(el.n_bad == 0);
        fa_plan_t* after = nullptr;
        REQUIRE(fa_plan_create(g_ctx, &cfg, &after) == FA_STATUS_SUCCESS);
        fa_kernel_config again;
        REQUIRE(fa_kernel_config_init(&again) == FA_STATUS_SUCCESS);
        REQUIRE(fa_plan_kernel(after, &again) == FA_STATUS_SUCCESS);
        CHECK(name_of(again) == name_of(chosen));
        fa_plan_destroy(after);
      }
    }
  }
}

TEST_CASE("a kernel recorded with fa_context_set_kernel is used for its shape") {
  TestProblem p = make_problem(FA_DTYPE_BF16, 1, 256, 256, 4, 4, 128, false);
  fa_config cfg = make_config(p);
  fa_plan_t* plan = nullptr;
  REQUIRE(fa_plan_create(g_ctx, &cfg, &plan) == FA_STATUS_SUCCESS);
  fa_kernel_config chosen, other;
  REQUIRE(fa_kernel_config_init(&chosen) == FA_STATUS_SUCCESS);
  REQUIRE(fa_kernel_config_init(&other) == FA_STATUS_SUCCESS);
  REQUIRE(fa_plan_kernel(plan, &chosen) == FA_STATUS_SUCCESS);
  fa_plan_destroy(plan);
  // Any other registered kernel of this dtype and head dim.
  bool found = false;
  for (size_t i = 0; i < fa_kernel_count() && !found; ++i) {
    REQUIRE(fa_kernel_get(i, &other) == FA_STATUS_SUCCESS);
    found = other.dtype == FA_DTYPE_BF16 && other.d_head == 128 && name_of(other) != name_of(chosen);
  }
  REQUIRE(found);
  fa_context_t* ctx = nullptr;
  REQUIRE(fa_context_create(0, &ctx) == FA_STATUS_SUCCESS);
  REQUIRE(fa_context_set_kernel(ctx, &cfg, &other) == FA_STATUS_SUCCESS);
  size_t tuned = 0;
  REQUIRE(fa_context_tuned_count(ctx, &tuned) == FA_STATUS_SUCCESS);
  CHECK(tuned == 1);
  REQUIRE(fa_plan_create(ctx, &cfg, &plan) == FA_STATUS_SUCCESS);
  fa_kernel_config used;
  REQUIRE(fa_kernel_config_init(&used) == FA_STATUS_SUCCESS);
  REQUIRE(fa_plan_kernel(plan, &used) == FA_STATUS_SUCCESS);
  CHECK(name_of(used) == name_of(other));
  fa_plan_destroy(plan);
  // A kernel that cannot run the shape (here: another dtype) is refused and not recorded.
  fa_config other_dtype = cfg;
  other_dtype.dtype = FA_DTYPE_FP16;
  CHECK(fa_context_set_kernel(ctx, &other_dtype, &other) == FA_STATUS_KERNEL_NOT_AVAILABLE);
  CHECK(std::string(fa_last_error_detail()).find("dtype") != std::string::npos);
  REQUIRE(fa_context_tuned_count(ctx, &tuned) == FA_STATUS_SUCCESS);
  CHECK(tuned == 1);
  fa_context_destroy(ctx);
}

TEST_CASE("fa_autotune records a winner that plans then use; the tuning file round-trips") {
  // The longest shape of the shared set: 1024 x 1024, d = 128.
  Checked* chosen_case = nullptr;
  for (Checked& c : problems(FA_DTYPE_BF16, 128)) {
    if (c.p.seqlen_q == 1024 && c.p.seqlen_k == 1024 && !c.p.causal) chosen_case = &c;
  }
  REQUIRE(chosen_case != nullptr);
  Checked& c = *chosen_case;
  TestProblem const& p = c.p;
  fa_config cfg = make_config(p);
  fa_context_t* ctx = nullptr;
  REQUIRE(fa_context_create(0, &ctx) == FA_STATUS_SUCCESS);
  fa_kernel_config best;
  REQUIRE(fa_kernel_config_init(&best) == FA_STATUS_SUCCESS);
  float best_ms = -1.f;
  c.dev->poison(p);
  fa_status s = fa_autotune(ctx, &cfg, c.dev->q(p), c.dev->k(p), c.dev->v(p), c.dev->o(p),
                            c.dev->lse, nullptr, &best, &best_ms);
  INFO(std::string(fa_last_error_detail()));
  REQUIRE(s == FA_STATUS_SUCCESS);
  CHECK(best_ms > 0.f);
  int registered = 0;
  REQUIRE(fa_kernel_is_registered(&best, &registered) == FA_STATUS_SUCCESS);
  CHECK(registered == 1);
  // The outputs autotuning left behind are a correct result.
  c.dev->fetch(c.host);
  CHECK(compare_output(p, c.host.out.data(), c.ref_o, Tolerance{2 * c.naive_err + 1e-3, 0, 0})
            .n_bad == 0);
  size_t tuned = 0;
  REQUIRE(fa_context_tuned_count(ctx, &tuned) == FA_STATUS_SUCCESS);
  CHECK(tuned == 1);
  fa_plan_t* plan = nullptr;
  REQUIRE(fa_plan_create(ctx, &cfg, &plan) == FA_STATUS_SUCCESS);
  fa_kernel_config used;
  REQUIRE(fa_kernel_config_init(&used) == FA_STATUS_SUCCESS);
  REQUIRE(fa_plan_kernel(plan, &used) == FA_STATUS_SUCCESS);
  CHECK(name_of(used) == name_of(best));
  fa_plan_destroy(plan);

  // Save, then load into a fresh context, which then plans with the tuned kernel.
  std::string const path = "flashattn_gpu_test_tuning.txt";
  REQUIRE(fa_context_save_tuning(ctx, path.c_str()) == FA_STATUS_SUCCESS);
  fa_context_t* fresh = nullptr;
  REQUIRE(fa_context_create(0, &fresh) == FA_STATUS_SUCCESS);
  REQUIRE(fa_context_load_tuning(fresh, path.c_str()) == FA_STATUS_SUCCESS);
  REQUIRE(fa_context_tuned_count(fresh, &tuned) == FA_STATUS_SUCCESS);
  CHECK(tuned == 1);
  REQUIRE(fa_plan_create(fresh, &cfg, &plan) == FA_STATUS_SUCCESS);
  REQUIRE(fa_plan_kernel(plan, &used) == FA_STATUS_SUCCESS);
  CHECK(name_of(used) == name_of(best));
  fa_plan_destroy(plan);
  fa_context_destroy(fresh);

  // A file with a stale entry (a kernel this build lacks), a malformed line and a good entry:
  // the good one loads, the others are skipped with a warning status.
  {
    std::ifstream in(path);
    std::string header, comment1, comment2, arch_line, entry;
    std::getline(in, header);
    std::getline(in, comment1);
    std::getline(in, comment2);
    std::getline(in, arch_line);
    std::getline(in, entry);
    std::ofstream out(path, std::ios::trunc);
    out << header << "\n" << arch_line << "\n"
        << "BF16 128 0 4096 4096 | (BF16, 128, 128, 48, 4): swizzled+load_4_4_2_tiles\n"
        << "BF16 128 zero 64 64 | (BF16, 128, 64, 64, 4): async+load_0_0_0_tiles\n"
        << entry << "\n";
  }
  REQUIRE(fa_context_create(0, &fresh) == FA_STATUS_SUCCESS);
  CHECK(fa_context_load_tuning(fresh, path.c_str()) == FA_STATUS_TUNING_ENTRIES_IGNORED);
  std::string detail = fa_last_error_detail();
  INFO(detail);
  CHECK(detail.find("2 of 3 entries") != std::string::npos);
  CHECK(detail.find("not compiled") != std::string::npos);
  REQUIRE(fa_context_tuned_count(fresh, &tuned) == FA_STATUS_SUCCESS);
  CHECK(tuned == 1);

  // Another device generation's file: every entry skipped, nothing loaded.
  {
    std::ofstream out(path, std::ios::trunc);
    out << "libflashattn-tuning 1\narch 12\nBF16 128 0 1024 1024 | " << name_of(best) << "\n";
  }
  fa_context_t* other = nullptr;
  REQUIRE(fa_context_create(0, &other) == FA_STATUS_SUCCESS);
  CHECK(fa_context_load_tuning(other, path.c_str()) == FA_STATUS_TUNING_ENTRIES_IGNORED);
  CHECK(std::string(fa_last_error_detail()).find("sm_12") != std::string::npos);
  REQUIRE(fa_context_tuned_count(other, &tuned) == FA_STATUS_SUCCESS);
  CHECK(tuned == 0);
  // Not a tuning file / a future version / no file: refused, nothing loaded.
  {
    std::ofstream out(path, std::ios::trunc);
    out << "libflashattn-tuning 2\narch 90\n";
  }
  CHECK(fa_context_load_tuning(other, path.c_str()) == FA_STATUS_PARSE_ERROR);
  CHECK(std::string(fa_last_error_detail()).find("version 2") != std::string::npos);
  std::remove(path.c_str());
  CHECK(fa_context_load_tuning(other, path.c_str()) == FA_STATUS_IO_ERROR);
  CHECK(fa_context_save_tuning(other, "/nonexistent-dir/tuning.txt") == FA_STATUS_IO_ERROR);

  // A caller built against 0.2 passes a 64-byte struct (fields end at 60, then tail padding
  // where `family` is now): it receives an mma.sync kernel it can pin, the fastest one, while
  // the context records the overall winner, which may be an sm90 kernel.
  fa_kernel_config old = best;
  old.struct_size = offsetof(fa_kernel_config, family) + 4;
  old.family = 7;
  old.stages = 7;
  old.overlap = 7;
  old.pingpong = 7;
  old.persistent = 7;
  s = fa_autotune(other, &cfg, c.dev->q(p), c.dev->k(p), c.dev->v(p), c.dev->o(p), c.dev->lse,
                  nullptr, &old, &best_ms);
  INFO(std::string(fa_last_error_detail()));
  REQUIRE(s == FA_STATUS_SUCCESS);
  CHECK(best_ms > 0.f);
  CHECK(old.family == 7);  // past the caller's fields: untouched
  CHECK(old.stages == 7);
  CHECK(old.overlap == 7);
  CHECK(old.pingpong == 7);
  CHECK(old.persistent == 7);
  // The same kernel in a current struct: the 0.2 fields, and every field after them 0 (the
  // mma.sync family has none of the sm90 knobs). `old` still holds the first winner's sm90 knobs
  // past its struct_size, which is why they are not copied.
  fa_kernel_config pinned;
  REQUIRE(fa_kernel_config_init(&pinned) == FA_STATUS_SUCCESS);
  std::memcpy(reinterpret_cast<char*>(&pinned) + sizeof(size_t),
              reinterpret_cast<char const*>(&old) + sizeof(size_t),
              offsetof(fa_kernel_config, family) - sizeof(size_t));
  REQUIRE(fa_kernel_is_registered(&pinned, &registered) == FA_STATUS_SUCCESS);
  CHECK(registered == 1);
  REQUIRE(fa_plan_create_with_kernel(other, &cfg, &old, &plan) == FA_STATUS_SUCCESS);
  fa_plan_destroy(plan);
  fa_context_destroy(other);
  fa_context_destroy(fresh);
  fa_context_destroy(ctx);
}

TEST_CASE("one GPU context used from many threads, each on its own stream") {
  constexpr int kThreads = 6;
  // Larger problems, so the threads' launches overlap: 1013/1024-row ones of the shared set.
  std::vector<Checked*> cases;
  for (Checked& c : problems(FA_DTYPE_BF16, 128)) {
    if (c.p.seqlen_q >= 1013 && c.p.seqlen_k >= 1013) cases.push_back(&c);
  }
  REQUIRE(cases.size() >= 2);
  // Per thread: its own device buffers, stream and expected output (a single-threaded run).
  std::vector<std::unique_ptr<DeviceBuffers>> devs;
  std::vector<std::vector<unsigned char>> expected(kThreads);
  std::vector<cudaStream_t> streams(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    Checked& c = *cases[t % cases.size()];
    devs.push_back(std::make_unique<DeviceBuffers>(c.p, c.host));
    CUDA_OK(cudaStreamCreateWithFlags(&streams[t], cudaStreamNonBlocking));
    devs[t]->poison(c.p);
    fa_config cfg = make_config(c.p);
    REQUIRE(fa_forward(g_ctx, &cfg, devs[t]->q(c.p), devs[t]->k(c.p), devs[t]->v(c.p),
                       devs[t]->o(c.p), devs[t]->lse, nullptr) == FA_STATUS_SUCCESS);
    CUDA_OK(cudaDeviceSynchronize());
    expected[t].resize(devs[t]->out_bytes);
    CUDA_OK(cudaMemcpy(expected[t].data(), devs[t]->out, devs[t]->out_bytes, cudaMemcpyDeviceToHost));
    devs[t]->poison(c.p);
  }
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Checked const& c = *cases[t % cases.size()];
      fa_config cfg = make_config(c.p);
      for (int it = 0; it < 20; ++it) {
        fa_status s = fa_forward(g_ctx, &cfg, devs[t]->q(c.p), devs[t]->k(c.p), devs[t]->v(c.p),
                                 devs[t]->o(c.p), devs[t]->lse,
                                 reinterpret_cast<fa_stream_t>(streams[t]));
        if (s != FA_STATUS_SUCCESS) ++failures;
      }
      if (cudaStreamSynchronize(streams[t]) != cudaSuccess) ++failures;
    });
  }
  for (std::thread& th : threads) th.join();
  CHECK(failures == 0);
  for (int t = 0; t < kThreads; ++t) {
    std::vector<unsigned char> got(devs[t]->out_bytes);
    CUDA_OK(cudaMemcpy(got.data(), devs[t]->out, got.size(), cudaMemcpyDeviceToHost));
    CHECK_MESSAGE(got == expected[t], "thread " << t << " differs from the single-threaded run");
    cudaStreamDestroy(streams[t]);
  }
}

TEST_CASE("tensors spanning more than 2^31 elements use 64-bit offsets") {
  // q and o of batch 2 with a batch stride just past 2^31 elements: batch 1 starts 4 GiB in.
  TestProblem p = make_problem(FA_DTYPE_BF16, 2, 177, 200, 4, 2, 128, true);
  Checked c{p, {}, {}, {}, 0.0, nullptr};
  REQUIRE(prepare(c, g_seed + 31) == "");
  int64_t const stride = (int64_t(1) << 31) + 1024;
  size_t const big = static_cast<size_t>(stride + p.q.batch_stride) * 2;  // bytes of q (and o)
  size_t const batch_bytes = static_cast<size_t>(p.q.batch_stride) * 2;
  unsigned char *q = nullptr, *o = nullptr, *kv = nullptr;
  CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&q), big));
  CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&o), big));
  CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&kv), c.host.in.size()));
  CUDA_OK(cudaMemcpy(kv, c.host.in.data(), c.host.in.size(), cudaMemcpyHostToDevice));
  auto const* q_host = static_cast<unsigned char const*>(c.host.q(p));
  for (int b = 0; b < 2; ++b) {
    CUDA_OK(cudaMemcpy(q + b * stride * 2, q_host + b * batch_bytes, batch_bytes,
                       cudaMemcpyHostToDevice));
  }
  fa_config cfg = make_config(p);
  cfg.q_batch_stride = cfg.o_batch_stride = stride;
  cfg.q_seq_stride = cfg.o_seq_stride = p.q.seq_stride;
  cfg.q_head_stride = cfg.o_head_stride = p.q.head_stride;
  fa_status s = fa_forward(g_ctx, &cfg, q, kv + p.k.offset * 2, kv + p.v.offset * 2, o, nullptr,
                           nullptr);
  INFO(std::string(fa_last_error_detail()));
  REQUIRE(s == FA_STATUS_SUCCESS);
  CUDA_OK(cudaDeviceSynchronize());
  // Gather both batches of o back into the packed layout the reference uses.
  std::vector<unsigned char> packed(c.host.out.size());
  for (int b = 0; b < 2; ++b) {
    CUDA_OK(cudaMemcpy(packed.data() + b * batch_bytes, o + b * stride * 2, batch_bytes,
                       cudaMemcpyDeviceToHost));
  }
  ErrorStats e = compare_output(p, packed.data(), c.ref_o, Tolerance{2 * c.naive_err + 1e-3, 0, 0});
  INFO("max error " << e.max_abs);
  CHECK(e.n_bad == 0);
  cudaFree(q);
  cudaFree(o);
  cudaFree(kv);
}

TEST_CASE("GPU error paths: status, message, outputs untouched") {
  TestProblem p = make_problem(FA_DTYPE_BF16, 1, 128, 128, 2, 2, 128, false);
  HostBuffers host = make_buffers(p, g_seed + 5);
  DeviceBuffers dev(p, host);
  auto expect = [&](fa_config const& cfg, fa_status status, char const* mentions,
                    void const* q = nullptr, void* o = nullptr) {
    dev.poison(p);
    fa_status s = fa_forward(g_ctx, &cfg, q ? q : dev.q(p), dev.k(p), dev.v(p), o ? o : dev.o(p),
                             dev.lse, nullptr);
    std::string detail = fa_last_error_detail();
    INFO("detail: " << detail);
    CHECK(s == status);
    CHECK(detail.find(mentions) != std::string::npos);
    CUDA_OK(cudaDeviceSynchronize());
    dev.fetch(host);
    std::vector<unsigned char> poisoned(host.out.size());
    fa_test::poison(p.dtype, poisoned.data(), p.out_elems);
    CHECK(std::memcmp(poisoned.data(), host.out.data(), host.out.size()) == 0);
  };
  fa_config base = make_config(p);
  fa_config c = base;
  // Above every built head dim (256), and one that is not a multiple of 8 (rows padded to 104
  // elements, so that the strides are not what is refused); neither reaches a kernel.
  for (int64_t const d : {int64_t(264), int64_t(100)}) {
    int64_t const row = (d + 7) / 8 * 8;
    c.head_dim = c.head_dim_v = d;
    c.q_head_stride = c.k_head_stride = c.v_head_stride = c.o_head_stride = row;
    c.q_seq_stride = c.k_seq_stride = c.v_seq_stride = c.o_seq_stride = 2 * row;
    c.q_batch_stride = c.k_batch_stride = c.v_batch_stride = c.o_batch_stride = 2 * row * 128;
    expect(c, FA_STATUS_UNSUPPORTED, ("head_dim " + std::to_string(d)).c_str());
  }
  c = base;
  c.dtype = FA_DTYPE_FP32;
  expect(c, FA_STATUS_UNSUPPORTED, "FP32");
  c = base;
  c.k_seq_stride += 4;
  expect(c, FA_STATUS_UNSUPPORTED, "k_seq_stride");
  expect(base, FA_STATUS_UNSUPPORTED, "16-byte aligned",
         static_cast<unsigned char const*>(dev.q(p)) + 2);

  fa_kernel_config kc;
  REQUIRE(fa_kernel_config_init(&kc) == FA_STATUS_SUCCESS);
  fa_plan_t* plan = nullptr;
  REQUIRE(fa_kernel_config_parse("(FP16, 128, 64, 64, 4): async+load_0_0_0_tiles", &kc) ==
          FA_STATUS_SUCCESS);
  int registered = 0;
  REQUIRE(fa_kernel_is_registered(&kc, &registered) == FA_STATUS_SUCCESS);
  if (registered) {
    CHECK(fa_plan_create_with_kernel(g_ctx, &base, &kc, &plan) == FA_STATUS_KERNEL_NOT_AVAILABLE);
    CHECK(std::string(fa_last_error_detail()).find("dtype") != std::string::npos);
  }
  // A config with a no-op field runs as its canonical kernel (when that one is registered).
  REQUIRE(fa_kernel_config_parse("(BF16, 128, 64, 64, 4): async+eager+swizzled+load_0_0_0_tiles+buffer",
                                 &kc) == FA_STATUS_SUCCESS);
  REQUIRE(fa_kernel_is_registered(&kc, &registered) == FA_STATUS_SUCCESS);
  if (registered) {
    REQUIRE(fa_plan_create_with_kernel(g_ctx, &base, &kc, &plan) == FA_STATUS_SUCCESS);
    fa_kernel_config bound;
    REQUIRE(fa_kernel_config_init(&bound) == FA_STATUS_SUCCESS);
    REQUIRE(fa_plan_kernel(plan, &bound) == FA_STATUS_SUCCESS);
    CHECK(name_of(bound) == "(BF16, 128, 64, 64, 4): async+eager+swizzled+load_0_0_0_tiles");
    fa_plan_destroy(plan);
    plan = nullptr;
  }
  REQUIRE(fa_kernel_config_parse("(BF16, 128, 128, 48, 4): swizzled+load_4_4_2_tiles", &kc) ==
          FA_STATUS_SUCCESS);
  CHECK(fa_plan_create_with_kernel(g_ctx, &base, &kc, &plan) == FA_STATUS_KERNEL_NOT_AVAILABLE);
  CHECK(std::string(fa_last_error_detail()).find("not compiled") != std::string::npos);
  REQUIRE(fa_kernel_config_parse("(BF16, 96, 128, 64, 4): load_2_2_0_tiles", &kc) ==
          FA_STATUS_SUCCESS);
  CHECK(fa_plan_create_with_kernel(g_ctx, &base, &kc, &plan) == FA_STATUS_INVALID_KERNEL_CONFIG);
  CHECK(std::string(fa_last_error_detail()).find("d_head = 96") != std::string::npos);
  CHECK(plan == nullptr);
}

int main(int argc, char** argv) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("skipped: no CUDA device\n");
    return 77;
  }
  if (fa_context_create(0, &g_ctx) != FA_STATUS_SUCCESS) {
    std::printf("cannot create a context on device 0: %s\n", fa_last_error_detail());
    return 1;
  }
  if (char const* seed = std::getenv("FA_TEST_SEED")) {
    g_seed = std::strtoull(seed, nullptr, 10);
  } else {
    g_seed = std::random_device{}();
  }
  std::printf("random seed %llu (set FA_TEST_SEED to reproduce)\n",
              static_cast<unsigned long long>(g_seed));
  doctest::Context context(argc, argv);
  int result = context.run();
  fa_context_destroy(g_ctx);
  return result;
}
