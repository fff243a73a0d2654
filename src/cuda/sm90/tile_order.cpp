#include "cuda/sm90/tile_order.hpp"

#include <algorithm>
#include <numeric>

namespace fa::cuda::sm90 {

int64_t head_group(ForwardParams const& p, int d_head, bool persistent, int64_t grid) {
  int64_t const pairs = int64_t(p.heads_q) * p.batch;
  bool const even_work = !p.masked || 4 * int64_t(p.seqlen_q) <= int64_t(p.seqlen_k);
  if (even_work) return std::clamp<int64_t>(p.q_heads_per_kv, 1, pairs);
  constexpr int64_t kL2Budget = int64_t(24) << 20;
  int64_t const kv_bytes = 2 * int64_t(p.seqlen_k) * d_head * 2;
  int64_t group = kL2Budget * p.q_heads_per_kv / std::max<int64_t>(kv_bytes, 1);
  if (persistent) {
    constexpr int64_t kMaxGroupedBlocks = 16, kMinRounds = 4;
    int64_t const q_blocks = std::max<int64_t>(p.n_q_blocks, 1);
    if (q_blocks > kMaxGroupedBlocks) {
      group = pairs;
    } else {
      int64_t const whole = 2 * grid / std::gcd(2 * grid, q_blocks);
      group = std::max(group, (kMinRounds * grid + q_blocks - 1) / q_blocks);
      group = (group + whole - 1) / whole * whole;
    }
  }
  return std::clamp<int64_t>(group, 1, pairs);
}

}  // namespace fa::cuda::sm90
