// Tuning results: fa_autotune() (time the candidates on the caller's problem), and the versioned
// tuning file (fa_context_save_tuning / fa_context_load_tuning).
#include <cinttypes>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "api/config.hpp"
#include "api/context.hpp"
#include "api/status.hpp"
#include "api/tuning.hpp"
#include "core/family_config.hpp"
#include "core/kernel_config.hpp"
#include "core/kernel_config_text.hpp"
#include "core/tuning_file.hpp"
#include "cuda/device.hpp"
#include "cuda/heuristic.hpp"
#include "flashattn.h"

namespace fa {
namespace {

constexpr char kMagic[] = "libflashattn-tuning";
constexpr int kFormatVersion = 1;
// Timed launches per candidate, after one warm-up; the median counts.
constexpr int kTimedRuns = 10;
// A candidate replaces the built-in choice only when faster by more than this fraction: the same
// kernel timed twice on the H200 differed by up to 3.5% (docs/performance.md), so a smaller lead
// is noise, and keeping the measured choice is the better bet.
constexpr float kReplaceMargin = 0.03f;

int arch_of(fa_context_s const* ctx) { return ctx->gpu.cc_major * 10 + ctx->gpu.cc_minor; }

fa_status require_gpu(fa_context_s const* ctx, char const* what) {
  if (fa_status s = check_context(ctx); s != FA_STATUS_SUCCESS) return s;
  if (is_cpu(ctx)) return fail(FA_STATUS_WRONG_CONTEXT, "%s needs a GPU context", what);
  return FA_STATUS_SUCCESS;
}

}  // namespace

fa_status parse_tuning(std::string_view text, char const* source, int arch,
                       KernelLookup const& lookup, TunedKernels* out) {
  std::istringstream in{std::string(text)};
  std::string line;
  int const version = std::getline(in, line) ? tuning_file_version(line, kMagic) : -1;
  if (version < 0) {
    return fail(FA_STATUS_PARSE_ERROR, "'%s' is not a libflashattn tuning file", source);
  }
  if (version != kFormatVersion) {
    return fail(FA_STATUS_PARSE_ERROR,
                "'%s' is a version %d tuning file; this library reads version %d", source, version,
                kFormatVersion);
  }

  TunedKernels loaded;
  int ignored = 0, line_number = 1;
  int file_arch = -1;
  std::string first_reason;
  auto skip = [&](std::string const& why) {
    if (ignored++ == 0) first_reason = "line " + std::to_string(line_number) + ": " + why;
  };
  while (std::getline(in, line)) {
    ++line_number;
    if (line.empty() || line[0] == '#') continue;
    if (line.rfind("arch ", 0) == 0) {
      // strtol, not atoi: a number beyond int is undefined for atoi; here it is an unknown arch
      // (-1), whose entries are skipped.
      long value = std::strtol(line.c_str() + 5, nullptr, 10);
      file_arch = value >= INT_MIN && value <= INT_MAX ? static_cast<int>(value) : -1;
      continue;
    }
    size_t bar = line.find(" | ");
    std::istringstream fields(line.substr(0, bar));
    std::string dtype, dims;
    int64_t head_dim = 0, head_dim_v = 0, causal = -1, seqlen_q = 0, seqlen_k = 0;
    // The head dims: "128", or "192:128" for a value head dim that differs (since 0.3.0; a
    // reader before it skips such a line as malformed).
    auto parse_dims = [&] {
      std::istringstream in(dims);
      if (!(in >> head_dim)) return false;
      head_dim_v = head_dim;
      if (in.peek() == ':' && !(in.get() && in >> head_dim_v)) return false;
      return in.peek() == std::char_traits<char>::eof();
    };
    if (bar == std::string::npos || !(fields >> dtype >> dims >> causal >> seqlen_q >> seqlen_k) ||
        !parse_dims() || (dtype != "FP16" && dtype != "BF16") || (causal != 0 && causal != 1) ||
        head_dim < 1 || head_dim_v < 1 || seqlen_q < 1 || seqlen_k < 1) {
      skip("malformed entry \"" + line + "\"");
      continue;
    }
    if (file_arch != arch) {
      skip("tuned on sm_" + std::to_string(file_arch) + ", this device is sm_" +
           std::to_string(arch));
      continue;
    }
    KernelConfig kernel;
    std::string error;
    if (!parse_short_name(line.substr(bar + 3), &kernel, &error)) {
      skip(error);
      continue;
    }
    // The shape as a one-batch, one-head problem, checked as every fa_config is: a shape whose
    // tensors could not be addressed with int64 offsets is skipped, so the kernel lookup's grid
    // arithmetic cannot overflow (seqlen_q = 2^63 - 1 did, found by fuzz/fuzz_tuning_file.cpp).
    fa_config shape{};
    shape.struct_size = sizeof shape;
    shape.dtype = dtype == "FP16" ? FA_DTYPE_FP16 : FA_DTYPE_BF16;
    shape.causal = static_cast<int32_t>(causal);
    shape.batch = shape.heads_q = shape.heads_kv = 1;
    shape.head_dim = head_dim;
    shape.head_dim_v = head_dim_v;
    shape.seqlen_q = seqlen_q;
    shape.seqlen_k = seqlen_k;
    Problem p;
    if (to_problem(&shape, &p) != FA_STATUS_SUCCESS) {
      skip(fa_last_error_detail());
      continue;
    }
    cuda::KernelEntry const* entry = nullptr;
    if (lookup(kernel, p, &entry) != FA_STATUS_SUCCESS) {
      skip(fa_last_error_detail());
      continue;
    }
    loaded[choice_key(p)] = entry;
  }
  *out = std::move(loaded);
  if (ignored > 0) {
    return fail(FA_STATUS_TUNING_ENTRIES_IGNORED, "%d of %zu entries in '%s' ignored; first: %s",
                ignored, out->size() + static_cast<size_t>(ignored), source,
                first_reason.c_str());
  }
  clear_detail();
  return FA_STATUS_SUCCESS;
}

std::string format_tuning(int arch, TunedKernels const& tuned) {
  std::ostringstream text;
  text << kMagic << ' ' << kFormatVersion << '\n'
       << "# written by libflashattn " << FA_VERSION_STRING << "; one line per shape:\n"
       << "# <dtype> <head_dim>[:<head_dim_v>] <causal> <seqlen_q> <seqlen_k> | <kernel>\n"
       << "arch " << arch << '\n';
  for (auto const& [key, entry] : tuned) {
    auto const& [dtype, causal, head_dim, seqlen_q, seqlen_k, head_dim_v] = key;
    text << dtype_name(static_cast<DType>(dtype)) << ' ' << head_dim;
    if (head_dim_v != head_dim) text << ':' << head_dim_v;
    text << ' ' << (causal ? 1 : 0) << ' ' << seqlen_q << ' ' << seqlen_k << " | "
         << short_name(entry->config) << '\n';
  }
  return text.str();
}

}  // namespace fa

extern "C" {

FA_API fa_status fa_autotune(fa_context_t* ctx, fa_config const* config, void const* q,
                             void const* k, void const* v, void* o, float* lse,
                             fa_stream_t stream, fa_kernel_config* best, float* best_ms) {
  return fa::guarded([&] {
    using fa::cuda::KernelEntry;
    if (fa_status s = fa::require_gpu(ctx, "fa_autotune"); s != FA_STATUS_SUCCESS) return s;
    // A caller built against 0.2 passes a struct that holds mma.sync kernels only.
    if (best != nullptr && !fa::kernel_config_holds(*best, FA_FAMILY_MMA_SYNC)) {
      return fa::fail(FA_STATUS_BAD_STRUCT_SIZE,
                      "best->struct_size = %zu is smaller than %zu: initialise it with "
                      "fa_kernel_config_init()",
                      best->struct_size, sizeof(fa_kernel_config));
    }
    fa_plan_s plan;
    if (fa_status s = fa::build_plan(ctx, config, nullptr, &plan); s != FA_STATUS_SUCCESS) return s;
    fa::Problem const& p = plan.problem;
    if (fa_status s = fa::tune_refused(p, "fa_autotune"); s != FA_STATUS_SUCCESS) return s;

    // The built-in choice first, so that ties keep it; then the measured table's candidates; then
    // every kernel the seed's filter keeps.
    KernelEntry const* builtin = nullptr;
    if (fa_status s = fa::builtin_choice(ctx, p, &builtin); s != FA_STATUS_SUCCESS) return s;
    std::vector<KernelEntry const*> candidates = {builtin};
    auto add = [&](KernelEntry const* e) {
      for (KernelEntry const* c : candidates) {
        if (c == e) return;
      }
      candidates.push_back(e);
    };
    fa::cuda::for_each_candidate(fa::arch_of(ctx), p, [&](fa::KernelConfig const& k) {
      KernelEntry const* e = nullptr;
      if (fa::find_pinned(ctx, k, p, &e) == FA_STATUS_SUCCESS) add(e);
    });
    for (KernelEntry const* e : ctx->gpu.kernels) {
      if (fa::cuda::cannot_run(ctx->gpu, e->config, p).empty() &&
          fa::autotune_filter(e->config).empty()) {
        add(e);
      }
    }
    fa::clear_detail();  // find_pinned may have recorded why a table candidate is absent

    KernelEntry const* winner = nullptr;
    KernelEntry const* fastest_held = nullptr;  // the fastest kernel `best` can hold
    float winner_ms = 0.f, builtin_ms = 0.f, held_ms = 0.f;
    for (KernelEntry const* e : candidates) {
      float ms = 0.f;
      fa_status s = fa::cuda::time_kernel(ctx->gpu, *e, p, q, k, v, o, lse,
                                          reinterpret_cast<cudaStream_t>(stream), fa::kTimedRuns,
                                          &ms);
      if (s != FA_STATUS_SUCCESS) return s;
      if (e == builtin) builtin_ms = ms;
      if (winner == nullptr || ms < winner_ms) {
        winner = e;
        winner_ms = ms;
      }
      if (best != nullptr && fa::kernel_config_holds(*best, e->config.family) &&
          (fastest_held == nullptr || ms < held_ms)) {
        fastest_held = e;
        held_ms = ms;
      }
    }
    if (winner_ms > builtin_ms * (1.f - fa::kReplaceMargin)) {
      winner = builtin;
      winner_ms = builtin_ms;
    }
    // A 0.2 struct receives the fastest mma.sync kernel when the winner is an sm90 one: a kernel
    // it can pin again later, while the context records the winner.
    KernelEntry const* reported = winner;
    if (best != nullptr && !fa::kernel_config_holds(*best, winner->config.family)) {
      reported = fastest_held;
      if (reported == nullptr) {
        return fa::fail(FA_STATUS_BAD_STRUCT_SIZE,
                        "best->struct_size = %zu: the winner, %s, is %s, which a 0.2 struct "
                        "cannot hold, and no %s kernel ran the problem",
                        best->struct_size, fa::short_name(winner->config).c_str(),
                        fa::find_family_config(winner->config.family)->a_kernel,
                        fa::find_family_config(FA_FAMILY_MMA_SYNC)->name);
      }
    }
    {
      std::lock_guard lock(ctx->mutex);
      ctx->tuned[fa::choice_key(p)] = winner;
    }
    if (best != nullptr) {
      if (fa_status s = fa::from_kernel_config(reported->config, best); s != FA_STATUS_SUCCESS) {
        return s;
      }
    }
    if (best_ms != nullptr) *best_ms = reported == winner ? winner_ms : held_ms;
    return FA_STATUS_SUCCESS;
  });
}

FA_API fa_status fa_context_save_tuning(fa_context_t const* ctx, char const* path) {
  return fa::guarded([&] {
    if (fa_status s = fa::require_gpu(ctx, "fa_context_save_tuning"); s != FA_STATUS_SUCCESS) {
      return s;
    }
    if (path == nullptr) return fa::fail(FA_STATUS_INVALID_ARGUMENT, "path is NULL");
    fa::TunedKernels tuned;
    {
      std::lock_guard lock(ctx->mutex);
      tuned = ctx->tuned;
    }
    std::string const why = fa::write_text_file(path, fa::format_tuning(fa::arch_of(ctx), tuned));
    if (!why.empty()) {
      return fa::fail(FA_STATUS_IO_ERROR, "cannot write the tuning file '%s': %s", path,
                      why.c_str());
    }
    return FA_STATUS_SUCCESS;
  });
}

FA_API fa_status fa_context_load_tuning(fa_context_t* ctx, char const* path) {
  return fa::guarded([&] {
    if (fa_status s = fa::require_gpu(ctx, "fa_context_load_tuning"); s != FA_STATUS_SUCCESS) {
      return s;
    }
    if (path == nullptr) return fa::fail(FA_STATUS_INVALID_ARGUMENT, "path is NULL");
    std::string text;
    if (std::string const why = fa::read_text_file(path, &text); !why.empty()) {
      return fa::fail(FA_STATUS_IO_ERROR, "cannot read the tuning file '%s': %s", path,
                      why.c_str());
    }
    fa::TunedKernels loaded;
    auto lookup = [&](fa::KernelConfig const& kernel, fa::Problem const& p,
                      fa::cuda::KernelEntry const** entry) {
      return fa::find_pinned(ctx, kernel, p, entry);
    };
    fa_status s = fa::parse_tuning(text, path, fa::arch_of(ctx), lookup, &loaded);
    if (s == FA_STATUS_SUCCESS || s == FA_STATUS_TUNING_ENTRIES_IGNORED) {
      std::lock_guard lock(ctx->mutex);
      for (auto const& [key, entry] : loaded) ctx->tuned[key] = entry;
    }
    return s;
  });
}

}  // extern "C"
