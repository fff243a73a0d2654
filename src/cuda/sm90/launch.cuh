// Registration and launch of sm90 kernels (included by the generated fa_fwd_sm90a_*.cu files,
// which compile for sm_90a only).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/sm90/config.hpp"
#include "cuda/sm90/kernel.cuh"
#include "cuda/sm90/tensor_map.hpp"
#include "cuda/sm90/tile_order.hpp"
#include "cuda/sm90/tile_scheduler.cuh"
#include "cuda/sm90/v_images.cuh"
#include "cuda/kernel_entry.hpp"
#include "cuda/programmatic.hpp"

namespace fa::cuda::sm90 {

template <KernelConfig C, bool kPersistent = C.persistent>
using TileOf = Tile<C.dtype, C.d_head, C.B_c, C.stages, C.n_warps / 4 - 1, C.overlap, C.pingpong,
                    kPersistent>;

// The tile C's narrow pairs run (config.hpp's pairs_persistent: maybe its persistent twin's).
template <KernelConfig C>
using PairTileOf = TileOf<C, pairs_persistent(C)>;

// The narrow pairs kI.. of kList (narrow.hpp's Narrow), each given `prepare`.
template <class T, NarrowList kList, int kI = 0, class Prepare>
cudaError_t prepare_narrow(Prepare const& prepare) {
  if constexpr (kI >= Narrow<T, kList>::kCount) {
    return cudaSuccess;
  } else {
    constexpr NarrowDims kDims = kList.dims[kI];
    if (cudaError_t e = prepare(forward_kernel<T, false, kDims.qk_cols, kDims.v_cols>);
        e != cudaSuccess) {
      return e;
    }
    return prepare_narrow<T, kList, kI + 1>(prepare);
  }
}

// Launches kList's narrow pair `pick` (1-based) on the pairs' tile P, or with none T's general
// instantiation.
template <class T, class P, NarrowList kList, int kI = 0>
cudaError_t launch_narrow(cudaLaunchConfig_t const& config, Params const& params, int pick) {
  if constexpr (kI >= Narrow<P, kList>::kCount) {
    return cudaLaunchKernelEx(&config, forward_kernel<T, true>, params);
  } else {
    constexpr NarrowDims kDims = kList.dims[kI];
    if (pick == kI + 1) {
      return cudaLaunchKernelEx(&config, forward_kernel<P, false, kDims.qk_cols, kDims.v_cols>,
                                params);
    }
    return launch_narrow<T, P, kList, kI + 1>(config, params, pick);
  }
}

template <KernelConfig C, NarrowList kList>
cudaError_t prepare_kernel() {
  using T = TileOf<C>;
  auto const prepare = [](auto kernel) {
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                T::kSmemBytes);
  };
  for (auto kernel : {forward_kernel<T, false>, forward_kernel<T, true>}) {
    if (cudaError_t e = prepare(kernel); e != cudaSuccess) return e;
  }
  if (cudaError_t e = prepare_narrow<PairTileOf<C>, kList>(prepare); e != cudaSuccess) return e;
  // The e4m3-cache instantiations: the general one, and the plain one where K is read as loaded.
  auto const prepare_e4m3 = [](auto kernel) {
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                T::kE4M3SmemBytes);
  };
  if constexpr (rules::fp8_kv_tile(C)) {
    if (cudaError_t e = prepare_e4m3(forward_kernel<T, true, 0, 0, true>); e != cudaSuccess) {
      return e;
    }
  }
  if constexpr (rules::e4m3_keys(C)) {
    return prepare_e4m3(forward_kernel<T, false, 0, 0, true>);
  }
  return cudaSuccess;
}

template <KernelConfig C>
cudaError_t kernel_attributes(cudaFuncAttributes* out) {
  return cudaFuncGetAttributes(out, forward_kernel<TileOf<C>, false>);
}

template <KernelConfig C>
cudaError_t kernel_occupancy(int* blocks_per_sm) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      blocks_per_sm, forward_kernel<TileOf<C>, false>, TileOf<C>::kThreads, TileOf<C>::kSmemBytes);
}

// Builds the run's tensor maps (about a microsecond each on the host) and launches on `grid`: a
// block per query tile, or with `persistent` one per SM (the schedule in family.cpp) walking them;
// `general` picks the instantiation with score transforms, sinks and split outputs (family.cpp
// refuses the features neither has); head dims below the kernel's run its cheapest narrow pair
// that fits them (with its heads' column shifts), or the general instantiation (narrow.hpp's
// Narrow).
template <KernelConfig C, NarrowList kList>
cudaError_t launch_kernel(ForwardParams const& p, dim3 grid, bool general, bool programmatic,
                          cudaStream_t stream) {
  using T = TileOf<C>;
  Params params;
  params.head_group = head_group(p, p.head_dim, C.persistent, grid.x);
  int64_t const pairs = int64_t(p.heads_q) * p.batch;
  int64_t const groups = (pairs + params.head_group - 1) / params.head_group;
  params.split_div = FastDivmod::make(p.num_splits);
  params.group_tiles_div = FastDivmod::make(params.head_group * p.n_q_blocks);
  params.group_div = FastDivmod::make(params.head_group);
  params.last_group_div = FastDivmod::make(pairs - (groups - 1) * params.head_group);
  params.heads_div = FastDivmod::make(p.heads_q);
  params.last_group = int32_t(groups - 1);
  // A varlen batch's maps span the packed rows (batch extent 1, tiles address rows from their
  // sequence's first); dense problems and contiguous caches span [batch, rows]; a paged cache's
  // K and V maps span its page pool [num_pages, page_size] in boxes of gcd(B_c, page_size) rows
  // (mainloop_load.cuh). fa_config_validate refuses empty packed tensors, which no map can
  // describe. The maps span the problem's head dims (head_dim for Q and K, head_dim_v for V and
  // O): below the kernel's, TMA fills a box's columns past them with zeros and a store clips
  // there (family.cpp).
  bool const varlen = p.layout == kLayoutVarlen, paged = p.layout == kLayoutPagedKv;
  int64_t const q_rows = varlen ? p.total_q : p.seqlen_q;
  int64_t const k_rows = varlen ? p.total_k : paged ? p.page_size : p.seqlen_k;
  int64_t const q_batch = varlen ? 1 : p.batch;
  int64_t const k_batch = varlen ? 1 : paged ? p.num_pages : p.batch;
  int64_t const heads_kv = p.heads_q / p.q_heads_per_kv;
  params.kv_box_rows = paged ? int32_t(page_box_rows(C.B_c, p.page_size)) : C.B_c;
  params.kv_gather = paged && gathers_pages(C.B_c, p.page_size) ? 1 : 0;  // config.hpp
  params.page_div = FastDivmod::make(paged ? p.page_size : 1);
  // An e4m3 cache (family.cpp admits it on fp8_kv_tile kernels, never gathered) is read as
  // bytes in boxes of whole rows (kD bytes) into the e4m3 stages (tile.cuh), or its K (keys8)
  // in swizzled boxes of 128 columns into the K stages.
  // An FP8 kernel reads Q and K in swizzled boxes of 128 columns (128 bytes, as the 16-bit
  // kernels' 64) and V in boxes of whole rows, which its producer transposes.
  // With bf16 queries at d 128 and 256 (rules::e4m3_keys), where no general feature or column
  // bound is needed, an e4m3 cache runs the plain instantiation, which reads its K as an FP8
  // kernel does, straight into the K stages (kernel.cuh's kKeys8).
  bool const e4m3 = p.kv_e4m3 != 0 && !T::kFp8;
  bool const keys8 = e4m3 && rules::e4m3_keys(C) && !general && p.head_dim == T::kD &&
                     p.head_dim_v == T::kDv;
  DType const kv_type = e4m3 || T::kFp8 ? DType::kE4M3 : C.dtype;
  int const k_cols = e4m3 && !keys8 ? T::kD : T::kFp8 || keys8 ? 128 : T::kBlockCols;
  int const v_cols = e4m3 || T::kFp8 ? T::kD : 64;
  BoxSwizzle const k_swizzle = T::kFp8 || keys8 ? BoxSwizzle::k128 : BoxSwizzle::kByType;
  // Head dims below the kernel's need the column bounds: without the general features, the
  // cheapest narrow pair that runs them (narrow.hpp's Narrow), else the general instantiation
  // (pick 0). An e4m3 cache takes neither (its own instantiations, below).
  bool const narrower = p.head_dim < T::kD || p.head_dim_v < T::kDv;
  int const pick = general ? 0 : Narrow<PairTileOf<C>, kList>::pick(p.head_dim, p.head_dim_v);
  bool const pair = pick > 0 && narrower && !e4m3 && params.kv_gather == 0;
  // A box row that ends inside a 32-byte sector, the rest filled with zeros by TMA, is the
  // slow case of a TMA load: d 24, 40 and 56 (rows ending 16 bytes into a sector) ran 1.02-1.04x
  // faster with V's map rounded up to whole sectors, 1.05-1.07x with Q's, K's and V's (H200,
  // docs/performance.md session 74). V's columns past head_dim_v reach only O's past it,
  // which no store writes, so where a row holds its K/V heads side by side, a pair's V map runs
  // over all of them as one run of columns and a box's columns past its head are the next
  // head's (only the last head's end at the row's, a sector boundary when the row's bytes are a
  // multiple of 32). K's cannot: Q's zero columns times a non-finite key of the next head
  // would make the scores NaN.
  // K's columns must be zeros past the head (above), and where a row is one box (the pairs up
  // to 64 on d 64's kernels) they need not come from TMA: a box of exactly head_dim columns
  // never reaches past the problem's (TMA lays a box narrower than its 128-byte swizzle span
  // into the first columns of each 128-byte row, the rest untouched, H200), and the kernel
  // zeroes the Q buffer and K stages once (kernel.cuh). Q's boxes likewise, and no shift for
  // them: a box from column -8 would reach outside the map again.
  // Each map is encoded once, in the form the launch takes; a form TMA refuses falls back to
  // the heads' own maps in boxes of 64 columns.
  auto const encode_qk = [&](int q_box_cols, int k_box_cols) {
    cudaError_t const e = encode_tile_map(&params.q_map, C.dtype, p.q, p.head_dim, q_rows,
                                          p.heads_q, q_batch, p.q_seq_stride, p.q_head_stride,
                                          p.q_batch_stride, T::kBr, q_box_cols, k_swizzle);
    return e != cudaSuccess ? e
                            : encode_tile_map(&params.k_map, kv_type, p.k, p.head_dim, k_rows,
                                              heads_kv, k_batch, p.k_seq_stride, p.k_head_stride,
                                              p.k_batch_stride, params.kv_box_rows, k_box_cols,
                                              k_swizzle);
  };
  // flat: V's columns as one run over a row's heads (a map of one head).
  auto const encode_v = [&](bool flat) {
    return encode_tile_map(&params.v_map, kv_type, p.v,
                           flat ? heads_kv * p.head_dim_v : p.head_dim_v, k_rows,
                           flat ? 1 : heads_kv, k_batch, p.v_seq_stride, p.v_head_stride,
                           p.v_batch_stride, params.kv_box_rows, v_cols);
  };
  bool const exact = pair && exact_qk_boxes(dtype_size(C.dtype), p.head_dim, T::kD) &&
                     encode_qk(int(p.head_dim), int(p.head_dim)) == cudaSuccess;
  if (!exact) {
    if (cudaError_t e = encode_qk(T::kBlockCols, k_cols); e != cudaSuccess) return e;
  }
  bool const flat = pair &&
                    flat_v_map(dtype_size(C.dtype), p.head_dim_v, heads_kv, p.v_head_stride) &&
                    encode_v(true) == cudaSuccess;
  if (!flat) {
    if (cudaError_t e = encode_v(false); e != cudaSuccess) return e;
  }
  // O through shared memory and TMA where the tile stages it (its own buffer, or at d 192 and 256
  // the Q tile) and the rows are written unsplit; an O whose base or strides TMA cannot describe
  // (not multiples of 16 bytes) is stored by the threads instead. (An e4m3 cache's layout has
  // no such buffer.)
  params.o_tma = 0;
  // (An FP8 kernel's O is bf16 or fp16.)
  DType const o_type = !T::kFp8 ? C.dtype : p.o_bf16 ? DType::kBF16 : DType::kFP16;
  if (T::kOStaged && p.num_splits == 1 && !e4m3 &&
      encode_tile_map(&params.o_map, o_type, p.o, p.head_dim_v, q_rows, p.heads_q, q_batch,
                      p.o_seq_stride, p.o_head_stride, p.o_batch_stride, 64) == cudaSuccess) {
    params.o_tma = 1;
  }
  params.p = p;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = dim3(T::kThreads);
  config.dynamicSmemBytes = T::kSmemBytes;
  config.stream = stream;
  cudaLaunchAttribute attribute = programmatic_attribute();
  if (programmatic) {
    config.attrs = &attribute;
    config.numAttrs = 1;
  }
  if constexpr (T::kFp8) {
    // V transposed first where the run's workspace holds its images (family.cpp's schedule).
    if (p.v_images != nullptr) {
      if (cudaError_t e = launch_v_images<T>(p, programmatic, stream); e != cudaSuccess) return e;
    }
  }
  if constexpr (rules::fp8_kv_tile(C)) {
    if (e4m3) {
      config.dynamicSmemBytes = T::kE4M3SmemBytes;
      if constexpr (rules::e4m3_keys(C)) {
        if (keys8) return cudaLaunchKernelEx(&config, forward_kernel<T, false, 0, 0, true>, params);
      }
      return cudaLaunchKernelEx(&config, forward_kernel<T, true, 0, 0, true>, params);
    }
  }
  if (!general && !narrower) return cudaLaunchKernelEx(&config, forward_kernel<T, false>, params);
  if (pair) {
    // A narrow pair's K and V heads whose rows start 16 bytes into a sector read from 8 columns
    // to the left (narrow.hpp's column_shift_bits), with the maps' strides and extents; not Q
    // and K in exact boxes (a box from column -8 would reach outside the map).
    NarrowDims const dims = kList.dims[pick - 1];
    params.kv_group_div = FastDivmod::make(p.q_heads_per_kv);
    params.k_shift = exact ? 0
                           : column_shift_bits(reinterpret_cast<uintptr_t>(p.k),
                                               dtype_size(C.dtype), p.head_dim, dims.qk_cols,
                                               p.k_seq_stride, k_rows, p.k_head_stride, heads_kv,
                                               p.k_batch_stride, k_batch);
    params.v_shift = column_shift_bits(reinterpret_cast<uintptr_t>(p.v), dtype_size(C.dtype),
                                       p.head_dim_v, dims.v_cols, p.v_seq_stride, k_rows,
                                       p.v_head_stride, heads_kv, p.v_batch_stride, k_batch);
    params.qk_box_cols = exact ? int32_t(p.head_dim) : 0;
    params.v_flat_cols = flat ? int32_t(p.head_dim_v) : 0;
  }
  return launch_narrow<T, PairTileOf<C>, kList>(config, params, pick);
}

// Instantiates the kernel for C, with the narrow pairs kList (the build's FA_NARROW_HEAD_DIMS that
// C's head dim is the smallest built one to hold), and adds it to the registry (called from the
// generated files).
template <KernelConfig C, NarrowList kList = NarrowList{}>
void register_kernel(Registry& registry) {
  static_assert(C.family == kId && fa::rules::common_ok(C) && rules::own(C), "a valid sm90 config");
  static_assert(smem_bytes(C) == TileOf<C>::kSmemBytes, "config.hpp's smem_bytes() is the tile's");
  static_assert(v_cols(C) == TileOf<C>::kDv, "config.hpp's v_cols() is the tile's");
  static_assert(rules::consumer_regs(C) == TileOf<C>::kConsumerRegs,
                "config.hpp's consumer_regs() is the tile's");
  static_assert(C.dtype == DType::kE4M3 || e4m3_smem_bytes(C) == TileOf<C>::kE4M3SmemBytes,
                "config.hpp's e4m3 layout");
  static_assert(!rules::fp8_kv_tile(C) || rules::e4m3_keys(C) == TileOf<C>::kE4M3Keys,
                "config.hpp's e4m3_keys is the tile's");
  static_assert(C.dtype != DType::kE4M3 || (e4m3_v_image_bytes(C) == TileOf<C>::kVImageBytes &&
                                             e4m3_images_only(C) == TileOf<C>::kImagesOnly),
                "config.hpp's V images");
  static_assert(PairTileOf<C>::kSmemBytes == TileOf<C>::kSmemBytes &&
                    PairTileOf<C>::kThreads == TileOf<C>::kThreads,
                "a config's pairs launch as its own tile");
  static_assert(Narrow<PairTileOf<C>, kList>::valid(),
                "narrow pairs: qk_cols a multiple of 16 and v_cols of 8, within the tile (its own "
                "width the widest), in ascending order of work");
  add_kernel(registry, KernelEntry{C, &prepare_kernel<C, kList>, &kernel_attributes<C>,
                                   &kernel_occupancy<C>, &launch_kernel<C, kList>});
}

}  // namespace fa::cuda::sm90
