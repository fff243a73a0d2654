#include "cuda/sm90/tensor_map.hpp"

#include <cudaTypedefs.h>

namespace fa::cuda::sm90 {

namespace {

PFN_cuTensorMapEncodeTiled_v12000 encoder() {
  // Fetched once; the function-local static makes the first call thread-safe.
  static PFN_cuTensorMapEncodeTiled_v12000 const fn = [] {
    void* found = nullptr;
    cudaDriverEntryPointQueryResult result;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &found, 12000,
                                         cudaEnableDefault, &result) != cudaSuccess ||
        result != cudaDriverEntryPointSuccess) {
      cudaGetLastError();  // a failed query leaves an error the caller must not see
      found = nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(found);
  }();
  return fn;
}

}  // namespace

cudaError_t encode_tile_map(CUtensorMap* map, DType dtype, void const* base, int64_t head_dim,
                            int64_t rows, int64_t heads, int64_t batch, int64_t seq_stride,
                            int64_t head_stride, int64_t batch_stride, int box_rows,
                            int box_cols, BoxSwizzle swizzled) {
  PFN_cuTensorMapEncodeTiled_v12000 const encode = encoder();
  if (encode == nullptr) return cudaErrorInvalidValue;
  int64_t const bytes = dtype_size(dtype);
  // TMA wants every stride a positive multiple of 16 bytes; a dimension of extent 1 is never
  // stepped, so its stride (possibly 0 in a broadcast view) is replaced by a valid one.
  auto stride = [&](int64_t elements, int64_t extent) {
    return cuuint64_t(extent == 1 && elements == 0 ? 16 : elements * bytes);
  };
  cuuint64_t dims[4] = {cuuint64_t(head_dim), cuuint64_t(rows), cuuint64_t(heads),
                        cuuint64_t(batch)};
  cuuint64_t strides[3] = {stride(seq_stride, rows), stride(head_stride, heads),
                           stride(batch_stride, batch)};
  cuuint32_t box[4] = {cuuint32_t(box_cols), cuuint32_t(box_rows), 1, 1};
  cuuint32_t element_strides[4] = {1, 1, 1, 1};
  bool const e4m3 = dtype == DType::kE4M3;
  CUtensorMapDataType const type = e4m3 ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                   : dtype == DType::kBF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                           : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  bool const swizzle =
      swizzled == BoxSwizzle::kByType ? !e4m3 : swizzled == BoxSwizzle::k128;
  CUresult const r = encode(
      map, type, 4, const_cast<void*>(base), dims, strides, box, element_strides,
      CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

}  // namespace fa::cuda::sm90
