// Decode and varlen benchmarks of the library on the GPU.
//
//   decode_bench decode [--batches 1,8,32,64] [--kv-lens 4096,...,131072] [--sq 1,4,16]
//                       [--pages 0,16,64,256] [--heads 32,8] [--head-dim 128] [--splits N]
//                       [--kv-dtype bf16,e4m3] [--layout nhd,hnd] [--kernel NAME] [--iters N]
//   decode_bench varlen [--tokens 32768] [--min-len 100] [--max-len 4000] [--kernel NAME] [--iters N]
//                       [--dtype bf16|e4m3] [--workspace 0|1]
//   decode_bench copy                      # device-to-device copy bandwidth, the yardstick
//
// decode: one query row (or --sq rows, speculative decoding) per sequence against a KV cache of
// --kv-lens rows per sequence, contiguous (page 0) or paged with shuffled pages; bf16 queries,
// a bf16 cache or (--kv-dtype e4m3) an FP8 one with per-tensor descales, heads_q / heads_kv
// query and K/V heads, standard-normal values (rounded to the cache's type), the cache's rows
// of all K/V heads per key (--layout nhd, vLLM's) or each head's keys together (hnd: Hugging
// Face's static cache, FlashInfer's HND pages; CSV column layout). Each point is a plan
// (workspace as the plan asks) timed back to back in --iters windows of >= 200 ms (default 3);
// the median counts (column us), beside the same step replayed from a CUDA graph (graph_us:
// the GPU's time alone) and the host's issue time per call (host_us). Bandwidth is the bytes a
// kernel must move (K and V of every visible row, Q, O) over that time. CSV on stdout.
// varlen: a batch of random lengths in [--min-len, --max-len] (seeded) summing to about --tokens,
// causal, d 128, heads 16, against one dense batch of equal work (sequences of the mean length
// whose sum of squared lengths matches); prints both TFLOP/s. --dtype e4m3 runs e4m3 q, k and v
// (o in bf16, descales 1); each plan gets the workspace it asks for (FP8: V transposed ahead of
// the run), or with --workspace 0 none.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "flashattn.h"

namespace {

using bench::check;
using bench::check_cuda;
using bench::die;

std::vector<int> parse_list(char const* text) { return bench::parse_list(text, 0); }

struct DeviceBuffer {
  explicit DeviceBuffer(size_t n) : bytes(n) {
    if (n > 0) check_cuda(cudaMalloc(&ptr, n), "cudaMalloc");
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(DeviceBuffer const&) = delete;
  DeviceBuffer& operator=(DeviceBuffer const&) = delete;
  void* ptr = nullptr;
  size_t bytes;
};

// Fills with standard-normal bf16 values: 2^20 of them drawn on the host (seeded), then repeated
// by doubling device-to-device copies (a cache of 17 GB would take minutes to draw on the host;
// the pattern repeats every 1024 cache rows at 8 x 128 per row, which no kernel can exploit).
void fill(DeviceBuffer& b) {
  size_t const n = std::min(b.bytes / 2, size_t{1} << 20);
  std::vector<uint16_t> host(n);
  std::mt19937 rng(static_cast<unsigned>(b.bytes));
  std::normal_distribution<float> normal;
  for (auto& x : host) {
    float const f = normal(rng);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    x = static_cast<uint16_t>((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);  // round to nearest even
  }
  check_cuda(cudaMemcpy(b.ptr, host.data(), n * 2, cudaMemcpyHostToDevice), "copy");
  char* const base = static_cast<char*>(b.ptr);
  for (size_t filled = n * 2; filled < b.bytes;) {
    size_t const chunk = std::min(filled, b.bytes - filled);
    check_cuda(cudaMemcpy(base + filled, base, chunk, cudaMemcpyDeviceToDevice), "copy");
    filled += chunk;
  }
}

// Fills with standard-normal values rounded to the nearest e4m3 (FP8) value, repeated as fill().
void fill_e4m3(DeviceBuffer& b) {
  // The 126 positive finite e4m3 values in order of their codes (which is their order).
  std::vector<float> values;
  for (int code = 1; code < 0x7f; ++code) {
    int const e = code >> 3, m = code & 7;
    values.push_back(e == 0 ? std::ldexp(float(m), -9) : std::ldexp(1.0f + m / 8.0f, e - 7));
  }
  size_t const n = std::min(b.bytes, size_t{1} << 20);
  std::vector<uint8_t> host(n);
  std::mt19937 rng(static_cast<unsigned>(b.bytes));
  std::normal_distribution<float> normal;
  for (auto& x : host) {
    float const f = normal(rng), a = std::fabs(f);
    size_t i = size_t(std::lower_bound(values.begin(), values.end(), a) - values.begin());
    // The nearer of values[i - 1] and values[i] (code i and i + 1); 0 below half the smallest.
    int code = 0;
    if (i == values.size()) {
      code = 0x7e;
    } else if (i == 0) {
      code = a * 2 >= values[0] ? 1 : 0;
    } else {
      code = a - values[i - 1] <= values[i] - a ? int(i) : int(i) + 1;
    }
    x = static_cast<uint8_t>(code | (f < 0 ? 0x80 : 0));
  }
  check_cuda(cudaMemcpy(b.ptr, host.data(), n, cudaMemcpyHostToDevice), "copy");
  char* const base = static_cast<char*>(b.ptr);
  for (size_t filled = n; filled < b.bytes;) {
    size_t const chunk = std::min(filled, b.bytes - filled);
    check_cuda(cudaMemcpy(base + filled, base, chunk, cudaMemcpyDeviceToDevice), "copy");
    filled += chunk;
  }
}

// Median time of one launch over `windows` timings of back-to-back launches, each window at
// least 200 ms long (its launch count calibrated on 10 launches after 3 warm-ups): a decode step
// takes tens of microseconds, about as long as the host needs to issue it, so a single launch
// between two events would time the host's issue gap too. Back to back, as in a serving loop,
// the host's work overlaps the GPU's and whichever is longer counts.
constexpr double kWindowMs = 200.0;

template <class Launch>
float median_ms(Launch&& launch, int windows, cudaStream_t stream = nullptr) {
  cudaEvent_t start, stop;
  check_cuda(cudaEventCreate(&start), "cudaEventCreate");
  check_cuda(cudaEventCreate(&stop), "cudaEventCreate");
  auto window = [&](int n) {
    check_cuda(cudaEventRecord(start, stream), "cudaEventRecord");
    for (int r = 0; r < n; ++r) launch();
    check_cuda(cudaEventRecord(stop, stream), "cudaEventRecord");
    check_cuda(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    check_cuda(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    return ms / n;
  };
  for (int i = 0; i < 3; ++i) launch();
  int const n = static_cast<int>(std::clamp(std::ceil(kWindowMs / window(10)), 10.0, 1e7));
  std::vector<float> times;
  for (int i = 0; i < windows; ++i) times.push_back(window(n));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// Host microseconds one launch takes to issue: the median over 7 runs of 50 launches, timed on
// the CPU with the GPU draining in between (so no launch waits on a full queue).
template <class Launch>
double host_us(Launch&& launch) {
  std::vector<double> times;
  for (int i = 0; i < 7; ++i) {
    check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    auto const t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < 50; ++r) launch();
    auto const t1 = std::chrono::steady_clock::now();
    times.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / 50);
  }
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// A comma-separated list of names, each `a` or `b` (else the option's error).
std::vector<std::string> parse_names(std::string const& list, std::string const& a,
                                     std::string const& b, std::string const& option) {
  std::vector<std::string> names;
  for (size_t at = 0; at <= list.size();) {
    size_t const end = std::min(list.find(',', at), list.size());
    std::string const t = list.substr(at, end - at);
    if (t != a && t != b) die(option + " takes " + a + " and " + b);
    names.push_back(t);
    at = end + 1;
  }
  return names;
}

struct Args {
  std::vector<int> batches = {1, 8, 32, 64};
  std::vector<int> kv_lens = {4096, 8192, 16384, 32768, 65536, 131072};
  std::vector<int> sq = {1};
  std::vector<int> pages = {0};
  std::vector<std::string> kv_dtypes = {"bf16"};
  // The cache's layout: "nhd" rows of all K/V heads per key (vLLM's, the default) or "hnd" each
  // head's keys together (Hugging Face's static cache; FlashInfer's HND pages).
  std::vector<std::string> layouts = {"nhd"};
  int heads_q = 32, heads_kv = 8, head_dim = 128, splits = 0, iters = 3;
  std::string kernel;
  int tokens = 32768, min_len = 100, max_len = 4000;
  std::string dtype = "bf16";  // varlen's q, k and v
  bool workspace = true;       // varlen: the plan's workspace
};

void decode(fa_context_t* ctx, Args const& a) {
  std::printf("kv_dtype,batch,kv_len,sq,page,splits,kernel,us,gbps,graph_us,host_us,layout\n");
  std::mt19937 rng(7);
  for (std::string const& kv_dtype : a.kv_dtypes) {
  bool const e4m3 = kv_dtype == "e4m3";
  int const kv_elem = e4m3 ? 1 : 2;
  // Per-tensor descales (1.0): an FP8 cache is read with them in serving.
  float const one = 1.0f;
  DeviceBuffer descale(e4m3 ? sizeof(float) : 0);
  if (e4m3) check_cuda(cudaMemcpy(descale.ptr, &one, 4, cudaMemcpyHostToDevice), "copy");
  for (std::string const& layout : a.layouts) {
  bool const hnd = layout == "hnd";
  for (int page : a.pages) {
    for (int sq : a.sq) {
      for (int batch : a.batches) {
        for (int len : a.kv_lens) {
          int64_t const d = a.head_dim, hkv = a.heads_kv, hq = a.heads_q;
          int64_t const row = hkv * d;  // elements per cache row
          fa_config c;
          fa_config_init(&c);
          c.batch = batch;
          c.seqlen_q = sq;
          c.seqlen_k = len;
          c.heads_q = hq;
          c.heads_kv = hkv;
          c.head_dim = d;
          c.causal = sq > 1;
          c.num_splits = a.splits;
          if (e4m3) c.kv_dtype = FA_DTYPE_E4M3;
          int64_t rows;  // cache rows allocated
          std::vector<int32_t> table;
          if (page == 0) {
            c.layout = FA_LAYOUT_KV_CACHE;
            rows = int64_t(batch) * len;
            if (hnd) {
              c.k_batch_stride = c.v_batch_stride = int64_t(len) * row;
              c.k_seq_stride = c.v_seq_stride = d;
              c.k_head_stride = c.v_head_stride = int64_t(len) * d;
            }
          } else {
            c.layout = FA_LAYOUT_PAGED_KV;
            int64_t const per_seq = (len + page - 1) / page;
            c.num_pages = batch * per_seq;
            c.page_size = page;
            c.max_pages_per_seq = per_seq;
            c.k_batch_stride = c.v_batch_stride = page * row;
            c.k_seq_stride = c.v_seq_stride = hnd ? d : row;
            c.k_head_stride = c.v_head_stride = hnd ? int64_t(page) * d : d;
            rows = c.num_pages * page;
            table.resize(size_t(c.num_pages));
            std::iota(table.begin(), table.end(), 0);
            std::shuffle(table.begin(), table.end(), rng);
          }
          size_t const kv_bytes = size_t(rows) * size_t(row) * kv_elem;
          DeviceBuffer q(size_t(batch) * sq * hq * d * 2), k(kv_bytes), v(kv_bytes),
              o(size_t(batch) * sq * hq * d * 2);
          fill(q);
          if (e4m3) {
            fill_e4m3(k);
            fill_e4m3(v);
          } else {
            fill(k);
            fill(v);
          }
          std::vector<int32_t> lens(size_t(batch), len);
          DeviceBuffer lens_d(lens.size() * 4), table_d(table.size() * 4);
          check_cuda(cudaMemcpy(lens_d.ptr, lens.data(), lens_d.bytes, cudaMemcpyHostToDevice), "copy");
          if (!table.empty()) {
            check_cuda(cudaMemcpy(table_d.ptr, table.data(), table_d.bytes, cudaMemcpyHostToDevice), "copy");
          }
          fa_plan_t* plan = nullptr;
          if (a.kernel.empty()) {
            check(fa_plan_create(ctx, &c, &plan), "fa_plan_create");
          } else {
            fa_kernel_config kc;
            fa_kernel_config_init(&kc);
            check(fa_kernel_config_parse(a.kernel.c_str(), &kc), "--kernel");
            check(fa_plan_create_with_kernel(ctx, &c, &kc, &plan), "fa_plan_create_with_kernel");
          }
          size_t ws = 0;
          int splits = 0;
          check(fa_plan_workspace_size(plan, &ws), "workspace");
          check(fa_plan_num_splits(plan, &splits), "splits");
          DeviceBuffer workspace(ws);
          fa_run_args args;
          fa_run_args_init(&args);
          args.cache_seqlens = static_cast<int32_t const*>(lens_d.ptr);
          args.block_table = table.empty() ? nullptr : static_cast<int32_t const*>(table_d.ptr);
          args.workspace = workspace.ptr;
          args.workspace_size = ws;
          if (e4m3) args.k_descale = args.v_descale = static_cast<float const*>(descale.ptr);
          auto const run = [&] {
            check(fa_plan_run_ex(plan, q.ptr, k.ptr, v.ptr, o.ptr, nullptr, &args, nullptr), "run");
          };
          float const ms = median_ms(run, a.iters);
          double const issue_us = host_us(run);
          // The same step captured in a CUDA graph and replayed back to back: the GPU's time
          // alone, without the host's issue cost.
          cudaStream_t stream;
          check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
          cudaGraph_t graph;
          cudaGraphExec_t exec;
          check_cuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "capture");
          check(fa_plan_run_ex(plan, q.ptr, k.ptr, v.ptr, o.ptr, nullptr, &args,
                               reinterpret_cast<fa_stream_t>(stream)), "run (captured)");
          check_cuda(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
          check_cuda(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
          float const graph_ms = median_ms([&] {
            check_cuda(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
          }, a.iters, stream);
          cudaGraphExecDestroy(exec);
          cudaGraphDestroy(graph);
          cudaStreamDestroy(stream);
          fa_kernel_config kc;
          fa_kernel_config_init(&kc);
          check(fa_plan_kernel(plan, &kc), "fa_plan_kernel");
          char name[128];
          fa_kernel_config_name(&kc, name, sizeof name, nullptr);
          double const bytes = 2.0 * batch * double(len) * row * kv_elem + 2.0 * q.bytes;
          std::printf("%s,%d,%d,%d,%d,%d,\"%s\",%.2f,%.1f,%.2f,%.2f,%s\n", kv_dtype.c_str(),
                      batch, len, sq, page, splits, name, ms * 1e3, bytes / (ms * 1e-3) / 1e9,
                      graph_ms * 1e3, issue_us, layout.c_str());
          std::fflush(stdout);
          fa_plan_destroy(plan);
        }
      }
    }
  }
  }
  }
}

// TFLOP/s of a causal forward over sequences of `lens` (varlen when more than one length).
double varlen_tflops(fa_context_t* ctx, std::vector<int> const& lens, bool varlen, Args const& a) {
  int64_t const d = 128, h = 16;
  bool const e4m3 = a.dtype == "e4m3";
  size_t const elem = e4m3 ? 1 : 2;
  int64_t const total = std::accumulate(lens.begin(), lens.end(), int64_t{0});
  int const max_len = *std::max_element(lens.begin(), lens.end());
  fa_config c;
  fa_config_init(&c);
  c.causal = 1;
  c.heads_q = c.heads_kv = h;
  c.head_dim = d;
  if (e4m3) {
    c.dtype = c.kv_dtype = FA_DTYPE_E4M3;
    c.out_dtype = FA_DTYPE_BF16;
  }
  std::vector<int32_t> cu(1, 0);
  for (int l : lens) cu.push_back(cu.back() + l);
  if (varlen) {
    c.layout = FA_LAYOUT_VARLEN;
    c.batch = int64_t(lens.size());
    c.seqlen_q = c.seqlen_k = max_len;
    c.total_q = c.total_k = total;
  } else {
    c.batch = int64_t(lens.size());
    c.seqlen_q = c.seqlen_k = lens[0];
  }
  DeviceBuffer q(size_t(total) * h * d * elem), k(q.bytes), v(q.bytes), o(size_t(total) * h * d * 2),
      cu_d(cu.size() * 4);
  for (DeviceBuffer* b : {&q, &k, &v}) {
    if (e4m3) {
      fill_e4m3(*b);
    } else {
      fill(*b);
    }
  }
  check_cuda(cudaMemcpy(cu_d.ptr, cu.data(), cu_d.bytes, cudaMemcpyHostToDevice), "copy");
  fa_run_args args;
  fa_run_args_init(&args);
  if (varlen) args.cu_seqlens_q = args.cu_seqlens_k = static_cast<int32_t const*>(cu_d.ptr);
  fa_plan_t* plan = nullptr;
  if (a.kernel.empty()) {
    check(fa_plan_create(ctx, &c, &plan), "fa_plan_create");
  } else {
    fa_kernel_config kc;
    fa_kernel_config_init(&kc);
    check(fa_kernel_config_parse(a.kernel.c_str(), &kc), "--kernel");
    check(fa_plan_create_with_kernel(ctx, &c, &kc, &plan), "fa_plan_create_with_kernel");
  }
  size_t ws = 0;
  if (a.workspace) check(fa_plan_workspace_size(plan, &ws), "fa_plan_workspace_size");
  DeviceBuffer workspace(ws);
  args.workspace = ws > 0 ? workspace.ptr : nullptr;
  args.workspace_size = ws;
  float const ms = median_ms([&] {
    check(fa_plan_run_ex(plan, q.ptr, k.ptr, v.ptr, o.ptr, nullptr, &args, nullptr), "run");
  }, a.iters);
  fa_plan_destroy(plan);
  double flops = 0;
  for (int l : lens) flops += 4.0 * h * double(l) * l * d / 2.0;
  return flops / (ms * 1e-3) / 1e12;
}

void varlen(fa_context_t* ctx, Args const& a) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> len(a.min_len, a.max_len);
  std::vector<int> lens;
  int sum = 0;
  while (sum < a.tokens) {
    lens.push_back(std::min(len(rng), a.tokens - sum));
    sum += lens.back();
  }
  // The dense batch of equal causal work: n sequences of length L with n L^2 = sum of l^2 and
  // n L = the same tokens.
  double sq = 0;
  for (int l : lens) sq += double(l) * l;
  int const dense_len = static_cast<int>(std::lround(sq / sum));
  int const dense_batch = std::max(1, static_cast<int>(std::lround(double(sum) / dense_len)));
  double const v = varlen_tflops(ctx, lens, true, a);
  double const dn = varlen_tflops(ctx, std::vector<int>(size_t(dense_batch), dense_len), false, a);
  std::printf("varlen,%zu sequences,%d tokens,lengths %d..%d,%.1f TFLOP/s\n", lens.size(), sum,
              *std::min_element(lens.begin(), lens.end()), *std::max_element(lens.begin(), lens.end()), v);
  std::printf("dense,%d x %d,%d tokens,equal work,%.1f TFLOP/s\n", dense_batch, dense_len,
              dense_batch * dense_len, dn);
  std::printf("ratio,%.3f\n", v / dn);
}

void copy_bandwidth(int iters) {
  size_t const bytes = size_t(2) << 30;
  DeviceBuffer a(bytes), b(bytes);
  float const ms = median_ms([&] { check_cuda(cudaMemcpy(b.ptr, a.ptr, bytes, cudaMemcpyDeviceToDevice), "copy"); }, iters);
  std::printf("copy,%.1f GB/s (read + write of %zu MiB)\n", 2.0 * bytes / (ms * 1e-3) / 1e9, bytes >> 20);
}

}  // namespace

int main(int argc, char** argv) {
  bench::program = "decode_bench";
  if (argc < 2) die("usage: decode_bench decode|varlen|copy [options]");
  std::string const mode = argv[1];
  Args a;
  for (int i = 2; i < argc; ++i) {
    std::string const o = argv[i];
    auto next = [&]() -> char const* {
      if (i + 1 >= argc) die(o + " needs a value");
      return argv[++i];
    };
    if (o == "--batches") a.batches = parse_list(next());
    else if (o == "--kv-lens") a.kv_lens = parse_list(next());
    else if (o == "--sq") a.sq = parse_list(next());
    else if (o == "--pages") a.pages = parse_list(next());
    else if (o == "--heads") {
      std::vector<int> h = parse_list(next());
      if (h.size() != 2) die("--heads takes heads_q,heads_kv");
      a.heads_q = h[0];
      a.heads_kv = h[1];
    } else if (o == "--head-dim") a.head_dim = parse_list(next()).at(0);
    else if (o == "--splits") a.splits = parse_list(next()).at(0);
    else if (o == "--kernel") a.kernel = next();
    else if (o == "--kv-dtype") a.kv_dtypes = parse_names(next(), "bf16", "e4m3", o);
    else if (o == "--layout") a.layouts = parse_names(next(), "nhd", "hnd", o);
    else if (o == "--iters") a.iters = parse_list(next()).at(0);
    else if (o == "--tokens") a.tokens = parse_list(next()).at(0);
    else if (o == "--min-len") a.min_len = parse_list(next()).at(0);
    else if (o == "--max-len") a.max_len = parse_list(next()).at(0);
    else if (o == "--dtype") {
      a.dtype = next();
      if (a.dtype != "bf16" && a.dtype != "e4m3") die("--dtype takes bf16 or e4m3");
    } else if (o == "--workspace") a.workspace = parse_list(next()).at(0) != 0;
    else die("unknown option " + o);
  }
  if (mode == "copy") {
    copy_bandwidth(a.iters);
    return 0;
  }
  fa_context_t* ctx = nullptr;
  check(fa_context_create(0, &ctx), "fa_context_create");
  if (mode == "decode") decode(ctx, a);
  else if (mode == "varlen") varlen(ctx, a);
  else die("unknown mode " + mode);
  fa_context_destroy(ctx);
  return 0;
}
