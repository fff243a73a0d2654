// The sm90 family's rules (sm_90a): what its TMA-fed kernels do not run, and its persistent grid.
#include <algorithm>
#include <cstdint>

#include "cuda/device.hpp"
#include "cuda/family.hpp"
#include "cuda/sm90/family.hpp"

namespace fa::cuda::sm90 {

namespace {

// It reads dense tensors through TMA maps (tensor_map.hpp) and keeps raw scores with the scale
// folded into exp2 (softmax.cuh).
std::string cannot_run(KernelConfig const&, Problem const& p) {
  if (p.layout == Layout::kPagedKv) return "the sm90 family has no paged KV cache";
  if (p.num_splits > 1) return "the sm90 family does not split the keys (num_splits > 1)";
  // A TMA map's strides must stay below 2^40 bytes.
  for (int64_t stride : {p.q.batch, p.q.seq, p.q.head, p.k.batch, p.k.seq, p.k.head, p.v.batch,
                         p.v.seq, p.v.head}) {
    if (stride >= (int64_t(1) << 39)) return "a stride of 2^39 elements or more (TMA's limit)";
  }
  return {};
}

bool pack_gqa(KernelConfig const&, Problem const&) { return false; }

int decode_rank(KernelConfig const&, Problem const&) { return 0; }

Schedule schedule(Device const& device, KernelEntry const& kernel, Problem const& p, bool) {
  KernelConfig const& k = kernel.config;
  Schedule s;
  s.blocks = unsplit_blocks(k.B_r, p, false);
  // A persistent kernel launches one block per SM (one fits per SM), each walking tiles.
  if (k.persistent) s.blocks = std::min<int64_t>(s.blocks, std::max(device.sm_count, 1));
  s.general = needs_general(p, false, 1);
  return s;
}

ForwardParams params(KernelConfig const& k, Problem const& p, Schedule const& s) {
  return forward_params(p, k.B_r, s);
}

}  // namespace

KernelFamily const kFamily{"sm90", &cannot_run, &pack_gqa, &decode_rank, &schedule, &params};

}  // namespace fa::cuda::sm90
