// The C API: contexts, plans, the one-shot forward and registry queries. Every entry point runs
// inside guarded(), so no exception crosses the C boundary, and fills outputs only on success.
#include <algorithm>
#include <cstring>
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
#include "cpu/cpu_attention.hpp"
#include "cuda/device.hpp"
#include "flashattn.h"

namespace fa {

bool is_cpu(fa_context_s const* ctx) { return ctx->device == FA_DEVICE_CPU; }

fa_status check_context(fa_context_s const* ctx) {
  return ctx == nullptr ? fail(FA_STATUS_INVALID_ARGUMENT, "ctx is NULL") : FA_STATUS_SUCCESS;
}

fa_status builtin_choice(fa_context_s* ctx, Problem const& p, cuda::KernelEntry const** out) {
  ChoiceKey key = choice_key(p);
  {
    std::lock_guard lock(ctx->mutex);
    if (auto it = ctx->choices.find(key); it != ctx->choices.end()) {
      *out = it->second;
      return FA_STATUS_SUCCESS;
    }
  }
  cuda::KernelEntry const* chosen = nullptr;
  if (fa_status s = cuda::choose_kernel(ctx->gpu, p, &chosen); s != FA_STATUS_SUCCESS) return s;
  std::lock_guard lock(ctx->mutex);
  ctx->choices.emplace(key, chosen);
  *out = chosen;
  return FA_STATUS_SUCCESS;
}

namespace {

fa_status choose_cached(fa_context_s* ctx, Problem const& p, cuda::KernelEntry const** out) {
  {
    std::lock_guard lock(ctx->mutex);
    if (auto it = ctx->tuned.find(choice_key(p)); it != ctx->tuned.end()) {
      *out = it->second;
      return FA_STATUS_SUCCESS;
    }
  }
  return builtin_choice(ctx, p, out);
}

}  // namespace

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
  if (std::string why = fa::cuda::cannot_run(pinned, p); !why.empty()) {
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
  plan->params = fa::cuda::make_params(plan->kernel->config, p);
  plan->grid = fa::cuda::make_grid(plan->kernel->config, p);
  return FA_STATUS_SUCCESS;
}

fa_status run_plan(fa_plan_s const& plan, void const* q, void const* k, void const* v, void* o,
                   float* lse, fa_stream_t stream) {
  if (is_cpu(plan.ctx)) {
    if (stream != nullptr) {
      return fail(FA_STATUS_WRONG_CONTEXT, "stream = %p given to a CPU context (must be NULL)",
                  static_cast<void*>(stream));
    }
    struct Pointer {
      char const* name;
      void const* value;
    };
    for (Pointer ptr : {Pointer{"q", q}, Pointer{"k", k}, Pointer{"v", v}, Pointer{"o", o}}) {
      if (ptr.value == nullptr) return fail(FA_STATUS_INVALID_ARGUMENT, "%s is NULL", ptr.name);
    }
    fa::cpu::forward(plan.problem, q, k, v, o, lse, plan.ctx->cpu_threads);
    return FA_STATUS_SUCCESS;
  }
  return cuda::launch(plan.ctx->gpu, *plan.kernel, plan.params, plan.grid, q, k, v, o, lse,
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
    // to_problem has checked that every offset below fits in int64.
    auto extent = [&](fa::TensorStrides const& t, int64_t seq, int64_t heads) {
      return (p.batch - 1) * t.batch + (seq - 1) * t.seq + (heads - 1) * t.head + p.head_dim;
    };
    if (q != nullptr) *q = extent(p.q, p.seqlen_q, p.heads_q);
    if (k != nullptr) *k = extent(p.k, p.seqlen_k, p.heads_kv);
    if (v != nullptr) *v = extent(p.v, p.seqlen_k, p.heads_kv);
    if (o != nullptr) *o = extent(p.o, p.seqlen_q, p.heads_q);
    if (lse != nullptr) *lse = p.batch * p.heads_q * p.seqlen_q;
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
    return run_plan(plan, q, k, v, o, lse, stream);
  });
}

FA_API fa_status fa_context_set_kernel(fa_context_t* ctx, fa_config const* config,
                                       fa_kernel_config const* kernel) {
  return fa::guarded([&] {
    fa::KernelConfig pinned;
    if (fa_status s = fa::to_kernel_config(kernel, &pinned); s != FA_STATUS_SUCCESS) return s;
    fa_plan_s plan;
    if (fa_status s = build_plan(ctx, config, &pinned, &plan); s != FA_STATUS_SUCCESS) return s;
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
    *size = 0;  // the FA2 kernels keep all their state on chip
    return FA_STATUS_SUCCESS;
  });
}

FA_API fa_status fa_plan_run(fa_plan_t const* plan, void const* q, void const* k, void const* v,
                             void* o, float* lse, void* workspace, size_t workspace_size,
                             fa_stream_t stream) {
  (void)workspace;
  (void)workspace_size;  // every kernel of this version needs 0 bytes
  return fa::guarded([&] {
    if (plan == nullptr) return fail(FA_STATUS_INVALID_ARGUMENT, "plan is NULL");
    return run_plan(*plan, q, k, v, o, lse, stream);
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
    if (c.dtype != fa::DType::kFP16 && c.dtype != fa::DType::kBF16) {
      return fail(FA_STATUS_INVALID_ARGUMENT, "fa_kernel_config.dtype = %d is not FP16 or BF16",
                  config->dtype);
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

}  // extern "C"
