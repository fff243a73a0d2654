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
// given strides (elements), read in boxes of 64 columns x box_rows rows of one (head, batch)
// into 128-byte-swizzled shared memory; rows past `rows` read as zeros. cudaErrorInvalidValue
// when the driver has no encoder or refuses the geometry.
cudaError_t encode_tile_map(CUtensorMap* map, DType dtype, void const* base, int64_t head_dim,
                            int64_t rows, int64_t heads, int64_t batch, int64_t seq_stride,
                            int64_t head_stride, int64_t batch_stride, int box_rows);

}  // namespace fa::cuda::sm90
