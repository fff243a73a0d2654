// TMA tensor maps for the sm90 family, built on the host per run (the tensors' addresses come
// with each run). The driver's encoder is fetched through the runtime, as device.cpp does for its
// context calls: linking libcuda would make the library unloadable where no driver is installed.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/problem.hpp"

namespace fa::cuda::sm90 {

// A 4-D map {head_dim, rows, heads, batch} over a [batch, rows, heads, head_dim] tensor with the
// given strides (elements), read in boxes of box_cols columns x box_rows rows of one (head,
// batch); rows past `rows` and columns past head_dim read as zeros. 16-bit types land
// 128-byte-swizzled (box_cols 64: one swizzle atom wide), e4m3 (as bytes) unswizzled, a box's
// rows one after another (box_cols the kernel's head dim); `swizzled` says otherwise (an FP8
// kernel's Q and K: e4m3 boxes of 128 columns, 128-byte-swizzled). cudaErrorInvalidValue when
// the driver has no encoder or refuses the geometry.
enum class BoxSwizzle { kByType, k128, kNone };
cudaError_t encode_tile_map(CUtensorMap* map, DType dtype, void const* base, int64_t head_dim,
                            int64_t rows, int64_t heads, int64_t batch, int64_t seq_stride,
                            int64_t head_stride, int64_t batch_stride, int box_rows,
                            int box_cols = 64, BoxSwizzle swizzled = BoxSwizzle::kByType);

}  // namespace fa::cuda::sm90
