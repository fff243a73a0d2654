// The kernel choice measured on real hardware: for each (arch, head dim, causal, length) the
// fastest registered kernel of a tuning sweep (src/cuda/heuristic_sm*.txt, emitted as C++ by
// tools/generate_kernels.py), plus the autotuning candidates the sweep ranked next.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/kernel_config.hpp"
#include "core/problem.hpp"

namespace fa::cuda {

struct ChoicePick {
  int arch;            // compute capability * 10 + minor, e.g. 90
  int d_head;
  int d_head_v;        // the value head dim of the sweep's problems ("192:128" rows), else d_head
  bool causal;
  int64_t max_seqlen;  // for max(seqlen_q, seqlen_k) up to this (the last row: any longer)
  KernelConfig config; // its dtype is a placeholder
  bool fallback;       // a "fallback" row: the mma.sync kernel where the sm90 pick cannot run
  bool padded;         // a "pad" row: the pick for head dims (or value head dims) below d_head
                       // that take d_head's rows; its kernels alone carry the narrow pairs
};

struct ChoiceCandidate {
  int arch;
  int d_head;
  int d_head_v;
  bool causal;
  KernelConfig config;
};

std::span<ChoicePick const> choice_picks();            // generated
std::span<ChoiceCandidate const> choice_candidates();  // generated

// The measured table's kernel for `p` on a device of compute capability `arch`, with p's dtype:
// its pick, or (`fallback`) the mma.sync kernel for when the pick cannot run. A problem whose
// head dim or value head dim is below the rows' it takes (a padded dim, e.g. 72 on d 128's)
// takes the "pad" rows where the table has them: the kernels that carry the narrow pairs (any
// other runs it on its general instantiation over all of the kernel's columns: d 72 on d 128's
// at 0.585x its TFLOP/s before the pairs, narrow.hpp; generate_kernels.py's kernel_pairs).
// Only an sm_90 table is measured so far; other archs use the nearest measured one.
std::optional<KernelConfig> table_choice(int arch, Problem const& p, bool fallback);

// The table's picks (not fallbacks; its pad rows for a padded dim, as table_choice) for p's head
// dim and causality, dtype set to p's, nearest p's length first: the row covering it, then the
// rows below and above it alternately.
std::vector<KernelConfig> table_picks_nearest(int arch, Problem const& p);

// The table's autotuning candidates for `p` (dtype set to p's), in table order.
template <class Visit>
void for_each_candidate(int arch, Problem const& p, Visit&& visit);

// The measured table's head dim for a problem's `head_dim` on the table of `table` (an arch from
// nearest_table_arch()): the smallest of its pick rows' at or above it, whose kernels run it with
// zero columns; 0 when every row's is below.
int64_t table_head_dim(int table, int64_t head_dim);

// The value head dim of the table's rows (of `table`, `d_head`, `causal` and kind: picks, or
// `fallback` rows) that a problem's `head_dim_v` takes: the smallest at or above it (a kernel
// with more V columns reads zeros past it); 0 when there is none. A table measured on 192 / 128
// problems has "192:128" rows, which such problems take, and "192" ones, which 192 / 192
// problems take.
int64_t table_value_dim(int table, int64_t d_head, bool causal, int64_t head_dim_v, bool fallback);

int nearest_table_arch(int arch);

template <class Visit>
void for_each_candidate(int arch, Problem const& p, Visit&& visit) {
  int const table = nearest_table_arch(arch);
  int64_t const d_head = table_head_dim(table, p.head_dim);
  int64_t const d_head_v = table_value_dim(table, d_head, p.causal, p.head_dim_v, false);
  for (ChoiceCandidate const& c : choice_candidates()) {
    if (c.arch == table && c.d_head == d_head && c.d_head_v == d_head_v && c.causal == p.causal) {
      KernelConfig k = c.config;
      k.dtype = p.dtype;
      visit(k);
    }
  }
}

}  // namespace fa::cuda
