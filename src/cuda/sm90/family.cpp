// The sm90 family's rules (sm_90a): what its TMA-fed kernels do not run, and its persistent grid.
#include <algorithm>
#include <cstdint>
#include <string>

#include "cuda/device.hpp"
#include "cuda/family.hpp"
#include "cuda/sm90/config.hpp"
#include "cuda/sm90/family.hpp"

namespace fa::cuda::sm90 {

namespace {

// Image slots of V (v_images.cuh's v_image_index): a dense problem's key blocks per sequence and
// K/V head; a varlen batch's per K/V head, total_k / B_c + batch (each sequence's from its first
// key row / B_c + its index on). v_image_count: all of them.
int64_t v_image_slots(KernelConfig const& k, Problem const& p) {
  return p.layout == Layout::kVarlen ? p.total_k / k.B_c + p.batch
                                     : (p.seqlen_k + k.B_c - 1) / k.B_c;
}
int64_t v_image_count(KernelConfig const& k, Problem const& p) {
  return (p.layout == Layout::kVarlen ? 1 : p.batch) * p.heads_kv * v_image_slots(k, p);
}

// Whether an FP8 problem's V is transposed ahead of the run (the producer then copies each
// stage's image) rather than by the producer for every query tile. Dense and varlen problems
// only: a KV cache's capacity holds more keys than a step reads, and each step would transpose
// them all again. The images cost a read of V and a write of its size (about 15 us for the
// FA-paper grid's 32 MiB on an H200) and save each query tile that reads a V block its
// transpose: on the H200 (FA-paper grid, d 128 and 256, docs/performance.md) they ran
// 0.82-0.92x at 512 keys (4 query tiles per V block), 0.94-1.01x at 1024 (8), 1.02-1.08x at
// 2048 non-causal (16) and 0.98-1.0x causal (whose tiles read half the blocks on average),
// 1.03-1.17x from 4096. So: 16 query tiles per V block, 32 with a mask that leaves tiles part
// of the keys (a varlen batch's query rows per sequence averaged). The tile that copies the
// images at d 256 (128 keys a block; the transposing tile's 64) pays sooner: without a mask
// 1.02x at 4 query tiles per block (512 keys), 1.12x at 8; with one 0.90x at 4, 1.00-1.03x at
// 8, 1.10-1.11x at 16 (at d 128, 192 keys against 128: 0.82x / 0.90-0.91x at 4 / 8 without a
// mask, 0.97-0.98x at 16 with one; H200). A problem whose V blocks fewer query tiles read runs
// the smaller tile.
int64_t images_min_tiles(KernelConfig const& k, Problem const& p) {
  bool const masked = p.causal || p.window;
  if (e4m3_images_only(k) && k.d_head == 256) return masked ? 16 : 4;
  return masked ? 32 : 16;
}
bool images_pay(KernelConfig const& k, Problem const& p) {
  bool const varlen = p.layout == Layout::kVarlen;
  // (V's rows in whole 16-byte chunks: v_images.cuh's loads.)
  if ((p.layout != Layout::kDense && !varlen) || p.head_dim_v % 16 != 0) return false;
  // The transposing grid's x extent: a block per key block of every (sequence, K/V head).
  if (p.batch * p.heads_kv * ((p.seqlen_k + k.B_c - 1) / k.B_c) > INT32_MAX) return false;
  int64_t const rows = varlen ? p.total_q / std::max<int64_t>(p.batch, 1) : p.seqlen_q;
  // Whole query tiles, as measured: tiles of a few rows (decode-like) are bound by reading K and
  // V, which the images would read and write once more.
  if (rows < k.B_r) return false;
  int64_t const tiles = (rows + k.B_r - 1) / k.B_r * (p.heads_q / p.heads_kv);
  return tiles >= images_min_tiles(k, p);
}

// It reads every tensor through TMA maps (tensor_map.hpp), a paged cache's in boxes of
// gcd(B_c, page_size) rows or, where those would not be a multiple of 8 rows, gathered by its
// producer warpgroup (config.hpp's gathers_pages, mainloop_load.cuh), and keeps raw scores with
// the scale folded into exp2 (softmax.cuh).
// A head dim below the kernel's runs with the columns past it zero-filled on load (the maps
// span head_dim columns; TMA fills a box's part outside them with zeros, and the gather
// zero-fills its 16-byte chunks there) and never written (a TMA store clips at the map's
// edge; the threads' own stores and the split partials stop at head_dim): Q K^T and P V over
// zero columns add nothing. A row's columns come in 16-byte units, hence multiples of 8.
std::string cannot_run(KernelConfig const& k, Problem const& p) {
  // e4m3 queries (with an e4m3 cache, fa_config_validate's rule) on the FP8 kernels (dtype
  // E4M3: the choice matched the dtypes), whose producer reads K and V in TMA boxes only.
  if (p.dtype == DType::kE4M3) {
    if (p.layout == Layout::kPagedKv && gathers_pages(k.B_c, p.page_size)) {
      return "fa_config.page_size = " + std::to_string(p.page_size) + ": the sm90 family's "
             "e4m3 kernels read pages in TMA boxes of a multiple of 8 rows (gcd(B_c, page_size))";
    }
    if (std::string why = e4m3_strides(p); !why.empty()) return why;
    // A tile whose producer only copies V's images (config.hpp's e4m3_images_only): problems
    // whose images pay, unsplit, in a run that brings the workspace for them.
    if (e4m3_images_only(k)) {
      if (p.no_workspace) {
        return "this FP8 tile copies V transposed ahead of the run from the workspace, and the "
               "run brings none";
      }
      if (p.num_splits > 1) {
        return "fa_config.num_splits = " + std::to_string(p.num_splits) + ": this FP8 tile "
               "copies V transposed ahead of an unsplit run";
      }
      if (!images_pay(k, p)) {
        return "this FP8 tile copies V transposed ahead of the run, which pays for dense and "
               "varlen problems (head_dim_v a multiple of 16, whole query tiles) from " +
               std::to_string(images_min_tiles(k, p)) + " query tiles of " +
               std::to_string(k.B_r) + " rows per key block of this problem's mask";
      }
    }
  } else if (p.kv_dtype == DType::kE4M3) {
    // The e4m3 instantiations (tile.cuh's e4m3 stages, converted by the producer warpgroup: V's,
    // and K's but in the plain instantiation of rules::e4m3_keys kernels).
    if (!rules::fp8_kv_tile(k)) {
      return "fa_config.kv_dtype = 4 (FA_DTYPE_E4M3): the sm90 family reads e4m3 caches with "
             "its two-stage, overlapped tiles without ping-pong, 128 x 128 persistent at d 64 and "
             "128 and 128 x 64 with one tile per block at d 256, only";
    }
    // TMA boxes of whole pages' rows; a page size whose boxes the producer would gather
    // (gcd(B_c, page_size) not a multiple of 8) runs on the mma.sync family.
    if (p.layout == Layout::kPagedKv && gathers_pages(k.B_c, p.page_size)) {
      return "fa_config.page_size = " + std::to_string(p.page_size) + ": the sm90 family reads "
             "e4m3 pages in TMA boxes of a multiple of 8 rows (gcd(B_c, page_size))";
    }
    if (std::string why = e4m3_strides(p); !why.empty()) return why;
  }
  if (std::string why = head_dim_below(k, p, "sm90"); !why.empty()) return why;
  if (std::string why = value_dim_differs(p, "sm90"); !why.empty()) return why;
  // A kernel holding V in 128 columns (config.hpp's v_cols: d 192 with 128 keys).
  if (p.head_dim_v > v_cols(k)) {
    return "head_dim_v = " + std::to_string(p.head_dim_v) + ": this kernel holds V and O in " +
           std::to_string(v_cols(k)) + " columns (its V stages of d_head = " +
           std::to_string(k.d_head) + " columns would not fit in shared memory)";
  }
  // A box past the pool reads page num_pages (zeros), an int32 TMA coordinate.
  if (p.layout == Layout::kPagedKv && p.num_pages >= (int64_t(1) << 31) - 1) {
    return "num_pages of 2^31 - 1 or more (TMA's limit)";
  }
  // A TMA map's strides must stay below 2^40 bytes.
  for (int64_t stride : {p.q.batch, p.q.seq, p.q.head, p.k.batch, p.k.seq, p.k.head, p.v.batch,
                         p.v.seq, p.v.head}) {
    if (stride >= (int64_t(1) << 39)) return "a stride of 2^39 elements or more (TMA's limit)";
  }
  return {};
}

bool pack_gqa(KernelConfig const&, Problem const&) { return false; }

int decode_rank(KernelConfig const&, Problem const&) { return 0; }

// A paged key block is read in TMA boxes of gcd(B_c, page_size) rows. Boxes of 16 rows (pages of
// 16; pages of 64 and 256 under the d 256 tables' B_c of 80) cost 12-16% of the contiguous speed
// on the H200 and boxes of 64 rows or more 0-3% (docs/performance.md, "Hopper serving"): at d 256,
// chunked prefill of 4 x 512 against 16k at pages 64 and 256 took 1957-1965 us with B_c 80 and
// 1804-1812 us with B_c 64 (contiguous 1675 and 1836). So the rank grows with the box: 1 under
// 32 rows, 2 for 32-63 (not measured; fewer copies per block than 16-row boxes), 3 for 64 or
// more. Gathered pages (gathers_pages: the same for every B_c at a page size, all multiples of
// 16) rank by their stages, 1 with three and 0 with two: the producer's copies of a third block
// in flight hide the gather's latency (on pages of 1, chunked prefill ran 1.12-1.27x faster on
// the three-stage 128 x 128 tile than on the two-stage picks at d 64 and d 128, 0.81-0.84x the
// contiguous speed; H200, docs/performance.md, "Gathered pages: whole sectors").
int paged_rank(KernelConfig const& k, Problem const& p) {
  if (p.layout != Layout::kPagedKv || p.page_size <= 0) return 0;
  if (gathers_pages(k.B_c, p.page_size)) return k.stages >= 3 ? 1 : 0;
  int64_t const box = page_box_rows(k.B_c, p.page_size);
  return box < 32 ? 1 : box < 64 ? 2 : 3;
}

// A tile that copies V's images runs unsplit (its images are an unsplit run's).
bool splits_keys(KernelConfig const& k) { return !e4m3_images_only(k); }

Schedule schedule(Device const& device, KernelEntry const& kernel, Problem const& p,
                  bool allow_split) {
  KernelConfig const& k = kernel.config;
  Schedule s;
  int64_t const base = unsplit_blocks(k.B_r, p, false);
  // One block fits per SM (the tile's shared memory and 384-512 threads).
  int64_t const sms = std::max(device.sm_count, 1);
  s.num_splits = choose_splits(p, base, sms, sms, k.B_c, allow_split && splits_keys(k));
  s.blocks = base * s.num_splits;
  // A persistent kernel launches one block per SM, each walking tiles.
  if (k.persistent) s.blocks = std::min<int64_t>(s.blocks, sms);
  // Its producer reads pages at run time in either instantiation: a paged cache alone does not
  // need the general one (as the mma.sync family's does). Splits do (the partials' epilogue).
  Problem dense_cache = p;
  if (dense_cache.layout == Layout::kPagedKv) dense_cache.layout = Layout::kKvCache;
  // An FP8 kernel reads its descales in either instantiation (kernel.cuh): e4m3 queries alone do
  // not need the general one; nor does an e4m3 cache where its keys are read as loaded
  // (rules::e4m3_keys: bf16 queries at d 128 and 256), elsewhere its own general instantiation.
  if (k.dtype == DType::kE4M3 || rules::e4m3_keys(k)) {
    dense_cache.dtype = dense_cache.kv_dtype = DType::kBF16;
  }
  // Head dims below the kernel's are the launch's to place (launch.cuh): a narrow pair of the
  // plain instantiation where one fits and no general feature is needed, else the general one.
  dense_cache.head_dim = k.d_head;
  dense_cache.head_dim_v = v_cols(k);
  s.general = needs_general(dense_cache, k.d_head, int(v_cols(k)), false, s.num_splits);
  if (s.num_splits > 1) s.workspace_bytes = split_workspace_bytes(p, s.num_splits);
  if (k.dtype == DType::kE4M3 && s.num_splits == 1 && images_pay(k, p)) {
    s.v_image_bytes = size_t(v_image_count(k, p) * e4m3_v_image_bytes(k));
    s.workspace_bytes = s.v_image_bytes;
  }
  // (A copying tile's run without images fails in launch.cpp, should cannot_run ever be passed.)
  s.images_required = e4m3_images_only(k);
  return s;
}

ForwardParams params(KernelConfig const& k, Problem const& p, Schedule const& s) {
  ForwardParams f = forward_params(p, k.B_r, s);
  if (s.v_image_bytes > 0) f.v_image_blocks = int32_t(v_image_slots(k, p));
  return f;
}

}  // namespace

// An e4m3 cache runs on the fp8_kv_tile kernels' own layout (config.hpp).
int64_t smem(KernelConfig const& k, Problem const& p) {
  return p.kv_dtype == DType::kE4M3 && rules::fp8_kv_tile(k) ? e4m3_smem_bytes(k)
                                                              : k.smem_bytes();
}

KernelFamily const kFamily{"sm90", &cannot_run, &pack_gqa, &decode_rank, &paged_rank, &schedule,
                           &params, &smem, &splits_keys};

}  // namespace fa::cuda::sm90
