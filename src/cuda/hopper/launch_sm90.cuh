// Registration and launch of sm90 kernels (included by the generated fa_fwd_sm90a_*.cu files,
// which compile for sm_90a only).
#pragma once

#include <cuda_runtime_api.h>

#include "cuda/hopper/forward_sm90.cuh"
#include "cuda/hopper/tensor_map.hpp"
#include "cuda/kernel_entry.hpp"

namespace fa::cuda::sm90 {

template <KernelConfig C>
using TileOf = Tile<C.dtype, C.d_head, C.B_c, C.stages, C.n_warps / 4 - 1, C.overlap>;

template <KernelConfig C>
cudaError_t prepare_kernel() {
  return cudaFuncSetAttribute(forward_kernel<TileOf<C>>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              TileOf<C>::kSmemBytes);
}

template <KernelConfig C>
cudaError_t kernel_attributes(cudaFuncAttributes* out) {
  return cudaFuncGetAttributes(out, forward_kernel<TileOf<C>>);
}

template <KernelConfig C>
cudaError_t kernel_occupancy(int* blocks_per_sm) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks_per_sm, forward_kernel<TileOf<C>>,
                                                       TileOf<C>::kThreads, TileOf<C>::kSmemBytes);
}

// Builds the run's tensor maps (about a microsecond each on the host) and launches. The kernel
// has no general instantiation: the schedule never asks for one (device.cpp refuses the
// features that would).
template <KernelConfig C>
cudaError_t launch_kernel(ForwardParams const& p, dim3 grid, bool, cudaStream_t stream) {
  using T = TileOf<C>;
  Params params;
  int64_t const heads_kv = p.heads_q / p.q_heads_per_kv;
  for (cudaError_t e :
       {encode_tile_map(&params.q_map, C.dtype, p.q, C.d_head, p.seqlen_q, p.heads_q, p.batch,
                        p.q_seq_stride, p.q_head_stride, p.q_batch_stride, T::kBr),
        encode_tile_map(&params.k_map, C.dtype, p.k, C.d_head, p.seqlen_k, heads_kv, p.batch,
                        p.k_seq_stride, p.k_head_stride, p.k_batch_stride, T::kBc),
        encode_tile_map(&params.v_map, C.dtype, p.v, C.d_head, p.seqlen_k, heads_kv, p.batch,
                        p.v_seq_stride, p.v_head_stride, p.v_batch_stride, T::kBc)}) {
    if (e != cudaSuccess) return e;
  }
  params.p = p;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = dim3(T::kThreads);
  config.dynamicSmemBytes = T::kSmemBytes;
  config.stream = stream;
  return cudaLaunchKernelEx(&config, forward_kernel<T>, params);
}

// Instantiates the kernel for C and adds it to the registry (called from the generated files).
template <KernelConfig C>
void register_kernel(Registry& registry) {
  static_assert(C.family == kSm90 && rules::all(C), "a valid sm90 config");
  static_assert(C.smem_bytes() == TileOf<C>::kSmemBytes, "KernelConfig::smem_bytes() is the tile's");
  registry.emplace(C, KernelEntry{C, &prepare_kernel<C>, &kernel_attributes<C>,
                                  &kernel_occupancy<C>, &launch_kernel<C>});
}

}  // namespace fa::cuda::sm90
