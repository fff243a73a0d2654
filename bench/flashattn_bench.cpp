// Times libflashattn's forward on the FlashAttention-paper grid and prints TFLOP/s.
//
//   flashattn_bench [--kernel NAME | --all-kernels] [--dtype bf16|fp16|e4m3] [--head-dims 64,192:128,...]
//                   [--causal 0,1] [--seqlens 512,1024,...,16384] [--iters N] [--csv]
//                   [--autotune] [--window-ms MS] [--heads N] [--row-align N] [--workspace 0|1]
//
// Grid (FA2/FA3 papers): hidden size 2048 (heads = 2048 / head_dim; 32 where head_dim does not
// divide 2048, as for d 192; --heads N sets them for every head dim, to time dims at the same
// shapes), batch = 16384 / seqlen, so every point moves the same 16384 tokens. --row-align N
// gives each head's row of q, k, v and o its head dim rounded up to N elements (strided views;
// default: packed), e.g. 16 to start every row of a bf16 d 72 on a 32-byte sector.
// A head dim written D:DV runs value head dim DV (DeepSeek's 192:128), the heads D's.
// FLOPs = 2 * batch * heads * seqlen^2 * (head_dim + head_dim_v), halved for causal: 4 * ... *
// head_dim where they are equal. The CSV's last column is head_dim_v. Each point launches back to back between two CUDA events for at least --window-ms
// (200) milliseconds after 3 warm-up launches, as a serving loop runs them, and reports the median
// of --iters (3) such windows' mean times (one launch between two events with a wait would also
// count the host's launch work, which back-to-back calls overlap; sweeps of every kernel pass a
// shorter window). Without --kernel the context's own choice runs (what fa_forward() picks);
// --all-kernels times every registered kernel of the dtype at the smallest built head dim that
// holds each --head-dims value (a dim between the built ones: the kernels it can run on).
// --autotune runs fa_autotune() at each point after timing the default choice, then times the
// tuned choice too.
// --dtype e4m3 times the FP8 kernels: e4m3 Q, K and V (standard normal values rounded to e4m3,
// descales 1), O in bf16.
// Each plan runs with the workspace fa_plan_workspace_size() asks for (allocated once per point,
// as a serving loop keeps its own; FP8 prefill uses it for V transposed ahead of the run);
// --workspace 0 passes none (the runs that need none: FP8 then transposes V in the kernel).
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "flashattn.h"

namespace {

using bench::check;
using bench::check_cuda;
using bench::die;

std::vector<int> parse_list(char const* text) { return bench::parse_list(text, 1); }

std::string name_of(fa_kernel_config const& k) {
  char buf[128];
  check(fa_kernel_config_name(&k, buf, sizeof buf, nullptr), "fa_kernel_config_name");
  return buf;
}

// Standard normal, rounded to bf16 or fp16 bits.
std::vector<uint16_t> random_16bit(size_t n, int dtype, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<uint16_t> out(n);
  for (uint16_t& x : out) {
    float f = dist(rng);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    if (dtype == FA_DTYPE_BF16) {
      x = static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
    } else {  // |f| < 2^15 (a normal sample is): a half or zero; truncation suffices for timing
      uint32_t e = (bits >> 23) & 0xFF;
      uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
      x = e < 113 ? sign : static_cast<uint16_t>(sign | ((e - 112) << 10) | ((bits >> 13) & 0x3FF));
    }
  }
  return out;
}

// Standard normal, rounded to e4m3 (e4m3fn) bytes: to nearest on the 3-bit mantissa, subnormals
// below 2^-6, saturated at 448.
std::vector<uint8_t> random_e4m3(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<uint8_t> out(n);
  for (uint8_t& x : out) {
    float const f = dist(rng), a = std::fabs(f);
    uint8_t const sign = f < 0 ? 0x80 : 0;
    int e = 0;
    int m = 0;
    if (a < 0x1p-6f) {
      m = static_cast<int>(std::nearbyint(a * 512.f));  // subnormal m * 2^-9 (m = 8: 2^-6)
      e = m == 8 ? 1 : 0;
      m = m == 8 ? 0 : m;
    } else {
      int exp = 0;
      float const frac = std::frexp(a, &exp);  // a = frac 2^exp, frac in [0.5, 1)
      m = static_cast<int>(std::nearbyint((frac * 2.f - 1.f) * 8.f));
      e = exp - 1 + 7;
      if (m == 8) m = 0, ++e;
      if (e > 15 || (e == 15 && m > 6)) e = 15, m = 6;  // 448
    }
    x = static_cast<uint8_t>(sign | (e << 3) | m);
  }
  return out;
}

// A grid's head dims: Q and K's, and V and O's.
struct Dims {
  int d;
  int dv;
};

// "64,192:128" -> {64, 64}, {192, 128}.
std::vector<Dims> parse_dims(char const* text) {
  std::vector<Dims> dims;
  for (char const* p = text; *p;) {
    char* end = nullptr;
    long const d = std::strtol(p, &end, 10);
    long dv = d;
    if (end != p && *end == ':') {
      char const* at = end + 1;
      dv = std::strtol(at, &end, 10);
      if (end == at) dv = 0;
    }
    if (end == p || d < 1 || dv < 1 || (*end != ',' && *end != '\0')) {
      die(std::string("bad --head-dims: ") + text + " (expected e.g. 64,128,192:128)");
    }
    dims.push_back({static_cast<int>(d), static_cast<int>(dv)});
    p = *end == ',' ? end + 1 : end;
  }
  return dims;
}

struct Options {
  int dtype = FA_DTYPE_BF16;
  std::vector<Dims> head_dims = {{64, 64}, {128, 128}, {256, 256}};
  std::vector<int> causal = {0, 1};
  std::vector<int> seqlens = {512, 1024, 2048, 4096, 8192, 16384};
  std::string kernel;
  bool all_kernels = false;
  int iters = 3;  // windows, of which the median is reported
  bool csv = false;
  bool autotune = false;
  double window_ms = 200;  // back-to-back timing over at least this long
  int heads = 0;           // 0: 2048 / head_dim (32 where it does not divide)
  int row_align = 0;       // 0: packed rows; else each head's row rounded up to this many elements
  bool workspace = true;   // pass the plan's workspace
};

// `text` as an integer from lo to hi, or the program ends naming `flag`.
int int_in(std::string const& flag, char const* text, long lo, long hi) {
  char* end = nullptr;
  long const n = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || n < lo || n > hi) {
    die("bad " + flag + ": " + text + " (expected " + std::to_string(lo) + " to " +
        std::to_string(hi) + ")");
  }
  return static_cast<int>(n);
}

Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> char const* {
      if (i + 1 >= argc) die("missing value after " + a);
      return argv[++i];
    };
    if (a == "--dtype") {
      std::string d = next();
      o.dtype = d == "bf16"   ? FA_DTYPE_BF16
                : d == "fp16" ? FA_DTYPE_FP16
                : d == "e4m3" ? FA_DTYPE_E4M3
                              : 0;
      if (o.dtype == 0) die("--dtype must be bf16, fp16 or e4m3");
    } else if (a == "--head-dims") {
      o.head_dims = parse_dims(next());
    } else if (a == "--causal") {
      o.causal.clear();
      for (char const* p = next(); *p; ++p) {
        if (*p == '0' || *p == '1') o.causal.push_back(*p - '0');
      }
    } else if (a == "--seqlens") {
      o.seqlens = parse_list(next());
    } else if (a == "--kernel") {
      o.kernel = next();
    } else if (a == "--all-kernels") {
      o.all_kernels = true;
    } else if (a == "--iters") {
      o.iters = std::max(1, std::atoi(next()));
    } else if (a == "--csv") {
      o.csv = true;
    } else if (a == "--autotune") {
      o.autotune = true;
    } else if (a == "--window-ms") {
      o.window_ms = std::max(0.1, std::atof(next()));
    } else if (a == "--heads") {
      o.heads = int_in(a, next(), 1, 1024);
    } else if (a == "--row-align") {
      o.row_align = int_in(a, next(), 1, 256);
    } else if (a == "--workspace") {
      o.workspace = int_in(a, next(), 0, 1) == 1;
    } else {
      die("unknown argument " + a + " (see the comment at the top of bench/flashattn_bench.cpp)");
    }
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  bench::program = "flashattn_bench";
  Options opt = parse_args(argc, argv);
  fa_context_t* ctx = nullptr;
  check(fa_context_create(0, &ctx), "fa_context_create(0)");
  cudaDeviceProp prop;
  check_cuda(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");

  constexpr int64_t kTokens = 16384, kHidden = 2048;
  auto heads_for = [&opt](int64_t d) {
    return opt.heads > 0 ? int64_t{opt.heads} : kHidden % d == 0 ? kHidden / d : int64_t{32};
  };
  // A head's row: its head dim, or with --row-align rounded up to that many elements.
  auto row_of = [&opt](int64_t d) {
    return opt.row_align > 0 ? (d + opt.row_align - 1) / opt.row_align * opt.row_align : d;
  };
  int64_t width = 0;  // the widest row of heads x head dim: 2048, or 32 x 192 = 6144 (or --heads')
  for (Dims const& dims : opt.head_dims) width = std::max(width, heads_for(dims.d) * row_of(dims.d));
  size_t const elems = static_cast<size_t>(kTokens * width);
  void *q, *k, *v, *o;
  for (void** p : {&q, &k, &v, &o}) check_cuda(cudaMalloc(p, elems * 2), "cudaMalloc");
  uint64_t seed = 1;
  bool const e4m3 = opt.dtype == FA_DTYPE_E4M3;
  for (void* p : {q, k, v}) {
    if (e4m3) {
      std::vector<uint8_t> host = random_e4m3(elems, seed++);
      check_cuda(cudaMemcpy(p, host.data(), elems, cudaMemcpyHostToDevice), "cudaMemcpy");
    } else {
      std::vector<uint16_t> host = random_16bit(elems, opt.dtype, seed++);
      check_cuda(cudaMemcpy(p, host.data(), elems * 2, cudaMemcpyHostToDevice), "cudaMemcpy");
    }
  }
  char const* const dtype_label = e4m3 ? "e4m3" : opt.dtype == FA_DTYPE_BF16 ? "bf16" : "fp16";
  cudaEvent_t start, stop;
  check_cuda(cudaEventCreate(&start), "cudaEventCreate");
  check_cuda(cudaEventCreate(&stop), "cudaEventCreate");

  if (opt.csv) {
    std::printf("kernel,dtype,head_dim,causal,seqlen,batch,heads,ms,tflops,head_dim_v\n");
  } else {
    // Which libflashattn this run loaded (the build tree's, or one LD_LIBRARY_PATH names).
    Dl_info library{};
    dladdr(dlsym(RTLD_DEFAULT, "fa_version_string"), &library);
    std::printf("libflashattn %s (%s) on %s (sm_%d%d)\n", fa_version_string(),
                library.dli_fname != nullptr ? library.dli_fname : "?", prop.name, prop.major,
                prop.minor);
    std::printf("%-7s %-6s %-6s %9s %9s  %s\n", "d", "causal", "seqlen", "ms", "TFLOP/s",
                "kernel");
  }
  for (Dims const& dims : opt.head_dims) {
    int const d = dims.d, dv = dims.dv;
    std::string const dims_label =
        dv == d ? std::to_string(d) : std::to_string(d) + ":" + std::to_string(dv);
    // The kernels to time at this head dim: one named, every registered one, or the default.
    std::vector<fa_kernel_config> kernels;
    if (!opt.kernel.empty()) {
      fa_kernel_config kc;
      check(fa_kernel_config_init(&kc), "init");
      check(fa_kernel_config_parse(opt.kernel.c_str(), &kc), "--kernel");
      if (kc.d_head != d || kc.dtype != opt.dtype) continue;
      kernels.push_back(kc);
    } else if (opt.all_kernels) {
      // The kernels of the smallest built head dim that holds d: d itself where it is built, else
      // the one a dim between the built ones runs on (a narrow pair or the general instantiation).
      std::vector<fa_kernel_config> all(fa_kernel_count());
      int64_t at = 0;
      for (size_t i = 0; i < all.size(); ++i) {
        check(fa_kernel_config_init(&all[i]), "init");
        check(fa_kernel_get(i, &all[i]), "fa_kernel_get");
        if (all[i].dtype == opt.dtype && all[i].d_head >= d && (at == 0 || all[i].d_head < at)) {
          at = all[i].d_head;
        }
      }
      for (fa_kernel_config const& kc : all) {
        if (kc.d_head == at && kc.dtype == opt.dtype) kernels.push_back(kc);
      }
    }
    bool const use_default = kernels.empty() && opt.kernel.empty() && !opt.all_kernels;
    for (int causal : opt.causal) {
      for (int seqlen : opt.seqlens) {
        fa_config cfg;
        check(fa_config_init(&cfg), "fa_config_init");
        cfg.dtype = opt.dtype;
        if (e4m3) cfg.kv_dtype = FA_DTYPE_E4M3;  // o: bf16, fa_config.out_dtype's default
        cfg.batch = kTokens / seqlen;
        cfg.seqlen_q = cfg.seqlen_k = seqlen;
        cfg.heads_q = cfg.heads_kv = heads_for(d);
        cfg.head_dim = d;
        cfg.head_dim_v = dv;
        cfg.causal = causal;
        if (opt.row_align > 0) {
          int64_t const hs = row_of(d), hsv = row_of(dv), rows = cfg.heads_q * seqlen;
          cfg.q_head_stride = cfg.k_head_stride = hs;
          cfg.q_seq_stride = cfg.k_seq_stride = cfg.heads_q * hs;
          cfg.q_batch_stride = cfg.k_batch_stride = rows * hs;
          cfg.v_head_stride = cfg.o_head_stride = hsv;
          cfg.v_seq_stride = cfg.o_seq_stride = cfg.heads_q * hsv;
          cfg.v_batch_stride = cfg.o_batch_stride = rows * hsv;
        }
        double const flops = 2.0 * cfg.batch * cfg.heads_q * double(seqlen) * seqlen * (d + dv) /
                             (causal ? 2.0 : 1.0);
        // One timed configuration: plan, warm up, time (--iters or --window-ms), print.
        auto time_plan = [&](fa_plan_t* plan, char const* label) {
          fa_kernel_config used;
          check(fa_kernel_config_init(&used), "init");
          check(fa_plan_kernel(plan, &used), "fa_plan_kernel");
          size_t ws = 0;
          if (opt.workspace) check(fa_plan_workspace_size(plan, &ws), "fa_plan_workspace_size");
          void* workspace = nullptr;
          if (ws > 0) check_cuda(cudaMalloc(&workspace, ws), "cudaMalloc(workspace)");
          auto run = [&] {
            check(fa_plan_run(plan, q, k, v, o, nullptr, workspace, ws, nullptr), "fa_plan_run");
          };
          for (int w = 0; w < 3; ++w) run();
          auto elapsed_ms = [&](int calls) {
            check_cuda(cudaEventRecord(start), "cudaEventRecord");
            for (int c = 0; c < calls; ++c) run();
            check_cuda(cudaEventRecord(stop), "cudaEventRecord");
            check_cuda(cudaEventSynchronize(stop), "cudaEventSynchronize");
            float ms = 0;
            check_cuda(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
            return ms;
          };
          // The count that fills a window, from 8 calls; then --iters windows of that many.
          float const estimate = std::max(elapsed_ms(8) / 8, 1e-4f);
          int const calls = static_cast<int>(std::ceil(opt.window_ms / estimate));
          std::vector<float> times;
          for (int it = 0; it < opt.iters; ++it) times.push_back(elapsed_ms(calls) / calls);
          std::sort(times.begin(), times.end());
          float const ms = times[times.size() / 2];
          double const tflops = flops / (ms * 1e-3) / 1e12;
          std::string name = std::string(label) + name_of(used);
          if (opt.csv) {
            std::printf("\"%s\",%s,%d,%d,%d,%lld,%lld,%.4f,%.1f,%d\n", name.c_str(),
                        dtype_label, d, causal, seqlen,
                        static_cast<long long>(cfg.batch), static_cast<long long>(cfg.heads_q), ms,
                        tflops, dv);
          } else {
            std::printf("%-7s %-6d %-6d %9.4f %9.1f  %s\n", dims_label.c_str(), causal, seqlen, ms,
                        tflops, name.c_str());
          }
          std::fflush(stdout);
          if (workspace != nullptr) check_cuda(cudaFree(workspace), "cudaFree(workspace)");
        };
        size_t const n_runs = use_default ? 1 : kernels.size();
        for (size_t r = 0; r < n_runs; ++r) {
          fa_plan_t* plan = nullptr;
          fa_status s = use_default ? fa_plan_create(ctx, &cfg, &plan)
                                    : fa_plan_create_with_kernel(ctx, &cfg, &kernels[r], &plan);
          if (s != FA_STATUS_SUCCESS) {
            std::fprintf(stderr, "skipped d=%s causal=%d seqlen=%d: %s\n", dims_label.c_str(), causal,
                         seqlen, fa_last_error_detail());
            continue;
          }
          time_plan(plan, opt.autotune ? "default " : "");
          fa_plan_destroy(plan);
        }
        if (opt.autotune) {
          check(fa_autotune(ctx, &cfg, q, k, v, o, nullptr, nullptr, nullptr, nullptr),
                "fa_autotune");
          fa_plan_t* plan = nullptr;
          check(fa_plan_create(ctx, &cfg, &plan), "fa_plan_create");
          time_plan(plan, "tuned ");
          fa_plan_destroy(plan);
        }
      }
    }
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  for (void* p : {q, k, v, o}) cudaFree(p);
  fa_context_destroy(ctx);
  return 0;
}
