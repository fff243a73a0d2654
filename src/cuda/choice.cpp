// The choice across families: whether a kernel runs a problem, which kernel a problem gets,
// and its schedule and parameters, each asked of the kernel's family (family.hpp).
#include <algorithm>
#include <cinttypes>
#include <climits>
#include <optional>
#include <string>
#include <vector>

#include "core/kernel_config_text.hpp"
#include "core/status.hpp"
#include "cuda/device.hpp"
#include "cuda/heuristic.hpp"

namespace fa::cuda {

namespace {

// Every registered kernel's family is compiled in (the generator emits both lists together).
KernelFamily const& family_of(KernelConfig const& k) { return *find_family(k.family); }

// The table's pick `pick`, or for a paged cache the kernel its family ranks higher for the pages
// (KernelFamily::paged_rank) among the table's other picks for the head dim and causality,
// nearest the problem's length first, then its autotuning candidates: measured kernels only (at
// d 256 on pages of 64, the table's B_c-64 pick ran 8% faster than its B_c-80 one; another
// registered B_c-64 kernel, as slow as the B_c-80 pick). The candidates hold the d 128 tables'
// only three-stage kernel, which gathered pages want (sm90/family.cpp).
KernelEntry const* better_for_pages(Device const& device, KernelEntry const& pick,
                                    Problem const& p) {
  if (p.layout != Layout::kPagedKv) return &pick;
  KernelFamily const& family = family_of(pick.config);
  int const rank = family.paged_rank(pick.config, p);
  int const arch = device.cc_major * 10 + device.cc_minor;
  std::vector<KernelConfig> rows = table_picks_nearest(arch, p);
  for_each_candidate(arch, p, [&](KernelConfig const& k) { rows.push_back(k); });
  for (KernelConfig const& row : rows) {
    if (row.family != pick.config.family || family.paged_rank(row, p) <= rank) continue;
    for (KernelEntry const* e : device.kernels) {
      if (e->config == row && cannot_run(device, e->config, p).empty()) return e;
    }
  }
  return &pick;
}

}  // namespace

std::string cannot_run(KernelConfig const& k, Problem const& p) {
  auto say = [&](std::string what) { return short_name(k) + ": " + what; };
  if (static_cast<int>(k.dtype) != static_cast<int>(p.dtype)) {
    return say("its dtype differs from fa_config.dtype = " + std::to_string(int(p.dtype)));
  }
  if (k.d_head < p.head_dim) {
    return say("d_head is below fa_config.head_dim = " + std::to_string(p.head_dim));
  }
  KernelFamily const* family = find_family(k.family);
  if (family == nullptr) {
    return say("its family (" + std::to_string(k.family) + ") is not compiled into this build");
  }
  if (std::string why = family->cannot_run(k, p); !why.empty()) return say(why);
  // One thread block per (query block, head, batch), on a one-dimensional grid; splits multiply
  // it. Automatic ones stay within 2^31 - 1 blocks (choose_splits caps them at INT32_MAX / the
  // unsplit grid); a forced num_splits is checked here (its grid would wrap, and the sm90
  // family's tile indices are 31-bit).
  int64_t const blocks = unsplit_blocks(k.B_r, p, family->pack_gqa(k, p));
  int64_t const splits = std::max<int64_t>(p.num_splits, 1);
  if (blocks > INT32_MAX / splits) {
    return say("the grid of " + std::to_string(blocks) + " thread blocks" +
               (splits > 1 ? " times fa_config.num_splits = " + std::to_string(splits) : "") +
               " exceeds 2^31 - 1");
  }
  return {};
}

std::string cannot_run(Device const& device, KernelConfig const& k, Problem const& p) {
  if (std::string why = cannot_run(k, p); !why.empty()) return why;
  int64_t const smem = family_of(k).smem_bytes(k, p);
  if (smem > device.smem_per_block_optin) {
    return short_name(k) + ": needs " + std::to_string(smem) + " bytes of shared memory for this "
           "problem (kv_dtype " + std::to_string(int(p.kv_dtype)) + "); device " +
           std::to_string(device.ordinal) + " allows " +
           std::to_string(device.smem_per_block_optin);
  }
  // A kernel that cannot split the keys is refused where its family's split would run (the
  // unsplit grid leaving SMs idle): one that splits fills them (sm90: one block per SM).
  KernelFamily const& family = family_of(k);
  if (!family.splits_keys(k) && p.num_splits == 0) {
    int64_t const base = unsplit_blocks(k.B_r, p, family.pack_gqa(k, p));
    int64_t const sms = std::max(device.sm_count, 1);
    if (choose_splits(p, base, sms, sms, k.B_c, true) > 1) {
      return short_name(k) + ": runs unsplit, and its " + std::to_string(base) + " blocks would "
             "leave SMs of device " + std::to_string(device.ordinal) + " (" +
             std::to_string(sms) + ") idle where a kernel that splits the keys fills them";
    }
  }
  return {};
}

fa_status choose_kernel(Device const& device, Problem const& p, KernelEntry const** out) {
  // A decode kernel for decode-like problems, the family ranking its kernels. Otherwise the
  // measured table's kernel when this build has it; else (a build that left both the pick and
  // its fallback out) the runnable kernel with the largest tile, the shape that won most of the
  // sweep.
  KernelEntry const* best = nullptr;
  int best_rank = 0;
  for (KernelEntry const* e : device.kernels) {
    int const rank = family_of(e->config).decode_rank(e->config, p);
    // Of equal rank, the smallest head dim that runs the problem (a larger one reads zeros).
    bool const better = rank > best_rank ||
                        (rank > 0 && rank == best_rank && e->config.d_head < best->config.d_head);
    if (better && cannot_run(device, e->config, p).empty()) {
      best = e;
      best_rank = rank;
    }
  }
  if (best != nullptr) {
    *out = best;
    return FA_STATUS_SUCCESS;
  }
  // The table's pick, or where it cannot run here (its family not built for this arch, or not
  // running this problem) the table's fallback row. An e4m3 cache skips the fallback rows: they
  // name mma.sync prefill tiles (the d 64 one its e4m3 decode tile), where the largest runnable
  // tile below is the sm90 family's e4m3 one on Hopper (0.63-0.94x the 16-bit cache against
  // 0.34-0.37x, docs/performance.md). e4m3 queries skip the table, measured on 16-bit kernels:
  // their largest runnable tile below is the FP8 tile that copies V's images where those pay and
  // the run brings their workspace (1.00-1.17x the transposing tile, H200), else the smaller.
  int const arch = device.cc_major * 10 + device.cc_minor;
  for (bool table_fallback : {false, true}) {
    if (p.dtype == DType::kE4M3) break;
    if (table_fallback && p.kv_dtype == DType::kE4M3) continue;
    std::optional<KernelConfig> const table = table_choice(arch, p, table_fallback);
    if (!table) continue;
    for (KernelEntry const* e : device.kernels) {
      if (e->config == *table && cannot_run(device, e->config, p).empty()) {
        *out = better_for_pages(device, *e, p);
        return FA_STATUS_SUCCESS;
      }
    }
  }
  KernelEntry const* fallback = nullptr;
  std::string reason;
  for (KernelEntry const* e : device.kernels) {
    std::string why = cannot_run(device, e->config, p);
    if (!why.empty()) {
      // Report the reason of a kernel of the right dtype and head dim when there is one.
      if (reason.empty() || (e->config.d_head >= p.head_dim &&
                             static_cast<int>(e->config.dtype) == static_cast<int>(p.dtype))) {
        reason = why;
      }
      continue;
    }
    // The smallest head dim that runs the problem (a larger one computes zero columns), then
    // the largest tile; for e4m3 queries (no table) among equal tiles the FP8 sweep's knobs
    // (persistent, two stages, no ping-pong: tools/generate_kernels.py's fp8_prefill_configs),
    // which tuning builds hold beside their variants.
    auto fp8_knobs = [](KernelConfig const& c) {
      return 4 * int(c.persistent) + 2 * int(c.stages == 2) + int(!c.pingpong);
    };
    int64_t const area = int64_t(e->config.B_r) * e->config.B_c;
    int64_t const best_area =
        fallback == nullptr ? 0 : int64_t(fallback->config.B_r) * fallback->config.B_c;
    if (fallback == nullptr || e->config.d_head < fallback->config.d_head ||
        (e->config.d_head == fallback->config.d_head &&
         (area > best_area || (area == best_area && p.dtype == DType::kE4M3 &&
                               fp8_knobs(e->config) > fp8_knobs(fallback->config))))) {
      fallback = e;
    }
  }
  if (fallback != nullptr) {
    *out = fallback;
    return FA_STATUS_SUCCESS;
  }
  if (device.kernels.empty()) {
    return fail(FA_STATUS_UNSUPPORTED, "this build has no GPU kernels for device %d",
                device.ordinal);
  }
  return fail(FA_STATUS_UNSUPPORTED, "no kernel runs this problem (dtype %d, head_dim %" PRId64
              ", seqlen_q %" PRId64 ", seqlen_k %" PRId64 ", causal %d); for example %s",
              int(p.dtype), p.head_dim, p.seqlen_q, p.seqlen_k, int(p.causal), reason.c_str());
}

Schedule make_schedule(Device const& device, KernelEntry const& kernel, Problem const& p,
                       bool allow_split) {
  return family_of(kernel.config).schedule(device, kernel, p, allow_split);
}

ForwardParams make_params(KernelConfig const& k, Problem const& p, Schedule const& s) {
  return family_of(k).params(k, p, s);
}

}  // namespace fa::cuda
