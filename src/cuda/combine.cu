// The split-KV combine kernel and fa_merge_states' kernel: both merge partial attention results
// (O_s, LSE_s) over disjoint key sets with weights exp(LSE_s - LSE), LSE = log sum_s exp(LSE_s).
#include "cuda/combine.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "cuda/programmatic.hpp"
#include "cuda/ptx.cuh"

namespace fa::cuda {

namespace {

constexpr int kWarpsPerBlock = 8;  // merge_kernel
constexpr int kMaxSplits = 256;    // fa_config.num_splits' bound
// combine_kernel's staging of the partials in flight: kBatch (16 or 32) per lane, in 32 KiB of
// shared memory a block, so 4 or 2 warps.
constexpr int kCombineStaging = 32 * 1024;
template <int kBatch>
constexpr int kCombineWarps = kCombineStaging / (kBatch * 32 * 16);

}  // namespace

int64_t warp_blocks(int64_t items);

namespace {

template <class T>
__device__ __forceinline__ T from_float(float x) {
  if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(x);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16_rn(x);
  } else {
    return x;
  }
}

template <class T>
__device__ __forceinline__ float to_float(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else {
    return static_cast<float>(x);
  }
}

// The larger of a and b, or NaN where either is: fmaxf drops a NaN, so a split (or a merge
// side) whose LSE is NaN beside empty ones (-inf) read as no key at all (o = 0, lse = -inf)
// where the header makes the row NaN, and beside finite ones gave lse = -inf.
__device__ __forceinline__ float nan_max(float a, float b) {
  return isnan(a) || isnan(b) ? a + b : fmaxf(a, b);
}

__device__ __forceinline__ float warp_max(float x) {
  for (int m = 16; m > 0; m /= 2) x = nan_max(x, __shfl_xor_sync(0xffffffffu, x, m));
  return x;
}
__device__ __forceinline__ float warp_sum(float x) {
  for (int m = 16; m > 0; m /= 2) x += __shfl_xor_sync(0xffffffffu, x, m);
  return x;
}

// One warp per (row, head): the splits' LSEs give the weights (kept in shared memory), then each
// lane accumulates 4 adjacent columns of sum_s w_s O_s per 128-column step (head_dim is a
// multiple of 8, so float4 loads of the fp32 partials stay aligned when d % 4 == 0).
// kBatch: 16, or 32 past 16 splits (launch_combine): 17-32 splits load in one round where 16
// took two (33 in two rounds of 32 where 16 took three): H200, batch 1 decode with 32 splits
// (d 128, 32/8 heads, bf16 and e4m3 caches, pages 0 and 16) 1.01-1.07x a step eager and
// 1.025-1.10x in graph replay; for 16 splits (1 x 8k) the 32-wide kernel ran 0.94-0.95x
// (docs/performance.md session 67).
template <class T, int kBatch>
__global__ void __launch_bounds__(kCombineWarps<kBatch> * 32)
    combine_kernel(__grid_constant__ ForwardParams const p, int head_dim) {
  constexpr int kWarps = kCombineWarps<kBatch>;
  __shared__ float weights[kWarps][kMaxSplits];
  __shared__ float4 staged[kWarps][kBatch][32];  // each lane's partials in flight
  // Launched as a programmatic dependent of the split forward kernel (sm_90): it may start while
  // that kernel's last blocks run, and waits here until their partials are written.
  ptx::wait_for_prior_grids();
  // The stream's next forward kernel may be placed now (it waits for this grid likewise).
  ptx::allow_dependent_grids();
  int const warp = threadIdx.x / 32;
  int const lane = threadIdx.x % 32;
  int64_t const item = int64_t(blockIdx.x) * kWarps + warp;
  if (item >= int64_t(p.partial_rows) * p.heads_q) return;  // uniform per warp
  int64_t const row = item / p.heads_q;
  int const head = static_cast<int>(item % p.heads_q);
  int const splits = p.num_splits;
  int64_t const split_stride = int64_t(p.partial_rows) * p.heads_q * head_dim;
  float const* const partial = p.o_partial + (row * p.heads_q + head) * head_dim;

  // kBatch partials in flight before the first add, through cp.async into this lane's own
  // shared slots: one load at a time (a load per split, each beside its add, as the compiler
  // scheduled plain and volatile loads alike) took 11.6 us for the 16 splits of a 1 x 8k decode
  // on the H200 (ncu), about 0.7 us of L2 latency per split. A batch past the last split
  // re-reads it with weight 0; a split of weight 0 (no visible key, or an LSE far below the
  // top) is read but not added: its partial may hold anything.
  auto issue = [&](int s0, int c) {
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      ptx::cp_async_16(ptx::smem_addr(&staged[warp][j][lane]),
                       partial + min(s0 + j, splits - 1) * split_stride + c);
    }
    ptx::cp_async_commit();
  };
  // The first batch loads beside the LSEs, not after them: two L2 round trips where there
  // were three for 16 splits.
  if (lane * 4 < head_dim) issue(0, lane * 4);

  float top = -INFINITY;
  for (int s = lane; s < splits; s += 32) {
    top = nan_max(top, p.lse_partial[(int64_t(s) * p.heads_q + head) * p.partial_rows + row]);
  }
  top = warp_max(top);
  float const sink = p.sinks != nullptr ? p.sinks[head] : -INFINITY;
  float const m = nan_max(top, sink);
  float sum = 0.f;
  for (int s = lane; s < splits; s += 32) {
    float const l = p.lse_partial[(int64_t(s) * p.heads_q + head) * p.partial_rows + row];
    float const e = m == -INFINITY ? 0.f : __expf(l - m);
    weights[warp][s] = e;
    sum += e;
  }
  sum = warp_sum(sum) + (sink != -INFINITY ? __expf(sink - m) : 0.f);
  __syncwarp();
  // sum is 0 (no key and no sink), positive, or NaN (which the row's o and lse then carry).
  float const inv = sum == 0.f ? 0.f : 1.f / sum;
  float const lse = sum == 0.f ? -INFINITY : m + logf(sum);

  int64_t o_at, lse_at;
  if (p.layout == kLayoutVarlen) {
    o_at = row * p.o_seq_stride + head * p.o_head_stride;
    lse_at = int64_t(head) * p.total_q + row;
  } else {
    int64_t const b = row / p.seqlen_q, i = row % p.seqlen_q;
    o_at = b * p.o_batch_stride + i * p.o_seq_stride + head * p.o_head_stride;
    lse_at = (b * p.heads_q + head) * p.seqlen_q + i;
  }
  if (p.lse != nullptr && lane == 0) p.lse[lse_at] = lse;
  T* out = static_cast<T*>(p.o) + o_at;
  for (int c = lane * 4; c < head_dim; c += 128) {
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int s0 = 0; s0 < splits; s0 += kBatch) {
      if (c != lane * 4 || s0 != 0) issue(s0, c);
      ptx::cp_async_wait<0>();
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        uint4 const bits = ptx::ld_shared_16(ptx::smem_addr(&staged[warp][j][lane]));
        float const w = s0 + j < splits ? weights[warp][s0 + j] : 0.f;
        if (w != 0.f) {
          acc.x += w * __uint_as_float(bits.x);
          acc.y += w * __uint_as_float(bits.y);
          acc.z += w * __uint_as_float(bits.z);
          acc.w += w * __uint_as_float(bits.w);
        }
      }
    }
    out[c] = from_float<T>(acc.x * inv);
    out[c + 1] = from_float<T>(acc.y * inv);
    out[c + 2] = from_float<T>(acc.z * inv);
    out[c + 3] = from_float<T>(acc.w * inv);
  }
}

// One warp per (batch, row, head) of fa_merge_states.
template <class T>
__global__ void __launch_bounds__(kWarpsPerBlock * 32) merge_kernel(__grid_constant__ MergeParams const p) {
  int const warp = threadIdx.x / 32;
  int const lane = threadIdx.x % 32;
  int64_t const item = int64_t(blockIdx.x) * kWarpsPerBlock + warp;
  if (item >= p.batch * p.seqlen * p.heads) return;
  int64_t const h = item % p.heads;
  int64_t const i = (item / p.heads) % p.seqlen;
  int64_t const b = item / (p.heads * p.seqlen);
  int64_t const li = (b * p.heads + h) * p.seqlen + i;
  float const la = p.lse_a[li], lb = p.lse_b[li];
  float const top = nan_max(la, lb);
  float const wa = top == -INFINITY ? 0.f : __expf(la - top);
  float const wb = top == -INFINITY ? 0.f : __expf(lb - top);
  float const sum = wa + wb;
  float const inv = sum == 0.f ? 0.f : 1.f / sum;  // NaN stays NaN, as in the combine
  int64_t const oi = b * p.o_batch_stride + i * p.o_seq_stride + h * p.o_head_stride;
  T const* a = static_cast<T const*>(p.o_a) + oi;
  T const* bb = static_cast<T const*>(p.o_b) + oi;
  T* out = static_cast<T*>(p.o) + oi;
  // Each lane reads its own columns before writing them, so o may be o_a or o_b. A side of
  // weight 0 contributes nothing, whatever its o holds (as on the CPU backend).
  for (int64_t c = lane; c < p.head_dim; c += 32) {
    float const x = ((wa == 0.f ? 0.f : wa * to_float(a[c])) +
                     (wb == 0.f ? 0.f : wb * to_float(bb[c]))) * inv;
    out[c] = from_float<T>(x);
  }
  __syncwarp();
  if (lane == 0) p.lse[li] = sum == 0.f ? -INFINITY : top + logf(sum);
}

template <class Kernel, class... Args>
cudaError_t launch(Kernel kernel, int warps, int64_t items, bool programmatic,
                   cudaStream_t stream, Args const&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>((items + warps - 1) / warps));
  config.blockDim = dim3(warps * 32);
  config.stream = stream;
  cudaLaunchAttribute attribute = programmatic_attribute();
  if (programmatic) {
    config.attrs = &attribute;
    config.numAttrs = 1;
  }
  return cudaLaunchKernelEx(&config, kernel, args...);
}

}  // namespace

int64_t warp_blocks(int64_t items) { return (items + kWarpsPerBlock - 1) / kWarpsPerBlock; }

cudaError_t launch_combine(ForwardParams const& params, DType dtype, int head_dim,
                           bool programmatic, cudaStream_t stream) {
  int64_t const items = int64_t(params.partial_rows) * params.heads_q;
  auto const run = [&](auto batch) {
    constexpr int kBatch = decltype(batch)::value;
    return dtype == DType::kFP16
               ? launch(combine_kernel<__half, kBatch>, kCombineWarps<kBatch>, items, programmatic,
                        stream, params, head_dim)
               : launch(combine_kernel<__nv_bfloat16, kBatch>, kCombineWarps<kBatch>, items,
                        programmatic, stream, params, head_dim);
  };
  return params.num_splits > 16 ? run(std::integral_constant<int, 32>{})
                                : run(std::integral_constant<int, 16>{});
}

cudaError_t launch_merge(MergeParams const& params, DType dtype, cudaStream_t stream) {
  int64_t const items = params.batch * params.seqlen * params.heads;
  return dtype == DType::kFP16
             ? launch(merge_kernel<__half>, kWarpsPerBlock, items, false, stream, params)
             : launch(merge_kernel<__nv_bfloat16>, kWarpsPerBlock, items, false, stream, params);
}

}  // namespace fa::cuda
