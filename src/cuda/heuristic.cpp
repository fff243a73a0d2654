#include "cuda/heuristic.hpp"

#include <algorithm>
#include <cstdlib>

namespace fa::cuda {

int64_t table_head_dim(int table, int64_t head_dim) {
  int64_t best = 0;
  for (ChoicePick const& pick : choice_picks()) {
    if (pick.arch == table && !pick.padded && pick.d_head >= head_dim &&
        (best == 0 || pick.d_head < best)) {
      best = pick.d_head;
    }
  }
  return best;
}

int64_t table_value_dim(int table, int64_t d_head, bool causal, int64_t head_dim_v,
                        bool fallback) {
  int64_t best = 0;
  for (ChoicePick const& pick : choice_picks()) {
    if (pick.arch == table && pick.d_head == d_head && pick.causal == causal &&
        pick.fallback == fallback && !pick.padded &&
        pick.d_head_v >= head_dim_v && (best == 0 || pick.d_head_v < best)) {
      best = pick.d_head_v;
    }
  }
  return best;
}

int nearest_table_arch(int arch) {
  // The closest measured arch, preferring an older one on a tie (its kernels run on newer chips).
  int best = -1;
  for (ChoicePick const& pick : choice_picks()) {
    if (best < 0 || std::abs(pick.arch - arch) < std::abs(best - arch) ||
        (std::abs(pick.arch - arch) == std::abs(best - arch) && pick.arch < best)) {
      best = pick.arch;
    }
  }
  return best;
}

namespace {

// Which of the table's rows serve p: (arch, head dims, causal) and kind. The pick rows, or for
// a problem below the rows' head dims the pad rows where the table has them for those dims.
struct RowsFor {
  int table;
  int64_t d_head, d_head_v;
  bool causal, fallback, padded;

  RowsFor(int arch, Problem const& p, bool fallback_rows)
      : table(nearest_table_arch(arch)),
        d_head(table_head_dim(table, p.head_dim)),
        d_head_v(table_value_dim(table, d_head, p.causal, p.head_dim_v, fallback_rows)),
        causal(p.causal),
        fallback(fallback_rows),
        padded(false) {
    if (fallback || (p.head_dim == d_head && p.head_dim_v == d_head_v)) return;
    for (ChoicePick const& pick : choice_picks()) {
      padded = padded || (pick.padded && pick.arch == table && pick.d_head == d_head &&
                          pick.d_head_v == d_head_v && pick.causal == causal);
    }
  }

  bool serves(ChoicePick const& pick) const {
    return pick.arch == table && pick.d_head == d_head && pick.d_head_v == d_head_v &&
           pick.causal == causal && pick.fallback == fallback && pick.padded == padded;
  }
};

}  // namespace

std::optional<KernelConfig> table_choice(int arch, Problem const& p, bool fallback) {
  RowsFor const rows(arch, p, fallback);
  int64_t const length = std::max(p.seqlen_q, p.seqlen_k);
  ChoicePick const* chosen = nullptr;
  for (ChoicePick const& pick : choice_picks()) {
    if (!rows.serves(pick)) continue;
    // Rows come sorted by max_seqlen: the first that covers the length, else the longest.
    chosen = &pick;
    if (length <= pick.max_seqlen) break;
  }
  if (chosen == nullptr) return std::nullopt;
  KernelConfig k = chosen->config;
  k.dtype = p.dtype;
  return k;
}

std::vector<KernelConfig> table_picks_nearest(int arch, Problem const& p) {
  RowsFor const serving(arch, p, false);
  int64_t const length = std::max(p.seqlen_q, p.seqlen_k);
  std::vector<KernelConfig> rows;
  size_t covering = 0;
  bool covered = false;
  for (ChoicePick const& pick : choice_picks()) {
    if (!serving.serves(pick)) continue;
    if (!covered && length <= pick.max_seqlen) {
      covering = rows.size();
      covered = true;
    }
    KernelConfig k = pick.config;
    k.dtype = p.dtype;
    rows.push_back(k);
  }
  if (!covered && !rows.empty()) covering = rows.size() - 1;
  std::vector<KernelConfig> nearest;
  for (size_t step = 0; nearest.size() < rows.size(); ++step) {
    if (step <= covering) nearest.push_back(rows[covering - step]);
    if (step > 0 && covering + step < rows.size()) nearest.push_back(rows[covering + step]);
  }
  return nearest;
}

}  // namespace fa::cuda
