// The mma.sync family's rules (sm_80 and newer): GQA packing for decode, the decode kernel, and
// split-KV. Its kernels run every feature of the library with 16-bit queries; its decode tiles
// also read e4m3 (FP8) K/V caches.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>

#include "cuda/device.hpp"
#include "cuda/family.hpp"
#include "cuda/sm80/config.hpp"
#include "cuda/sm80/family.hpp"

namespace fa::cuda::sm80 {

namespace {

// Packing the query heads of one K/V head into a tile pays when one head's rows would leave the
// tile mostly empty (decode: seqlen_q < B_r); K and V are then read once per group.
bool pack_gqa(KernelConfig const& k, Problem const& p) {
  return p.heads_q > p.heads_kv && p.seqlen_q < k.B_r;
}

// A head dim below the kernel's runs with the 16-byte chunks past it zero-filled on load and
// never stored (smem_tile.cuh, epilogue.cuh), hence multiples of 8. An e4m3 cache with 16-bit
// queries runs on the fp8_kv_tile kernels (their third instantiation); e4m3 queries on none (the
// sm90 family's FP8 kernels run them).
std::string cannot_run(KernelConfig const& k, Problem const& p) {
  if (p.dtype == DType::kE4M3) {
    return "fa_config.dtype = 4 (FA_DTYPE_E4M3): the mma.sync family reads 16-bit queries (e4m3 "
           "queries run on the sm90 family's FP8 kernels and on CPU contexts)";
  }
  if (p.kv_dtype == DType::kE4M3) {
    if (!rules::fp8_kv_tile(k)) {
      return "fa_config.kv_dtype = 4 (FA_DTYPE_E4M3): the mma.sync family reads e4m3 caches with "
             "its 64-row, 4-warp tiles only";
    }
    // 16-byte copies of e4m3 rows (smem_tile.cuh) need their starts 16-byte aligned.
    if (std::string why = e4m3_strides(p); !why.empty()) return why;
  }
  if (std::string why = head_dim_below(k, p, "mma.sync"); !why.empty()) return why;
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

// The key split (kernel.cuh's kKeySplit) for a decode tile whose every tile's rows fit one
// warp's 16 (seqlen_q times the packed heads), with a 16-bit or an e4m3 cache.
bool key_split(KernelConfig const& k, Problem const& p, bool pack) {
  int64_t const rows = p.seqlen_q * (pack ? p.heads_q / p.heads_kv : 1);
  return rules::key_split_tile(k) && rows <= k.B_r / k.n_warps;
}

Schedule schedule(Device const& device, KernelEntry const& kernel, Problem const& p,
                  bool allow_split) {
  KernelConfig const& k = kernel.config;
  Schedule s;
  s.pack_gqa = pack_gqa(k, p);
  s.key_split = key_split(k, p, s.pack_gqa);
  int64_t const base = unsplit_blocks(k.B_r, p, s.pack_gqa);
  // The split count fills one wave of resident blocks (blocks_per_sm of them per SM), or one
  // block per SM where splits would be short (choose_splits).
  auto const occ = device.blocks_per_sm.find(&kernel);
  int64_t const capacity =
      int64_t(device.sm_count) * (occ == device.blocks_per_sm.end() ? 1 : occ->second);
  int const splits = choose_splits(p, base, capacity, device.sm_count, k.B_c, allow_split);
  s.num_splits = splits;
  s.blocks = base * splits;
  // The key split is the general instantiation's.
  s.general = needs_general(p, k.d_head, k.d_head, s.pack_gqa, splits) || s.key_split;
  if (splits > 1) s.workspace_bytes = split_workspace_bytes(p, splits);
  return s;
}

ForwardParams params(KernelConfig const& k, Problem const& p, Schedule const& s) {
  return forward_params(p, k.B_r, s);
}

// Its kernels look up each row's page (kernel.cuh): no tile reads a paged cache better.
int paged_rank(KernelConfig const&, Problem const&) { return 0; }

}  // namespace

// The e4m3 instantiation's staging and query-row scales on top of the tiles: d 128's (64, 128)
// tile takes 112 KiB and 256 bytes, past the 99 KiB of sm_86, sm_89 and sm_120; with the key
// split, 80 KiB and 256 bytes.
int64_t smem(KernelConfig const& k, Problem const& p) {
  if (p.kv_dtype != DType::kE4M3) return smem_bytes(k);
  return key_split(k, p, pack_gqa(k, p)) ? e4m3_split_smem_bytes(k) : e4m3_smem_bytes(k);
}

bool splits_keys(KernelConfig const&) { return true; }

KernelFamily const kFamily{"mma.sync", &cannot_run, &pack_gqa, &decode_rank, &paged_rank,
                           &schedule, &params, &smem, &splits_keys};

}  // namespace fa::cuda::sm80
