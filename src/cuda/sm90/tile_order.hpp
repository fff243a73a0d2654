// The host's half of the sm90 family's tile order (tile_scheduler.cuh walks it): how many
// (batch, head) pairs a launch walks together. Plain C++, so the family tests check it; defined
// in tile_order.cpp, so the kernel files (launch.cuh) do not parse <algorithm>.
#pragma once

#include <cstdint>

#include "cuda/forward_params.hpp"

namespace fa::cuda::sm90 {

// (batch, head) pairs walked together (Params::head_group).
//   - Without a mask (every tile the same work): the query heads of one K/V head, so each head's
//     query blocks run side by side, reading its K and V blocks at the same time. Groups sized
//     for L2 (6 heads at d = 128, 8k keys: 132 blocks on 22 query blocks of each) read 454 MB
//     from DRAM and 9.1 GB through L2 at d = 128, non-causal 8k, against 202 MB and 3.5 GB for
//     FA4, whose grid walks query blocks fastest; one head at a time ran 1.01-1.06x faster at
//     d 128 and 256 (512-8k; 16k within 1%) and 1.00-1.02x at d 64 (H200, bf16).
//   - Under a mask: as many as keep their K and V within 24 MiB, half of the H100's 50 MB L2
//     (the rest holds the streamed Q and O), counting a K/V head once for the query heads that
//     share it: at d = 128 and 16k keys a head's K and V take 8 MiB, so 3 heads (12 with 4 query
//     heads per K/V head). A persistent kernel orders tiles heaviest first within a group, and
//     takes
//   - every pair where a pair has more than 16 query blocks: a group of one head at 16k keys spans
//     that head's every query block in one round of 132 tiles, and the block that drew the
//     heaviest each round took 2x the mean (0.53x the speed of one block per tile at d = 256);
//     groups sized for 4 rounds ran 3-14% slower at 8k and 16k than every pair (H200);
//   - else the L2's share, but at least enough pairs for 4 rounds of `grid` tiles: with every
//     pair each query block of every head ran before the next, and at 512 keys, d = 128, the 512
//     heads' K and V (134 MB) came from DRAM once per query block, 456 MB in all against 276 MB
//     for FA4; grouped, 1.17x faster at 512 and 1024 (ncu and back-to-back timing, H200);
//     rounded up to whole pairs of rounds (a multiple of 2 grid / gcd(2 grid, query blocks)
//     pairs), so that a group's tiles end where a round of the snake (tile_scheduler.cuh) does
//     and each group balances its blocks' work on its own. At d 64, causal 512 (192 pairs of
//     4 query blocks, 5.8 rounds) a group's heaviest tiles began mid-round: in a model where a
//     tile costs its key blocks plus one, the busiest block had 1.09x the mean work, 1.01x with
//     198 pairs (at 1k, 96 and 99 pairs: 1.11x and 1.02x; over 2824 shapes of batch, heads and
//     256-2048 keys, the busiest block's work 0.972x the unrounded group's, geometric mean).
//     Measured: d 64 causal 512 and 1k 1.028x and 1.054x faster, the FA-paper grid 1.0034x
//     (H200, bf16).
//   - Under a mask whose tiles are near equal work, as without one: query rows at most a quarter
//     of the keys (a chunked prefill's chunk against its cache; bottom-right causal), where a
//     query block's keys are 3/4 of the heaviest's or more. The persistent kernel's 4 rounds
//     put every pair of 4 x 512 against 8k (d 128, 32 / 8 heads, pages of 1: the three-stage
//     persistent pick) in one group walked query block by query block, so each block read the
//     whole cache (134 MB) again: 529 MB from DRAM against FA4's 232 (ncu, H200, session 56).
//     The lengths are the launch's (a cache's seqlen_k is its capacity): a first chunk in a
//     large cache takes this too and loses only the balance grouping.
int64_t head_group(ForwardParams const& p, int d_head, bool persistent, int64_t grid);

}  // namespace fa::cuda::sm90
