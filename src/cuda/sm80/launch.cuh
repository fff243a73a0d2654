// Registration and launch of mma.sync kernels (included by the generated fa_fwd_sm80_*.cu files).
#pragma once

#include <cuda_runtime_api.h>

#include "cuda/kernel_entry.hpp"
#include "cuda/programmatic.hpp"
#include "cuda/sm80/kernel.cuh"

namespace fa::cuda::sm80 {
template <KernelConfig C>
cudaError_t prepare_kernel() {
  if constexpr (Traits<C>::kSmemBytes > 48 * 1024) {
    for (auto kernel : {forward_kernel<ConfigTag<C>, false>, forward_kernel<ConfigTag<C>, true>}) {
      if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               Traits<C>::kSmemBytes);
          e != cudaSuccess) {
        return e;
      }
    }
    if constexpr (rules::key_split_tile(C)) {
      if (cudaError_t e = cudaFuncSetAttribute(forward_kernel<ConfigTag<C>, true, false, true>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               Traits<C>::kSmemBytes);
          e != cudaSuccess) {
        return e;
      }
    }
  }
  if constexpr (rules::fp8_kv_tile(C) && Traits<C>::kE4M3SmemBytes > 48 * 1024) {
    // Raised only where it fits: the choice refuses an e4m3 cache on this kernel elsewhere
    // (family smem_bytes), and a device of 99 KiB (sm_86/89/120) must still open.
    int device = 0, optin = 0;
    if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
    if (cudaError_t e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
        e != cudaSuccess) {
      return e;
    }
    if constexpr (rules::key_split_tile(C) && Traits<C>::kE4M3SplitSmemBytes > 48 * 1024) {
      if (Traits<C>::kE4M3SplitSmemBytes <= optin) {
        if (cudaError_t e = cudaFuncSetAttribute(forward_kernel<ConfigTag<C>, true, true, true>,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 Traits<C>::kE4M3SplitSmemBytes);
            e != cudaSuccess) {
          return e;
        }
      }
    }
    if (Traits<C>::kE4M3SmemBytes > optin) return cudaSuccess;
    return cudaFuncSetAttribute(forward_kernel<ConfigTag<C>, true, true>,
                                cudaFuncAttributeMaxDynamicSharedMemorySize,
                                Traits<C>::kE4M3SmemBytes);
  }
  return cudaSuccess;
}

template <KernelConfig C>
cudaError_t kernel_attributes(cudaFuncAttributes* out) {
  return cudaFuncGetAttributes(out, forward_kernel<ConfigTag<C>, true>);
}

// The general instantiation's: decode and split-KV, whose schedule uses it, run that one.
template <KernelConfig C>
cudaError_t kernel_occupancy(int* blocks_per_sm) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      blocks_per_sm, forward_kernel<ConfigTag<C>, true>, Traits<C>::kThreads, Traits<C>::kSmemBytes);
}

template <KernelConfig C>
cudaError_t launch_kernel(ForwardParams const& params, dim3 grid, bool general, bool programmatic,
                          cudaStream_t stream) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = dim3(Traits<C>::kThreads);
  config.dynamicSmemBytes = Traits<C>::kSmemBytes;
  config.stream = stream;
  cudaLaunchAttribute attribute = programmatic_attribute();
  if (programmatic) {
    config.attrs = &attribute;
    config.numAttrs = 1;
  }
  if (params.kv_e4m3) {
    // The family's cannot_run admits e4m3 caches on fp8_kv_tile kernels only.
    if constexpr (rules::key_split_tile(C)) {
      // The family's schedule asks for the key split on these tiles only.
      if (params.key_split) {
        config.dynamicSmemBytes = Traits<C>::kE4M3SplitSmemBytes;
        return cudaLaunchKernelEx(&config, forward_kernel<ConfigTag<C>, true, true, true>, params);
      }
    }
    if constexpr (rules::fp8_kv_tile(C)) {
      config.dynamicSmemBytes = Traits<C>::kE4M3SmemBytes;
      return cudaLaunchKernelEx(&config, forward_kernel<ConfigTag<C>, true, true>, params);
    }
    return cudaErrorInvalidDeviceFunction;
  }
  if constexpr (rules::key_split_tile(C)) {
    // The family's schedule asks for the key split on these tiles only.
    if (params.key_split) {
      return cudaLaunchKernelEx(&config, forward_kernel<ConfigTag<C>, true, false, true>, params);
    }
  }
  return general ? cudaLaunchKernelEx(&config, forward_kernel<ConfigTag<C>, true>, params)
                 : cudaLaunchKernelEx(&config, forward_kernel<ConfigTag<C>, false>, params);
}

// Instantiates the kernel for C and adds it to the registry (called from the generated files).
template <KernelConfig C>
void register_kernel(Registry& registry) {
  add_kernel(registry, KernelEntry{C, &prepare_kernel<C>, &kernel_attributes<C>,
                                   &kernel_occupancy<C>, &launch_kernel<C>});
}

}  // namespace fa::cuda::sm80
