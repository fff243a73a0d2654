// The mma.sync family's rules (sm_80 and newer): GQA packing for decode, the decode kernel, and
// split-KV. Its kernels run every feature of the library but a head_dim_v other than head_dim.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>

#include "cuda/device.hpp"
#include "cuda/family.hpp"
#include "cuda/sm80/family.hpp"

namespace fa::cuda::sm80 {

namespace {

// Packing the query heads of one K/V head into a tile pays when one head's rows would leave the
// tile mostly empty (decode: seqlen_q < B_r); K and V are then read once per group.
bool pack_gqa(KernelConfig const& k, Problem const& p) {
  return p.heads_q > p.heads_kv && p.seqlen_q < k.B_r;
}

std::string cannot_run(KernelConfig const&, Problem const& p) {
  return value_dim_differs(p, "mma.sync");
}

// Decode-like problems (a few query rows per K/V head against many keys) are bound by reading K
// and V, not by MMAs: they run on the smallest query tile, B_r = 64 with 4 warps
// (generate_kernels.py's decode_configs), with GQA packing and split-KV, preferring
// kDecodeKeys keys per block where built.
constexpr int kDecodeKeys = 128;
int decode_rank(KernelConfig const& k, Problem const& p) {
  if (p.seqlen_q * (p.heads_q / p.heads_kv) > 64 || k.B_r != 64 || k.n_warps != 4) return 0;
  return k.B_c == kDecodeKeys ? 2 : 1;
}

Schedule schedule(Device const& device, KernelEntry const& kernel, Problem const& p,
                  bool allow_split) {
  KernelConfig const& k = kernel.config;
  Schedule s;
  s.pack_gqa = pack_gqa(k, p);
  int64_t const base = unsplit_blocks(k.B_r, p, s.pack_gqa);
  int splits = 1;
  // Partials are indexed by int32 rows, and the combine kernel has a warp per (row, head).
  bool const splittable = p.q_rows() * p.heads_q <= INT32_MAX;
  if (!splittable) {
    splits = 1;
  } else if (p.num_splits > 0) {
    splits = p.num_splits;
  } else if (allow_split) {
    // Fill one wave of resident blocks when the unsplit grid leaves SMs idle (decode), with each
    // split keeping at least 4 key blocks so its partial output (one row of d floats) stays
    // small against the keys it reads. Among the counts up to twice that, take the one whose
    // last wave is fullest (ties: fewer splits).
    auto const occ = device.blocks_per_sm.find(&kernel);
    int64_t const capacity =
        int64_t(device.sm_count) * (occ == device.blocks_per_sm.end() ? 1 : occ->second);
    int64_t const key_blocks = (p.seqlen_k + k.B_c - 1) / k.B_c;
    int64_t const most = std::min<int64_t>({256, key_blocks / 4, INT32_MAX / std::max<int64_t>(base, 1)});
    if (base < capacity && most > 1) {
      int64_t const target = std::min(most, (capacity + base - 1) / base);
      double best = 0.0;
      for (int64_t n = std::max<int64_t>(1, target / 2); n <= std::min(most, 2 * target); ++n) {
        double const waves = double(base * n) / double(capacity);
        double const efficiency = waves / std::ceil(waves);
        if (efficiency > best + 1e-9) {
          best = efficiency;
          splits = static_cast<int>(n);
        }
      }
    }
  }
  s.num_splits = splits;
  s.blocks = base * splits;
  s.general = needs_general(p, s.pack_gqa, splits);
  if (splits > 1) s.workspace_bytes = split_workspace_bytes(p, splits);
  return s;
}

ForwardParams params(KernelConfig const& k, Problem const& p, Schedule const& s) {
  return forward_params(p, k.B_r, s);
}

}  // namespace

KernelFamily const kFamily{"mma.sync", &cannot_run, &pack_gqa, &decode_rank, &schedule, &params};

}  // namespace fa::cuda::sm80
