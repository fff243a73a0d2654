// The sm90 family's tile scheduler: which query tile a block takes in each round, and the key
// blocks that tile sees. The launcher's half (the head group) runs on the host (tile_order.hpp).
#pragma once

#include <cstdint>

#include "cuda/forward_params.hpp"
#include "cuda/sequence_view.cuh"
#include "cuda/sm90/tile.cuh"

namespace fa::cuda::sm90 {

// One query tile's work: its coordinates, its sequence (lengths, and first rows in a varlen
// batch, whose tensor maps span the packed rows with a batch extent of 1), and the key blocks it
// sees, [n_begin, n_begin + n_blocks), from the first key its first row sees to the last key its
// last row sees (walked last to first); with split-KV, split `split`'s equal share of them. A
// tile past its sequence's queries sees none.
struct Work {
  int m_block, head, batch, n_begin, n_blocks;
  int split;
  int map_batch;  // the tensor maps' batch coordinate
  SequenceView seq;
};

// kFast: the tile decoded by multiplies and shifts (fast_divmod.hpp; the divisors the
// launcher's, in Params); false: by integer divisions, for the general instantiation's consumers,
// where ptxas spilled with the fast decode (0 -> 36 bytes at d 128, 0 -> 12 on d 64's 192-row
// tile; the plain consumers and every producer unchanged). Tiles, splits included, are fewer
// than 2^31 (choice.cpp refuses a forced num_splits past it, choose_splits caps automatic
// ones), the fast decode's domain.
template <class T, bool kFast = true>
__device__ __forceinline__ Work work_of(Params const& params, int64_t tile) {
  ForwardParams const& p = params.p;
  // A query tile's splits are adjacent in the order: they read disjoint key blocks of one head.
  Work w;
  if constexpr (kFast) {
    uint32_t t, split, group, within, row_block, in_group, batch, head;
    params.split_div.divmod(uint32_t(tile), t, split);
    params.group_tiles_div.divmod(t, group, within);
    // The last group may hold fewer pairs.
    FastDivmod const size_div =
        int32_t(group) == params.last_group ? params.last_group_div : params.group_div;
    size_div.divmod(within, row_block, in_group);
    params.heads_div.divmod(group * uint32_t(params.head_group) + in_group, batch, head);
    w.split = int(split);
    w.m_block = p.n_q_blocks - 1 - int(row_block);
    w.head = int(head);
    w.batch = int(batch);
  } else {
    w.split = int(tile % p.num_splits);
    tile /= p.num_splits;
    int64_t const pairs = int64_t(p.heads_q) * p.batch;
    int64_t const group_tiles = params.head_group * p.n_q_blocks;
    int64_t const group = tile / group_tiles;
    int64_t const first_pair = group * params.head_group;
    int64_t const size = min(params.head_group, pairs - first_pair);
    int64_t const within = tile - group * group_tiles;
    int64_t const pair = first_pair + within % size;
    w.m_block = p.n_q_blocks - 1 - int(within / size);
    w.head = int(pair % p.heads_q);
    w.batch = int(pair / p.heads_q);
  }
  w.seq = sequence_view(p, p.layout, w.batch);
  w.map_batch = p.layout == kLayoutVarlen ? 0 : w.batch;
  int64_t const sq = w.seq.sq, sk = w.seq.sk;
  int64_t const first_row = int64_t(w.m_block) * T::kBr;
  int64_t const last_row = min(first_row + T::kBr, sq) - 1;
  int64_t const key_end = min(sk, last_row + sk - sq + p.window_right + 1);
  int64_t const key_begin = max(int64_t(0), first_row + sk - sq - p.window_left);
  w.n_begin = int(key_begin / T::kBc);
  w.n_blocks = first_row >= sq || key_end <= key_begin
                   ? 0
                   : int((key_end + T::kBc - 1) / T::kBc) - w.n_begin;
  if (p.num_splits > 1) {
    int const per_split = (w.n_blocks + p.num_splits - 1) / p.num_splits;
    int const skip = min(w.n_blocks, w.split * per_split);
    w.n_begin += skip;
    w.n_blocks = min(w.n_blocks - skip, per_split);
  }
  return w;
}

// The tiles in order (Params::head_group) are dealt out in rounds of gridDim.x: without
// `persistent` a block takes one; with it, block b takes position b of every even round and
// gridDim.x - 1 - b of every odd one. The snake evens out the blocks' sums of work when tiles
// come heaviest first (causal): plain striding hands block 0 the heaviest tile of every round
// (on an H200 at d = 256, causal, 16k: 0.52x the speed of one block per tile).
// A block walks rounds 0, 1, ... until tile() says it has none left. (No count of rounds: its
// 64-bit division at the kernel's entry, held across the consumers' code, made ptxas spill it in
// FP8 tiles: 28 / 84 bytes in d 128's general instantiation.)
template <class T>
struct TileScheduler {
  int64_t n_tiles;
  int grid;  // gridDim.x: below 2^31

  __device__ __forceinline__ explicit TileScheduler(ForwardParams const& p)
      : n_tiles(int64_t(p.n_q_blocks) * p.heads_q * p.batch * p.num_splits),
        grid(int(gridDim.x)) {}

  // The tile of `round`; n_tiles or more when the block has none left (a block of a kernel
  // without kPersistent takes round 0's alone). The position within the round in 32 bits: a
  // 64-bit grid - 1 - blockIdx.x, hoisted out of the tile loop, spilled in the persistent d 64
  // tile's e4m3-cache instantiation (8 bytes under its producer's 56 registers).
  __device__ __forceinline__ int64_t tile(int64_t round) const {
    if (!T::kPersistent && round > 0) return n_tiles;
    int const b = int(blockIdx.x);
    return round * grid + (round & 1 ? grid - 1 - b : b);
  }
};

}  // namespace fa::cuda::sm90
