// The sm_90a instructions the Hopper family is built from, as inline PTX: mbarriers, TMA tile
// loads, wgmma descriptors and synchronisation, register reallocation and named barriers.
// (CUDA 13.0's cuda::ptx lacks wgmma, setmaxnreg and the descriptor format, so one style is
// used throughout.) Compiled only for compute_90a: every function here needs it.
#pragma once

#include <cuda.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/ptx.cuh"

namespace fa::cuda::sm90 {

using ptx::smem_addr;

// ---- mbarriers ----------------------------------------------------------------------------

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count));
}

// Makes the initialised barriers visible to the async proxy (TMA) and the other threads; a
// __syncthreads() must follow.
__device__ __forceinline__ void mbar_fence_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

// Waits until the phase with parity `parity` has completed. A fresh barrier is in phase 0, so
// waiting on parity 1 returns at once (how a producer passes its empty barriers the first time).
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "wait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}

// ---- TMA --------------------------------------------------------------------------------------

__device__ __forceinline__ void tma_prefetch_map(CUtensorMap const* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// Copies the box at coordinates (c0 .. c3) of a 4-D map into shared memory at `dst`, completing
// its bytes on `bar`. Out-of-range elements arrive as zeros.
__device__ __forceinline__ void tma_load_4d(void* dst, CUtensorMap const* map, uint64_t* bar,
                                            int c0, int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6];" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3),
      "r"(smem_addr(bar))
      : "memory");
}

// Copies `bytes` (a multiple of 16; both addresses 16-byte aligned) from global memory at `src`
// to shared memory at `dst`, completing them on `bar` (a bulk copy: no tensor map).
__device__ __forceinline__ void bulk_load(void* dst, void const* src, uint32_t bytes,
                                          uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(src)), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}

// Copies shared memory at `src` (a box laid out as the map's swizzle wants) to the box at
// coordinates (c0 .. c3) of a 4-D map; elements past the tensor's extents are not written. The
// copy joins this thread's bulk group (tma_store_commit).
__device__ __forceinline__ void tma_store_4d(CUtensorMap const* map, void const* src, int c0,
                                             int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%1, %2, %3, %4}], [%5];" ::"l"(
          reinterpret_cast<uint64_t>(map)),
      "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_addr(src))
      : "memory");
}
__device__ __forceinline__ void tma_store_commit() {
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
// Waits until this thread's committed bulk stores have read their shared memory (it may be
// written again); their global writes may still be in flight.
__device__ __forceinline__ void tma_store_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}

// Writes four 8 x 8 matrices of 16-bit values to shared memory: register i of lane t holds
// matrix i's row t / 4, columns 2 (t % 4) and 2 (t % 4) + 1 (the mma accumulator layout); lane
// t gives the address of row t % 8 of matrix t / 8 (16 contiguous bytes).
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2,
                                            uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr),
               "r"(r0), "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}

// Orders this thread's generic-proxy writes to shared memory (st.shared, cp.async) before later
// async-proxy reads of it (wgmma operands, TMA): a thread that fills a tile for wgmma runs it
// after its writes complete and before it signals the tile's barrier.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// ---- wgmma --------------------------------------------------------------------------------

// `x` through a move the compiler cannot see through, so that what is computed from it stays
// where it is written: a key loop's descriptors built from a loop-invariant address are not
// hoisted out of the loop into registers for its whole length (mainloop_mma.cuh, d 192, 256),
// and what the producer derives from its loop's counts is derived where it is used rather than
// held across a gather (mainloop_load.cuh).
__device__ __forceinline__ uint32_t opaque(uint32_t x) {
  asm volatile("mov.b32 %0, %1;" : "=r"(x) : "r"(x));
  return x;
}
__device__ __forceinline__ int64_t opaque(int64_t x) {
  asm volatile("mov.b64 %0, %1;" : "=l"(x) : "l"(x));
  return x;
}

// A shared-memory matrix descriptor for a 128-byte-swizzled operand (the layout TMA's
// CU_TENSOR_MAP_SWIZZLE_128B writes into 1024-byte-aligned tiles): start address, leading and
// stride byte offsets (each >> 4), layout type 1 (SWIZZLE_128B) in bits 62-63.
__device__ __forceinline__ uint64_t make_desc_sw128(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t((lbo >> 4) & 0x3FFF) << 16) |
         (uint64_t((sbo >> 4) & 0x3FFF) << 32) | (uint64_t(1) << 62);
}

// The same for an operand without swizzle (layout type 0): K-major 16-byte core matrices of 8
// rows, `lbo` bytes apart along K and `sbo` bytes apart along M / N (an FP8 tile's transposed V
// stages, tile.cuh).
__device__ __forceinline__ uint64_t make_desc_none(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t((lbo >> 4) & 0x3FFF) << 16) |
         (uint64_t((sbo >> 4) & 0x3FFF) << 32);
}

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}

// Keeps the compiler from moving reads or writes of accumulator registers across the
// asynchronous window between a wgmma and its wait.
template <int kN>
__device__ __forceinline__ void fence_operands(float (&r)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
// The same for register A operands that a wgmma only reads: their values are complete here.
template <int kN>
__device__ __forceinline__ void fence_operands(uint32_t const (&r)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" ::"r"(r[i]) : "memory");
}

// ---- Registers and barriers ---------------------------------------------------------------------

template <int kRegs>
__device__ __forceinline__ void regs_dealloc() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void regs_alloc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegs));
}

__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// Consumer warpgroup wg's named barrier, 3 + wg (1 and 2 are ping-pong's turns), for its 128
// threads: the epilogue's O staging, the e4m3 instantiation's Q rewrite and the key loop's
// condition meet on it, one after another.
__device__ __forceinline__ void warpgroup_sync(int wg) { named_sync(3 + wg, 128); }

// `pred` ORed over warpgroup wg's 128 threads (bar.red on its barrier), the same result for all
// of them: a condition the whole warpgroup must take alike, as around a wgmma.wait_group
// (.aligned: one instruction for the whole warpgroup).
__device__ __forceinline__ bool warpgroup_any(int wg, bool pred) {
  uint32_t out;
  asm volatile(
      "{\n\t.reg .pred p, q;\n\tsetp.ne.u32 q, %1, 0;\n\tbar.red.or.pred p, %2, 128, q;\n\t"
      "selp.u32 %0, 1, 0, p;\n\t}"
      : "=r"(out)
      : "r"(uint32_t(pred)), "r"(3 + wg)
      : "memory");
  // Through a warp vote (the same value back) so that ptxas knows a branch on it is uniform: on
  // the barrier's predicate alone it took the branch for a divergent one and built the loop's
  // wgmma descriptors on the vector pipe instead of the uniform datapath.
  return __any_sync(0xffffffffu, out != 0);
}

}  // namespace fa::cuda::sm90
