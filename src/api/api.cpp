// The C API: contexts, plans, the one-shot forward and registry queries. Every entry point runs
// inside guarded(), so no exception crosses the C boundary, and fills outputs only on success.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>

#include "api/config.hpp"
#include "api/context.hpp"
#include "api/status.hpp"
#include "core/kernel_config.hpp"
#include "core/kernel_config_text.hpp"
#include "cpu/cpu_attention.hpp"
#include "cuda/device.hpp"
#include "cuda/registry.hpp"
#include "flashattn.h"

namespace fa {

bool is_cpu(fa_context_s const* ctx) { return ctx->device == FA_DEVICE_CPU; }

fa_status check_context(fa_context_s const* ctx) {
  return ctx == nullptr ? fail(FA_STATUS_INVALID_ARGUMENT, "ctx is NULL") : FA_STATUS_SUCCESS;
}

fa_status builtin_choice(fa_context_s* ctx, Problem const& p, cuda::KernelEntry const** out) {
  BuiltinKey const key = builtin_key(p);
  cuda::KernelEntry const* cached = nullptr;
  {
    std::lock_guard lock(ctx->mutex);
    if (auto const* hit = ctx->choices.find(key)) cached = *hit;
  }
  if (cached != nullptr && cuda::cannot_run(ctx->gpu, cached->config, p).empty()) {
    *out = cached;
    return FA_STATUS_SUCCESS;
  }
  cuda::KernelEntry const* chosen = nullptr;
  if (fa_status s = cuda::choose_kernel(ctx->gpu, p, &chosen); s != FA_STATUS_SUCCESS) return s;
  // The first problem of a key fills the cache; one with features its kernel cannot run
  // chooses anew each time rather than evicting it. Forced splits are not cached either: the key
  // leaves num_splits out, and a kernel picked for a forced split count must not become the pick
  // for the same shape without one. (A plan's fallback for a run without a workspace has its
  // own key: builtin_key's no_workspace.)
  if (cached == nullptr && p.num_splits <= 1) {
    std::lock_guard lock(ctx->mutex);
    ctx->choices.insert(key, chosen);
  }
  *out = chosen;
  return FA_STATUS_SUCCESS;
}

namespace {

fa_status choose_cached(fa_context_s* ctx, Problem const& p, cuda::KernelEntry const** out) {
  // Tuned choices are keyed by shape (choice_key): a 16-bit problem's never serves FP8 inputs,
  // which tune_refused() keeps out of the map.
  if (!p.fp8()) {
    std::lock_guard lock(ctx->mutex);
    if (auto it = ctx->tuned.find(choice_key(p));
        it != ctx->tuned.end() && cuda::cannot_run(ctx->gpu, it->second->config, p).empty()) {
      *out = it->second;
      return FA_STATUS_SUCCESS;
    }
  }
  return builtin_choice(ctx, p, out);
}

}  // namespace

fa_status tune_refused(Problem const& p, char const* caller) {
  if (!p.fp8()) return FA_STATUS_SUCCESS;
  return fail(FA_STATUS_UNSUPPORTED,
              "%s: fa_config.dtype = %d, kv_dtype = %d: FP8 inputs keep the built-in choice (a "
              "context's tuned choices are keyed by shape, which a 16-bit problem shares); pin a "
              "plan with fa_plan_create_with_kernel() instead",
              caller, static_cast<int>(p.dtype), static_cast<int>(p.kv_dtype));
}

fa_status find_pinned(fa_context_s const* ctx, KernelConfig const& pinned, Problem const& p,
                      cuda::KernelEntry const** out) {
  if (std::string why = fa::validate(pinned); !why.empty()) {
    return fail(FA_STATUS_INVALID_KERNEL_CONFIG, "%s: %s", fa::short_name(pinned).c_str(),
                why.c_str());
  }
  // A config whose extra fields are no-ops runs as the canonical kernel registered for it.
  KernelConfig const registered = canonical(pinned);
  auto it = std::find_if(ctx->gpu.kernels.begin(), ctx->gpu.kernels.end(),
                         [&](auto const* e) { return e->config == registered; });
  if (it == ctx->gpu.kernels.end()) {
    bool compiled = cuda::registry().count(registered) != 0;
    return fail(FA_STATUS_KERNEL_NOT_AVAILABLE, "%s: %s", fa::short_name(pinned).c_str(),
                compiled ? "compiled, but not runnable on this device"
                         : "not compiled into this build");
  }
  if (std::string why = fa::cuda::cannot_run(ctx->gpu, pinned, p); !why.empty()) {
    return fail(FA_STATUS_KERNEL_NOT_AVAILABLE, "%s", why.c_str());
  }
  *out = *it;
  return FA_STATUS_SUCCESS;
}

fa_status build_plan(fa_context_s* ctx, fa_config const* config, KernelConfig const* pinned,
                     fa_plan_s* plan) {
  if (fa_status s = check_context(ctx); s != FA_STATUS_SUCCESS) return s;
  fa::Problem p;
  if (fa_status s = fa::to_problem(config, &p); s != FA_STATUS_SUCCESS) return s;
  plan->ctx = ctx;
  plan->problem = p;
  if (is_cpu(ctx)) {
    if (pinned != nullptr) {
      return fail(FA_STATUS_WRONG_CONTEXT, "a GPU kernel cannot be pinned on a CPU context");
    }
    return FA_STATUS_SUCCESS;
  }
  if (fa_status s = fa::cuda::check_problem(p); s != FA_STATUS_SUCCESS) return s;
  if (pinned != nullptr) {
    if (fa_status s = find_pinned(ctx, *pinned, p, &plan->kernel); s != FA_STATUS_SUCCESS) return s;
  } else if (fa_status s = choose_cached(ctx, p, &plan->kernel); s != FA_STATUS_SUCCESS) {
    return s;
  }
  plan->schedule = fa::cuda::make_schedule(ctx->gpu, *plan->kernel, p, true);
  plan->params = fa::cuda::make_params(plan->kernel->config, p, plan->schedule);
  plan->unsplit_kernel = plan->kernel;
  if (plan->schedule.images_required) {
    fa::Problem bare = p;
    bare.no_workspace = true;
    // A build without a tile that transposes V itself has no fallback: a run without the
    // workspace then fails with FA_STATUS_WORKSPACE_TOO_SMALL (launch.cpp), naming its size.
    cuda::KernelEntry const* fallback = nullptr;
    if (choose_cached(ctx, bare, &fallback) == FA_STATUS_SUCCESS) {
      plan->unsplit_kernel = fallback;
    } else {
      clear_detail();  // the plan is made: its creation leaves no message
    }
  }
  plan->unsplit = fa::cuda::make_schedule(ctx->gpu, *plan->unsplit_kernel, p, false);
  plan->unsplit_params = fa::cuda::make_params(plan->unsplit_kernel->config, p, plan->unsplit);
  return FA_STATUS_SUCCESS;
}

namespace {

// The run pointers the problem uses (the others are ignored), each checked non-NULL.
fa_status run_pointers(Problem const& p, fa_run_args const* args, RunPointers* out) {
  fa_run_args a;
  std::memset(&a, 0, sizeof a);
  if (args != nullptr) {
    if (fa_status s = check_run_args_size(args); s != FA_STATUS_SUCCESS) return s;
    // A caller built before the descales passes a shorter struct: the fields it lacks stay NULL.
    std::memcpy(&a, args, std::min(args->struct_size, sizeof a));
  }
  bool const paged = p.layout == Layout::kPagedKv;
  struct Needed {
    char const* name;
    void const* value;
    bool used;
  };
  for (Needed n : {Needed{"cu_seqlens_q", a.cu_seqlens_q, p.needs_cu_seqlens()},
                   Needed{"cu_seqlens_k", a.cu_seqlens_k, p.needs_cu_seqlens()},
                   Needed{"cache_seqlens", a.cache_seqlens, p.needs_cache_seqlens()},
                   Needed{"block_table", a.block_table, paged},
                   Needed{"alibi_slopes", a.alibi_slopes, p.alibi != Alibi::kNone},
                   Needed{"sinks", a.sinks, p.sinks}}) {
    if (n.used && n.value == nullptr) {
      return fail(FA_STATUS_INVALID_ARGUMENT, "fa_run_args.%s is NULL, but fa_config uses it%s",
                  n.name, args == nullptr ? " (pass fa_run_args to fa_forward_ex/fa_plan_run_ex)" : "");
    }
  }
  // A descale of a 16-bit or fp32 tensor would be ignored by the GPU kernels: refused instead.
  for (Needed n : {Needed{"q_descale", a.q_descale, p.dtype == DType::kE4M3},
                   Needed{"k_descale", a.k_descale, p.kv_dtype == DType::kE4M3},
                   Needed{"v_descale", a.v_descale, p.kv_dtype == DType::kE4M3}}) {
    if (!n.used && n.value != nullptr) {
      return fail(FA_STATUS_INVALID_ARGUMENT,
                  "fa_run_args.%s = %p is set, but its tensor is not FA_DTYPE_E4M3 (fa_config.dtype "
                  "= %d, kv_dtype resolves to %d)",
                  n.name, n.value, static_cast<int>(p.dtype), static_cast<int>(p.kv_dtype));
    }
  }
  RunPointers r;
  r.q_descale = a.q_descale;
  r.k_descale = a.k_descale;
  r.v_descale = a.v_descale;
  if (p.needs_cu_seqlens()) {
    r.cu_seqlens_q = a.cu_seqlens_q;
    r.cu_seqlens_k = a.cu_seqlens_k;
  }
  if (p.needs_cache_seqlens()) r.cache_seqlens = a.cache_seqlens;
  if (paged) r.block_table = a.block_table;
  if (p.alibi != Alibi::kNone) r.alibi_slopes = a.alibi_slopes;
  if (p.sinks) r.sinks = a.sinks;
  *out = r;
  return FA_STATUS_SUCCESS;
}

// Every backend reads elements through typed pointers: each tensor is aligned to its element
// size, and lse and the run-time arrays to their 4-byte elements (a GPU asks for more, later).
// fa_forward and fa_merge_states check through this one function, before choosing a backend.
struct Aligned {
  char const* name;
  void const* value;
  size_t align;
};
fa_status check_alignment(std::initializer_list<Aligned> pointers) {
  for (Aligned ptr : pointers) {
    if (reinterpret_cast<uintptr_t>(ptr.value) % ptr.align != 0) {
      return fail(FA_STATUS_INVALID_ARGUMENT, "%s = %p is not aligned to its %zu-byte elements",
                  ptr.name, ptr.value, ptr.align);
    }
  }
  return FA_STATUS_SUCCESS;
}

fa_status check_alignment(Problem const& p, void const* q, void const* k, void const* v,
                          void const* o, float const* lse, RunPointers const& run) {
  auto const q_elem = static_cast<size_t>(dtype_size(p.dtype));
  auto const kv_elem = static_cast<size_t>(dtype_size(p.kv_dtype));
  auto const o_elem = static_cast<size_t>(dtype_size(p.out_dtype));
  return check_alignment({{"q", q, q_elem}, {"k", k, kv_elem}, {"v", v, kv_elem},
                          {"o", o, o_elem}, {"q_descale", run.q_descale, 4},
                          {"k_descale", run.k_descale, 4}, {"v_descale", run.v_descale, 4},
                          {"lse", lse, 4}, {"cu_seqlens_q", run.cu_seqlens_q, 4},
                          {"cu_seqlens_k", run.cu_seqlens_k, 4},
                          {"cache_seqlens", run.cache_seqlens, 4},
                          {"block_table", run.block_table, 4},
                          {"alibi_slopes", run.alibi_slopes, 4}, {"sinks", run.sinks, 4}});
}

// Outputs must not share memory with the inputs, the run-time arrays or each other (the header's
// rule): the address ranges [base, base + extent) come from the strides and sizes. Whole ranges
// are compared, so two interleaved tensors that share no element are refused too.
fa_status check_overlap(Problem const& p, void const* q, void const* k, void const* v, void* o,
                        float* lse, RunPointers const& run) {
  Extents const e = extents(p);
  auto const q_elem = static_cast<int64_t>(dtype_size(p.dtype));
  auto const kv_elem = static_cast<int64_t>(dtype_size(p.kv_dtype));
  auto const o_elem = static_cast<int64_t>(dtype_size(p.out_dtype));
  struct Range {
    char const* name;
    uintptr_t begin;
    uintptr_t end;
  };
  auto range = [](char const* name, void const* base, int64_t bytes) {
    auto const b = reinterpret_cast<uintptr_t>(base);
    return Range{name, b, base == nullptr ? b : b + static_cast<uintptr_t>(bytes)};
  };
  // Every count is at most 2^60 (checked_extents), so these byte counts fit int64.
  int64_t const i32 = 4;
  Range const out_o = range("o", o, e.o * o_elem);
  Range const inputs[] = {range("q", q, e.q * q_elem), range("k", k, e.k * kv_elem),
                          range("v", v, e.v * kv_elem),
                          range("q_descale", run.q_descale, e.descales * i32),
                          range("k_descale", run.k_descale, e.descales * i32),
                          range("v_descale", run.v_descale, e.descales * i32),
                          range("cu_seqlens_q", run.cu_seqlens_q, e.cu_seqlens * i32),
                          range("cu_seqlens_k", run.cu_seqlens_k, e.cu_seqlens * i32),
                          range("cache_seqlens", run.cache_seqlens, e.cache_seqlens * i32),
                          range("block_table", run.block_table, e.block_table * i32),
                          range("alibi_slopes", run.alibi_slopes, e.alibi_slopes * i32),
                          range("sinks", run.sinks, e.sinks * i32)};
  auto overlap = [](Range const& a, Range const& b) { return a.begin < b.end && b.begin < a.end; };
  for (Range const& in : inputs) {
    if (overlap(out_o, in)) {
      return fail(FA_STATUS_INVALID_ARGUMENT,
                  "o [%p, +%lld bytes) overlaps %s [%p, +%lld bytes): outputs must not share memory "
                  "with inputs",
                  o, static_cast<long long>(out_o.end - out_o.begin), in.name,
                  reinterpret_cast<void const*>(in.begin), static_cast<long long>(in.end - in.begin));
    }
  }
  if (lse != nullptr) {
    Range const out_lse = range("lse", lse, e.lse * static_cast<int64_t>(sizeof(float)));
    for (Range const& other : inputs) {
      if (overlap(out_lse, other)) {
        return fail(FA_STATUS_INVALID_ARGUMENT, "lse = %p overlaps %s = %p",
                    static_cast<void*>(lse), other.name, reinterpret_cast<void const*>(other.begin));
      }
    }
    if (overlap(out_lse, out_o)) {
      return fail(FA_STATUS_INVALID_ARGUMENT, "lse = %p overlaps o = %p", static_cast<void*>(lse),
                  o);
    }
  }
  return FA_STATUS_SUCCESS;
}

}  // namespace

fa_status run_plan(fa_plan_s const& plan, void const* q, void const* k, void const* v, void* o,
                   float* lse, fa_run_args const* args, fa_stream_t stream) {
  struct Pointer {
    char const* name;
    void const* value;
  };
  for (Pointer ptr : {Pointer{"q", q}, Pointer{"k", k}, Pointer{"v", v}, Pointer{"o", o}}) {
    if (ptr.value == nullptr) return fail(FA_STATUS_INVALID_ARGUMENT, "%s is NULL", ptr.name);
  }
  RunPointers run;
  if (fa_status s = run_pointers(plan.problem, args, &run); s != FA_STATUS_SUCCESS) return s;
  if (fa_status s = check_alignment(plan.problem, q, k, v, o, lse, run); s != FA_STATUS_SUCCESS) {
    return s;
  }
  if (fa_status s = check_overlap(plan.problem, q, k, v, o, lse, run); s != FA_STATUS_SUCCESS) {
    return s;
  }
  void* const workspace = args != nullptr ? args->workspace : nullptr;
  size_t const workspace_size = args != nullptr ? args->workspace_size : 0;
  if (is_cpu(plan.ctx)) {
    if (stream != nullptr) {
      return fail(FA_STATUS_WRONG_CONTEXT, "stream = %p given to a CPU context (must be NULL)",
                  static_cast<void*>(stream));
    }
    if (fa_status s = fa::cpu::check_run_pointers(plan.problem, run); s != FA_STATUS_SUCCESS) {
      return s;
    }
    fa::cpu::forward(plan.problem, q, k, v, o, lse, run, plan.ctx->cpu_threads);
    return FA_STATUS_SUCCESS;
  }
  cuda::LaunchTensors const tensors{q, k, v, o, lse, run, workspace, workspace_size};
  bool const short_workspace =
      workspace == nullptr || workspace_size < plan.schedule.workspace_bytes;
  bool const auto_split = plan.schedule.num_splits > 1 && plan.problem.num_splits == 0;
  // V's images go only into an aligned workspace (launch.cpp's bind_tensors).
  bool const no_images = plan.schedule.images_required &&
                         (short_workspace || reinterpret_cast<uintptr_t>(workspace) % 16 != 0);
  if ((short_workspace && auto_split) || no_images) {
    return cuda::launch(plan.ctx->gpu, *plan.unsplit_kernel, plan.unsplit_params, plan.unsplit,
                        tensors, reinterpret_cast<cudaStream_t>(stream));
  }
  return cuda::launch(plan.ctx->gpu, *plan.kernel, plan.params, plan.schedule, tensors,
                      reinterpret_cast<cudaStream_t>(stream));
}

}  // namespace fa

namespace {
using fa::build_plan;
using fa::check_context;
using fa::fail;
using fa::run_plan;
}  // namespace

extern "C" {

FA_API fa_status fa_config_init(fa_config* config) {
  return fa::guarded([&] {
    if (config == nullptr) return fail(FA_STATUS_INVALID_ARGUMENT, "config is NULL");
    std::memset(config, 0, sizeof *config);
    config->struct_size = sizeof *config;
    config->dtype = FA_DTYPE_BF16;
    config->batch = config->seqlen_q = config->seqlen_k = 1;
    config->heads_q = config->heads_kv = config->head_dim = 1;
    return FA_STATUS_SUCCESS;
  });
}

FA_API fa_status fa_config_validate(fa_config const* config) {
  return fa::guarded([&] {
    fa::Problem p;
    return fa::to_problem(config, &p);
  });
}

FA_API fa_status fa_config_extents(fa_config const* config, int64_t* q, int64_t* k, int64_t* v,
                                   int64_t* o, int64_t* lse) {
  return fa::guarded([&] {
    fa::Problem p;
    if (fa_status s = fa::to_problem(config, &p); s != FA_STATUS_SUCCESS) return s;
    fa::Extents const e = fa::extents(p);
    if (q != nullptr) *q = e.q;
    if (k != nullptr) *k = e.k;
    if (v != nullptr) *v = e.v;
    if (o != nullptr) *o = e.o;
    if (lse != nullptr) *lse = e.lse;
    return FA_STATUS_SUCCESS;
  });
}

FA_API fa_status fa_context_create(int device, fa_context_t** out) {
  return fa::guarded([&] {
    if (out == nullptr) return fail(FA_STATUS_INVALID_ARGUMENT, "out is NULL");
    if (device < FA_DEVICE_CPU) {
      return fail(FA_STATUS_INVALID_ARGUMENT, "device = %d must be >= 0 or FA_DEVICE_CPU (-1)",
                  device);
    }
    auto ctx = std::make_unique<fa_context_s>();
    ctx->device = device;
    if (device == FA_DEVICE_CPU) {
      ctx->cpu_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    } else if (fa_status s = fa::cuda::open_device(device, &ctx->gpu); s != FA_STATUS_SUCCESS) {
      return s;
    }
    *out = ctx.release();
    return FA_STATUS_SUCCESS;
  });
}

FA_API void fa_context_destroy(fa_context_t* ctx) { delete ctx; }

FA_API fa_status fa_context_device(fa_context_t const* ctx, int* device) {
  return fa::guarded([&] {
    if (fa_status s = check_context(ctx); s != FA_STATUS_SUCCESS) return s;
    if (device == nullptr) return fail(FA_STATUS_INVALID_ARGUMENT, "device is NULL");
    *device = ctx->device;
    return FA_STATUS_SUCCESS;
  });
}

FA_API fa_status fa_forward(fa_context_t* ctx, fa_config const* config, void const* q,
                            void const* k, void const* v, void* o, float* lse,
                            fa_stream_t stream) {
  return fa::guarded([&] {
    fa_plan_s plan;
    if (fa_status s = build_plan(ctx, config, nullptr, &plan); s != FA_STATUS_SUCCESS) return s;
    return run_plan(plan, q, k, v, o, lse, nullptr, stream);
  });
}

FA_API fa_status fa_forward_ex(fa_context_t* ctx, fa_config const* config, void const* q,
                               void const* k, void const* v, void* o, float* lse,
                               fa_run_args const* args, fa_stream_t stream) {
  return fa::guarded([&] {
    fa_plan_s plan;
    if (fa_status s = build_plan(ctx, config, nullptr, &plan); s != FA_STATUS_SUCCESS) return s;
    return run_plan(plan, q, k, v, o, lse, args, stream);
  });
}

FA_API fa_status fa_run_args_init(fa_run_args* args) {
  return fa::guarded([&] {
    if (args == nullptr) return fail(FA_STATUS_INVALID_ARGUMENT, "args is NULL");
    std::memset(args, 0, sizeof *args);
    args->struct_size = sizeof *args;
    return FA_STATUS_SUCCESS;
  });
}

FA_API fa_status fa_context_set_kernel(fa_context_t* ctx, fa_config const* config,
                                       fa_kernel_config const* kernel) {
  return fa::guarded([&] {
    fa::KernelConfig pinned;
    if (fa_status s = fa::to_kernel_config(kernel, &pinned); s != FA_STATUS_SUCCESS) return s;
    fa_plan_s plan;
    if (fa_status s = build_plan(ctx, config, &pinned, &plan); s != FA_STATUS_SUCCESS) return s;
    if (fa_status s = fa::tune_refused(plan.problem, "fa_context_set_kernel"); s != FA_STATUS_SUCCESS) {
      return s;
    }
    std::lock_guard lock(ctx->mutex);
    ctx->tuned[fa::choice_key(plan.problem)] = plan.kernel;
    return FA_STATUS_SUCCESS;
  });
}

FA_API fa_status fa_context_tuned_count(fa_context_t const* ctx, size_t* count) {
  return fa::guarded([&] {
    if (fa_status s = check_context(ctx); s != FA_STATUS_SUCCESS) return s;
    if (count == nullptr) return fail(FA_STATUS_INVALID_ARGUMENT, "count is NULL");
    std::lock_guard lock(ctx->mutex);
    *count = ctx->tuned.size();
    return FA_STATUS_SUCCESS;
  });
}

FA_API fa_status fa_plan_create(fa_context_t* ctx, fa_config const* config, fa_plan_t** out) {
  return fa::guarded([&] {
    if (out == nullptr) return fail(FA_STATUS_INVALID_ARGUMENT, "out is NULL");
    auto plan = std::make_unique<fa_plan_s>();
    if (fa_status s = build_plan(ctx, config, nullptr, plan.get()); s != FA_STATUS_SUCCESS) return s;
    *out = plan.release();
    return FA_STATUS_SUCCESS;
  });
}

FA_API fa_status fa_plan_create_with_kernel(fa_context_t* ctx, fa_config const* config,
                                            fa_kernel_config const* kernel, fa_plan_t** out) {
  return fa::guarded([&] {
    if (out == nullptr) return fail(FA_STATUS_INVALID_ARGUMENT, "out is NULL");
    fa::KernelConfig pinned;
    if (fa_status s = fa::to_kernel_config(kernel, &pinned); s != FA_STATUS_SUCCESS) return s;
    auto plan = std::make_unique<fa_plan_s>();
    if (fa_status s = build_plan(ctx, config, &pinned, plan.get()); s != FA_STATUS_SUCCESS) return s;
    *out = plan.release();
    return FA_STATUS_SUCCESS;
  });
}

FA_API fa_status fa_plan_kernel(fa_plan_t const* plan, fa_kernel_config* out) {
  return fa::guarded([&] {
    if (plan == nullptr) return fail(FA_STATUS_INVALID_ARGUMENT, "plan is NULL");
    if (plan->kernel == nullptr) {
      return fail(FA_STATUS_WRONG_CONTEXT, "the plan runs on the CPU and has no GPU kernel");
    }
    return fa::from_kernel_config(plan->kernel->config, out);
  });
}

FA_API fa_status fa_plan_workspace_size(fa_plan_t const* plan, size_t* size) {
  return fa::guarded([&] {
    if (plan == nullptr) return fail(FA_STATUS_INVALID_ARGUMENT, "plan is NULL");
    if (size == nullptr) return fail(FA_STATUS_INVALID_ARGUMENT, "size is NULL");
    *size = plan->schedule.workspace_bytes;
    return FA_STATUS_SUCCESS;
  });
}

FA_API fa_status fa_plan_num_splits(fa_plan_t const* plan, int* splits) {
  return fa::guarded([&] {
    if (plan == nullptr) return fail(FA_STATUS_INVALID_ARGUMENT, "plan is NULL");
    if (splits == nullptr) return fail(FA_STATUS_INVALID_ARGUMENT, "splits is NULL");
    *splits = plan->kernel == nullptr ? 1 : plan->schedule.num_splits;
    return FA_STATUS_SUCCESS;
  });
}

FA_API fa_status fa_plan_run(fa_plan_t const* plan, void const* q, void const* k, void const* v,
                             void* o, float* lse, void* workspace, size_t workspace_size,
                             fa_stream_t stream) {
  return fa::guarded([&] {
    if (plan == nullptr) return fail(FA_STATUS_INVALID_ARGUMENT, "plan is NULL");
    fa_run_args args;
    fa_run_args_init(&args);
    args.workspace = workspace;
    args.workspace_size = workspace_size;
    return run_plan(*plan, q, k, v, o, lse, &args, stream);
  });
}

FA_API fa_status fa_plan_run_ex(fa_plan_t const* plan, void const* q, void const* k, void const* v,
                                void* o, float* lse, fa_run_args const* args, fa_stream_t stream) {
  return fa::guarded([&] {
    if (plan == nullptr) return fail(FA_STATUS_INVALID_ARGUMENT, "plan is NULL");
    return run_plan(*plan, q, k, v, o, lse, args, stream);
  });
}

FA_API void fa_plan_destroy(fa_plan_t* plan) { delete plan; }

FA_API fa_status fa_kernel_config_init(fa_kernel_config* config) {
  return fa::guarded([&] {
    if (config == nullptr) return fail(FA_STATUS_INVALID_ARGUMENT, "config is NULL");
    std::memset(config, 0, sizeof *config);
    config->struct_size = sizeof *config;
    return FA_STATUS_SUCCESS;
  });
}

FA_API size_t fa_kernel_count(void) {
  try {
    return fa::cuda::registry().size();
  } catch (...) {
    return 0;  // the registry could not be built (out of memory): no kernel is usable
  }
}

FA_API fa_status fa_kernel_get(size_t index, fa_kernel_config* out) {
  return fa::guarded([&] {
    auto const& registry = fa::cuda::registry();
    if (index >= registry.size()) {
      return fail(FA_STATUS_INVALID_ARGUMENT, "index = %zu is out of range (%zu kernels)", index,
                  registry.size());
    }
    return fa::from_kernel_config(std::next(registry.begin(), static_cast<long>(index))->first, out);
  });
}

FA_API fa_status fa_kernel_config_name(fa_kernel_config const* config, char* buf,
                                       size_t buf_size, size_t* needed) {
  return fa::guarded([&] {
    fa::KernelConfig c;
    if (fa_status s = fa::to_kernel_config(config, &c); s != FA_STATUS_SUCCESS) return s;
    if (c.dtype != fa::DType::kFP16 && c.dtype != fa::DType::kBF16 &&
        c.dtype != fa::DType::kE4M3) {
      return fail(FA_STATUS_INVALID_ARGUMENT,
                  "fa_kernel_config.dtype = %d is not FP16, BF16 or E4M3", config->dtype);
    }
    std::string name = fa::short_name(c);
    if (needed != nullptr) *needed = name.size() + 1;
    if (buf == nullptr || buf_size < name.size() + 1) {
      return fail(FA_STATUS_INVALID_ARGUMENT, "buf_size = %zu is too small for %zu bytes",
                  buf == nullptr ? 0 : buf_size, name.size() + 1);
    }
    std::memcpy(buf, name.c_str(), name.size() + 1);
    return FA_STATUS_SUCCESS;
  });
}

FA_API fa_status fa_kernel_config_parse(char const* name, fa_kernel_config* out) {
  return fa::guarded([&] {
    if (name == nullptr) return fail(FA_STATUS_INVALID_ARGUMENT, "name is NULL");
    if (out == nullptr) return fail(FA_STATUS_INVALID_ARGUMENT, "out is NULL");
    fa::KernelConfig c;
    std::string error;
    if (!fa::parse_short_name(name, &c, &error)) {
      return fail(FA_STATUS_PARSE_ERROR, "cannot parse kernel name: %s", error.c_str());
    }
    return fa::from_kernel_config(c, out);
  });
}

FA_API fa_status fa_kernel_config_validate(fa_kernel_config const* config) {
  return fa::guarded([&] {
    fa::KernelConfig c;
    if (fa_status s = fa::to_kernel_config(config, &c); s != FA_STATUS_SUCCESS) return s;
    if (std::string why = fa::validate(c); !why.empty()) {
      return fail(FA_STATUS_INVALID_KERNEL_CONFIG, "%s", why.c_str());
    }
    return FA_STATUS_SUCCESS;
  });
}

FA_API fa_status fa_kernel_config_autotune_filter(fa_kernel_config const* config, int* keep) {
  return fa::guarded([&] {
    fa::KernelConfig c;
    if (fa_status s = fa::to_kernel_config(config, &c); s != FA_STATUS_SUCCESS) return s;
    if (keep == nullptr) return fail(FA_STATUS_INVALID_ARGUMENT, "keep is NULL");
    std::string why = fa::autotune_filter(c);
    *keep = why.empty() ? 1 : 0;
    if (!why.empty()) fail(FA_STATUS_SUCCESS, "%s", why.c_str());
    return FA_STATUS_SUCCESS;
  });
}

FA_API fa_status fa_kernel_is_registered(fa_kernel_config const* config, int* registered) {
  return fa::guarded([&] {
    fa::KernelConfig c;
    if (fa_status s = fa::to_kernel_config(config, &c); s != FA_STATUS_SUCCESS) return s;
    if (registered == nullptr) return fail(FA_STATUS_INVALID_ARGUMENT, "registered is NULL");
    *registered = fa::cuda::registry().count(fa::canonical(c)) != 0 ? 1 : 0;
    return FA_STATUS_SUCCESS;
  });
}

FA_API fa_status fa_kernel_config_canonical(fa_kernel_config const* config,
                                            fa_kernel_config* out) {
  return fa::guarded([&] {
    fa::KernelConfig c;
    if (fa_status s = fa::to_kernel_config(config, &c); s != FA_STATUS_SUCCESS) return s;
    return fa::from_kernel_config(fa::canonical(c), out);
  });
}

FA_API fa_status fa_merge_config_init(fa_merge_config* config) {
  return fa::guarded([&] {
    if (config == nullptr) return fail(FA_STATUS_INVALID_ARGUMENT, "config is NULL");
    std::memset(config, 0, sizeof *config);
    config->struct_size = sizeof *config;
    config->dtype = FA_DTYPE_BF16;
    config->batch = config->seqlen = config->heads = config->head_dim = 1;
    return FA_STATUS_SUCCESS;
  });
}

FA_API fa_status fa_merge_states(fa_context_t* ctx, fa_merge_config const* config,
                                 void const* o_a, float const* lse_a, void const* o_b,
                                 float const* lse_b, void* o, float* lse, fa_stream_t stream) {
  return fa::guarded([&] {
    if (fa_status s = check_context(ctx); s != FA_STATUS_SUCCESS) return s;
    fa::MergeShape m;
    if (fa_status s = fa::to_merge_shape(config, &m); s != FA_STATUS_SUCCESS) return s;
    struct Pointer {
      char const* name;
      void const* value;
    };
    for (Pointer ptr : {Pointer{"o_a", o_a}, Pointer{"lse_a", lse_a}, Pointer{"o_b", o_b},
                        Pointer{"lse_b", lse_b}, Pointer{"o", o}, Pointer{"lse", lse}}) {
      if (ptr.value == nullptr) return fail(FA_STATUS_INVALID_ARGUMENT, "%s is NULL", ptr.name);
    }
    size_t const elem_size = fa::dtype_size(m.dtype);
    if (fa_status s = fa::check_alignment({{"o_a", o_a, elem_size}, {"lse_a", lse_a, 4},
                                           {"o_b", o_b, elem_size}, {"lse_b", lse_b, 4},
                                           {"o", o, elem_size}, {"lse", lse, 4}});
        s != FA_STATUS_SUCCESS) {
      return s;
    }
    // At most 2^60 elements each (to_merge_shape), so the byte counts fit int64.
    auto const elem = static_cast<int64_t>(elem_size);
    int64_t const lse_bytes = m.lse_count * static_cast<int64_t>(sizeof(float));
    auto overlaps = [](void const* a, int64_t a_bytes, void const* b, int64_t b_bytes) {
      auto const x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
      return x < y + static_cast<uintptr_t>(b_bytes) && y < x + static_cast<uintptr_t>(a_bytes);
    };
    // In place (o == o_a or o_b, lse == lse_a or lse_b) is allowed; a partial overlap is not,
    // nor an output at the address of a tensor of the other kind (o == lse_a, o == lse, lse ==
    // o_a: when o and the LSEs happen to span the same bytes, they used to pass as in place).
    struct Pair {
      char const* out_name;
      void const* out;
      int64_t out_bytes;
      char const* in_name;
      void const* in;
      int64_t in_bytes;
      bool in_place_ok;
    };
    for (Pair pr : {Pair{"o", o, m.o_extent * elem, "o_a", o_a, m.o_extent * elem, true},
                    Pair{"o", o, m.o_extent * elem, "o_b", o_b, m.o_extent * elem, true},
                    Pair{"o", o, m.o_extent * elem, "lse_a", lse_a, lse_bytes, false},
                    Pair{"o", o, m.o_extent * elem, "lse_b", lse_b, lse_bytes, false},
                    Pair{"o", o, m.o_extent * elem, "lse", lse, lse_bytes, false},
                    Pair{"lse", lse, lse_bytes, "lse_a", lse_a, lse_bytes, true},
                    Pair{"lse", lse, lse_bytes, "lse_b", lse_b, lse_bytes, true},
                    Pair{"lse", lse, lse_bytes, "o_a", o_a, m.o_extent * elem, false},
                    Pair{"lse", lse, lse_bytes, "o_b", o_b, m.o_extent * elem, false}}) {
      bool const same = pr.in_place_ok && pr.out == pr.in && pr.out_bytes == pr.in_bytes;
      if (!same && overlaps(pr.out, pr.out_bytes, pr.in, pr.in_bytes)) {
        return fail(FA_STATUS_INVALID_ARGUMENT,
                    "%s = %p overlaps %s = %p (only exactly in place is allowed)", pr.out_name,
                    pr.out, pr.in_name, pr.in);
      }
    }
    if (fa::is_cpu(ctx)) {
      if (stream != nullptr) {
        return fail(FA_STATUS_WRONG_CONTEXT, "stream = %p given to a CPU context (must be NULL)",
                    static_cast<void*>(stream));
      }
      fa::cpu::merge_states(m.dtype, m.batch, m.seqlen, m.heads, m.head_dim, m.o, o_a, lse_a, o_b,
                            lse_b, o, lse);
      return FA_STATUS_SUCCESS;
    }
    if (m.dtype == fa::DType::kFP32) {
      return fail(FA_STATUS_UNSUPPORTED, "fa_merge_config.dtype = FA_DTYPE_FP32 runs on CPU contexts only");
    }
    for (Pointer ptr : {Pointer{"o_a", o_a}, Pointer{"lse_a", lse_a}, Pointer{"o_b", o_b},
                        Pointer{"lse_b", lse_b}, Pointer{"o", o}, Pointer{"lse", lse}}) {
      if (reinterpret_cast<uintptr_t>(ptr.value) % 4 != 0) {
        return fail(FA_STATUS_UNSUPPORTED, "%s = %p is not 4-byte aligned", ptr.name, ptr.value);
      }
    }
    if (fa::cuda::warp_blocks(m.batch * m.seqlen * m.heads) > INT32_MAX) {
      return fail(FA_STATUS_UNSUPPORTED, "fa_merge_config: %lld rows x heads exceed the grid",
                  static_cast<long long>(m.batch * m.seqlen * m.heads));
    }
    fa::cuda::MergeParams const params{o_a, lse_a, o_b, lse_b, o, lse, m.batch, m.seqlen, m.heads,
                                       m.head_dim, m.o.batch, m.o.seq, m.o.head};
    return fa::cuda::merge(ctx->gpu, m.dtype, params, reinterpret_cast<cudaStream_t>(stream));
  });
}

}  // extern "C"
