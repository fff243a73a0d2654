// Leak check: 10^5 cycles of creating and destroying a CPU context and plans, with the error paths
// in the loop, under AddressSanitizer, whose LeakSanitizer fails the process at exit if anything
// the library allocated was not freed. Every 1000th cycle also runs a tiny problem through
// fa_forward() and fa_plan_run(). Exits 1 on an unexpected status.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "flashattn.h"

namespace {

constexpr int kCycles = 100000;
// One cycle in this many runs a forward: with 2 threads started per run, 100 runs keep the check
// near a second.
constexpr int kForwardEvery = 1000;

int failures = 0;

void expect(fa_status got, fa_status want, char const* what, int cycle) {
  if (got == want) return;
  if (failures++ < 10) {
    std::fprintf(stderr, "leak_check: cycle %d: %s returned %s, expected %s (%s)\n", cycle, what,
                 fa_status_string(got), fa_status_string(want), fa_last_error_detail());
  }
}

}  // namespace

int main() {
  fa_config good;
  fa_config_init(&good);
  good.dtype = FA_DTYPE_FP32;
  good.seqlen_q = 3;
  good.seqlen_k = 5;
  good.heads_q = 2;
  good.head_dim = 4;
  good.causal = 1;
  fa_config bad = good;
  bad.heads_kv = 3;  // heads_q = 2 is not a multiple of 3
  fa_kernel_config kernel;
  fa_kernel_config_init(&kernel);

  std::vector<float> q(2 * 3 * 4, 0.5f), k(5 * 4, 0.25f), v(5 * 4, 1.0f), o(2 * 3 * 4), lse(2 * 3);
  for (int cycle = 0; cycle < kCycles; ++cycle) {
    fa_context_t* ctx = nullptr;
    expect(fa_context_create(FA_DEVICE_CPU, &ctx), FA_STATUS_SUCCESS, "fa_context_create", cycle);
    fa_plan_t* plan = nullptr;
    expect(fa_plan_create(ctx, &good, &plan), FA_STATUS_SUCCESS, "fa_plan_create", cycle);

    // Error paths: each builds (and must free) its partial state and detail message.
    fa_plan_t* none = nullptr;
    expect(fa_plan_create(ctx, &bad, &none), FA_STATUS_INVALID_ARGUMENT, "fa_plan_create(bad)",
           cycle);
    expect(fa_plan_create_with_kernel(ctx, &good, &kernel, &none), FA_STATUS_WRONG_CONTEXT,
           "fa_plan_create_with_kernel on the CPU", cycle);
    expect(fa_forward(ctx, &bad, q.data(), k.data(), v.data(), o.data(), nullptr, nullptr),
           FA_STATUS_INVALID_ARGUMENT, "fa_forward(bad)", cycle);
    expect(fa_plan_run(plan, q.data(), k.data(), v.data(), o.data(), nullptr, nullptr, 0,
                       reinterpret_cast<fa_stream_t>(&none)),
           FA_STATUS_WRONG_CONTEXT, "fa_plan_run with a stream on the CPU", cycle);
    expect(fa_context_load_tuning(ctx, "tuning.txt"), FA_STATUS_WRONG_CONTEXT,
           "fa_context_load_tuning on the CPU", cycle);
    expect(fa_kernel_config_parse("(BF16, 128, 64, 64, 4): async+bogus", &kernel),
           FA_STATUS_PARSE_ERROR, "fa_kernel_config_parse(bogus)", cycle);
    fa_context_t* no_ctx = nullptr;
    expect(fa_context_create(-2, &no_ctx), FA_STATUS_INVALID_ARGUMENT, "fa_context_create(-2)",
           cycle);
    if (none != nullptr || no_ctx != nullptr) {
      std::fprintf(stderr, "leak_check: cycle %d: a failed create returned a handle\n", cycle);
      return 1;
    }

    if (cycle % kForwardEvery == 0) {
      expect(fa_forward(ctx, &good, q.data(), k.data(), v.data(), o.data(), lse.data(), nullptr),
             FA_STATUS_SUCCESS, "fa_forward", cycle);
      expect(fa_plan_run(plan, q.data(), k.data(), v.data(), o.data(), lse.data(), nullptr, 0,
                         nullptr),
             FA_STATUS_SUCCESS, "fa_plan_run", cycle);
    }
    fa_plan_destroy(plan);
    fa_context_destroy(ctx);
  }
  if (failures > 0) {
    std::fprintf(stderr, "leak_check: %d unexpected statuses\n", failures);
    return 1;
  }
  std::printf("leak_check: %d context and plan create/destroy cycles, %d forwards; LeakSanitizer "
              "checks at exit\n",
              kCycles, 2 * (kCycles / kForwardEvery));
  return 0;
}
