// The seam between the shared GPU code and a kernel family. A family is a folder (src/cuda/sm80/,
// src/cuda/sm90/) holding its kernels, its rules and its launch; it answers the questions below,
// and the shared code (device handling, the choice across families, launch, split-KV combine and
// merge) asks them without knowing any family's knobs or rules. The families a build compiles are
// listed once, in tools/generate_kernels.py, which emits find_family() and the registry entries.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/kernel_config.hpp"
#include "core/problem.hpp"
#include "cuda/forward_params.hpp"

namespace fa::cuda {

struct Device;
struct KernelEntry;

// How a problem runs on one kernel: GQA packing, key splits, grid and workspace.
struct Schedule {
  bool pack_gqa = false;
  int num_splits = 1;
  bool general = false;        // needs the kernels' general instantiation (KernelEntry::launch)
  int64_t blocks = 0;          // thread blocks of the forward kernel
  size_t workspace_bytes = 0;  // split-KV partials or V's images; 0 when neither
  // Optional scratch: the sm90 FP8 kernels' V transposed ahead of the run
  // (ForwardParams::v_images), used when the run's workspace holds it (then workspace_bytes,
  // unsplit); a run without it transposes in the kernel, or with images_required (a kernel
  // that only copies them) fails (a plan launches its fallback instead: api.cpp).
  size_t v_image_bytes = 0;
  bool images_required = false;
  bool key_split = false;      // the warps share each key block (ForwardParams::key_split)
};

struct KernelFamily {
  char const* name;
  // Why kernel `k` of this family cannot run `p`, its dtype and head dim being p's (the shared
  // code checks those and the grid's size); empty when it can.
  std::string (*cannot_run)(KernelConfig const& k, Problem const& p);
  // Whether `k` packs the query heads of one K/V head into a tile for `p` (read once for all).
  bool (*pack_gqa)(KernelConfig const& k, Problem const& p);
  // How well `k` suits `p` as a decode kernel (a few query rows per K/V head against many keys,
  // bound by reading K and V): 0 when it is not one for `p`; the choice takes the highest.
  int (*decode_rank)(KernelConfig const& k, Problem const& p);
  // How well `k` reads `p`'s paged cache: 0 when `p` is not paged or the family has no
  // preference, else higher for the kernel that reads its key blocks faster (fewer copies, or
  // more of them in flight).
  // The choice gives the measured table's pick up for another of the table's picks (the nearest
  // in length first) or autotuning candidates of the same family, head dim and causality with a
  // higher rank.
  int (*paged_rank)(KernelConfig const& k, Problem const& p);
  // The schedule of `p` on `kernel` on `device` (the split count is p.num_splits when forced, a
  // heuristic or 1 otherwise; always 1 with `allow_split` false). `kernel` runs `p`.
  Schedule (*schedule)(Device const& device, KernelEntry const& kernel, Problem const& p,
                       bool allow_split);
  // Launch parameters of `k` for `p` under `s`, without pointers.
  ForwardParams (*params)(KernelConfig const& k, Problem const& p, Schedule const& s);
  // Dynamic shared memory of `k` running `p` (an instantiation for e4m3 caches stages more), which
  // the choice holds against the device's opt-in limit.
  int64_t (*smem_bytes)(KernelConfig const& k, Problem const& p);
  // Whether `k` splits the keys where its grid leaves SMs idle (schedule); the choice refuses a
  // kernel that cannot (the sm90 FP8 tile that copies V's images) where a split would run.
  bool (*splits_keys)(KernelConfig const& k);
};

// The family with this KernelConfig::family value, or nullptr when the build does not compile
// it. Generated (families_generated.cpp).
KernelFamily const* find_family(int32_t family);

// ---- Building blocks every family's answers use (family.cpp) ----------------------------------

// Thread blocks of one unsplit launch with B_r query rows per block: query blocks x head units
// x batch, where packing GQA puts the heads_q / heads_kv query heads of a K/V head in one tile.
int64_t unsplit_blocks(int B_r, Problem const& p, bool pack_gqa);

// Whether the plain instantiation of either family's kernels (head dims d_head for Q and K,
// d_head_v for V and O) leaves `p` to the general one: dense, varlen and contiguous-cache
// layouts with causal and window masks at the kernel's head dims are plain; a paged cache, FP8
// inputs, score transforms, sinks, packed GQA, splits and a head dim or value head dim below the
// kernel's are general (the sm90 family's FP8 kernels read their descales in either, and its
// schedule asks this for e4m3 Q, K and V as if they were bf16, and at the kernel's head dims:
// its launch runs narrower ones on narrow pairs, plain features with column bounds, where one
// fits, sm90/narrow.hpp). The plain instantiation at the kernel's own dims then needs no
// column bound in its loads and stores: a bound kept for it cost the d 256 kernels 28-40 bytes
// more spills and 1.4% (H200, docs/performance.md).
bool needs_general(Problem const& p, int d_head, int d_head_v, bool pack_gqa, int num_splits);

// Why a family whose kernels run a head dim below their own (`k`'s) in 16-byte column units,
// the columns past it zero-filled on load and never written, cannot run `p`: a message naming
// head_dim (and `family`) when it differs from k's and is not a multiple of 8, else empty.
std::string head_dim_below(KernelConfig const& k, Problem const& p, char const* family);

// Why a family whose kernels read V and write O with the kernel's head dim of columns, the
// ones past head_dim_v zero-filled and never written, cannot run `p`: a message naming
// head_dim_v and head_dim (and `family`) when head_dim_v is above head_dim or not a multiple of
// 8, else empty.
std::string value_dim_differs(Problem const& p, char const* family);

// Why the GPU kernels cannot read `p`'s e4m3 tensors: a message naming the first K or V stride,
// or with e4m3 queries Q stride, that is not a multiple of 16 elements (their rows are copied in
// 16-byte units: cp.async, TMA), else empty.
std::string e4m3_strides(Problem const& p);

// Bytes of the fp32 partials of a `num_splits`-way split (the combine kernel's layout,
// combine.hpp), rounded up to 256.
size_t split_workspace_bytes(Problem const& p, int num_splits);

// The split count of a problem whose unsplit grid has `base` blocks, on a device of `sms` SMs
// holding `capacity` of them at once, with key blocks of B_c keys: the problem's num_splits when
// forced; with allow_split, enough splits to fill the device when the grid leaves it idle (decode):
// with more than one resident block per SM, one wave holding 90% of the slots or more whose splits
// read 4 to 32 key blocks; else every resident slot where each split still reads 8 key blocks or
// more, else (with more than one resident block per SM) one block per SM; else 1. Each count is
// returned as the splits it leaves a key block of a sequence of seqlen_k keys (a split reads
// ceil(key blocks / count)); shorter sequences of a batch and windowed rows may still leave a
// split empty. 1 when the partials' int32 row index cannot hold the problem.
int choose_splits(Problem const& p, int64_t base, int64_t capacity, int64_t sms, int B_c,
                  bool allow_split);

// The ForwardParams of `p` on a kernel of B_r query rows per block under `s`, without pointers:
// strides, lengths, layout, masks and score scaling, and the tile's packing, query blocks and
// splits.
ForwardParams forward_params(Problem const& p, int B_r, Schedule const& s);

}  // namespace fa::cuda
