// The context and plan handles behind the C API's opaque types.
#pragma once

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>

#include "api/choice_key.hpp"
#include "core/bounded_map.hpp"
#include "core/kernel_config.hpp"
#include "core/problem.hpp"
#include "cuda/device.hpp"
#include "cuda/forward_params.hpp"
#include "cuda/kernel_entry.hpp"
#include "flashattn.h"

namespace fa {

// Shapes whose built-in choice a context remembers: about 100 bytes each, 400 KiB in all.
inline constexpr size_t kMaxCachedChoices = 4096;

}  // namespace fa

struct fa_context_s {
  int device = FA_DEVICE_CPU;
  int cpu_threads = 1;
  fa::cuda::Device gpu;      // valid when device != FA_DEVICE_CPU
  mutable std::mutex mutex;  // guards `tuned` and `choices`
  // Tuning results (fa_autotune, fa_context_set_kernel, fa_context_load_tuning); consulted first.
  std::map<fa::ChoiceKey, fa::cuda::KernelEntry const*> tuned;
  // The plan cache: the built-in choice per shape, made once. A cached or tuned kernel is
  // still checked against each problem's features (a pick for a dense problem may not run a
  // paged one of the same shape). Bounded: shapes that never repeat must not grow it.
  fa::BoundedMap<fa::BuiltinKey, fa::cuda::KernelEntry const*> choices{fa::kMaxCachedChoices};
};

struct fa_plan_s {
  fa_context_s* ctx = nullptr;
  fa::Problem problem{};
  fa::cuda::KernelEntry const* kernel = nullptr;  // null on a CPU context
  fa::cuda::Schedule schedule{};
  fa::cuda::ForwardParams params{};
  // The launch a run without a large enough workspace falls back to: unsplit where the split
  // count was chosen automatically (as 0.2's plans, which never needed one), and where the
  // kernel copies V's images it cannot run without (Schedule::images_required) the choice for
  // the problem without a workspace (Problem::no_workspace), another kernel.
  fa::cuda::KernelEntry const* unsplit_kernel = nullptr;
  fa::cuda::Schedule unsplit{};
  fa::cuda::ForwardParams unsplit_params{};
};

namespace fa {

bool is_cpu(fa_context_s const* ctx);
fa_status check_context(fa_context_s const* ctx);

// Validates `config` for `ctx` and fills `plan` with the problem and, on a GPU, the kernel:
// `pinned` when given, else the context's choice (tuned, cached, or the built-in one).
fa_status build_plan(fa_context_s* ctx, fa_config const* config, KernelConfig const* pinned,
                     fa_plan_s* plan);

// Runs a built plan (CPU or GPU). `args` may be NULL. A plan whose split count was chosen
// automatically runs unsplit when the run brings no workspace large enough for the split.
fa_status run_plan(fa_plan_s const& plan, void const* q, void const* k, void const* v, void* o,
                   float* lse, fa_run_args const* args, fa_stream_t stream);

// The built-in (measured-table) choice for `p`, cached per shape; ignores tuning results.
fa_status builtin_choice(fa_context_s* ctx, Problem const& p, cuda::KernelEntry const** out);

// The context's entry for `pinned`, if it is valid, compiled in, runs on the device and runs `p`.
fa_status find_pinned(fa_context_s const* ctx, KernelConfig const& pinned, Problem const& p,
                      cuda::KernelEntry const** out);

// FA_STATUS_UNSUPPORTED, naming `caller`, for FP8 inputs, whose choice a context does not tune:
// tuned choices are keyed by shape (choice_key, the tuning file's fields), which a 16-bit
// problem of the same shape shares, and it must never get a kernel tuned for FP8. Else success.
fa_status tune_refused(Problem const& p, char const* caller);

}  // namespace fa
