// The sm90 family's compile-time tile (a KernelConfig's knobs as constants, shared-memory sizes,
// register split), the launch's parameters, and the block's shared-memory layout.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "core/problem.hpp"
#include "cuda/forward_params.hpp"
#include "cuda/sm90/fast_divmod.hpp"
#include "cuda/sm90/ptx_sm90.cuh"

namespace fa::cuda::sm90 {

// Everything a launch reads: the three tensor maps (built on the host per run; 128 bytes each,
// 64-byte aligned, passed as a __grid_constant__ parameter so TMA reads them in place) and the
// common forward parameters.
struct Params {
  CUtensorMap q_map;  // 4-D {head_dim, seqlen_q, heads_q, batch}, box {64, B_r, 1, 1}
  CUtensorMap k_map;  // 4-D {head_dim, seqlen_k, heads_kv, batch}, box {64, B_c, 1, 1}
  CUtensorMap v_map;
  // O's rows by 64 ({head_dim, q rows, heads_q, batch} as q_map, box {64, 64, 1, 1}), where the
  // tile stages O (Tile::kOStaged) and o_tma is 1.
  CUtensorMap o_map;
  ForwardParams p;
  // Rows of a K/V box: B_c, or for a paged cache gcd(B_c, page_size), with the maps spanning
  // the page pool {head_dim, page_size, heads_kv, num_pages} (mainloop_load.cuh).
  int32_t kv_box_rows;
  // 1: a paged cache whose boxes would not be a multiple of 8 rows is gathered row by row with
  // cp.async by the whole producer warpgroup instead (mainloop_load.cuh), and the K/V "full"
  // barriers count its 128 threads' arrivals.
  int32_t kv_gather;
  // Tile order: the (batch, head) pairs are walked in groups of `head_group`, and within a group
  // query blocks go from the last (the heaviest under a causal mask) to the first, every pair of
  // the group at one block before the next block. A group's K and V stay in L2 while its tiles
  // run (the launcher sizes it); 1 walks one head's query blocks at a time.
  int64_t head_group;
  // work_of's divisors (fast_divmod.hpp; tile_scheduler.cuh): num_splits, a group's tiles
  // (head_group x n_q_blocks), head_group, the last group's pairs (head_group or fewer), heads_q;
  // last_group: the last group's index.
  FastDivmod split_div, group_tiles_div, group_div, last_group_div, heads_div;
  int32_t last_group = 0;
  // 1: a consumer warpgroup whose 64 rows all lie in its sequence writes them through the O
  // staging buffer with TMA (epilogue.cuh); 0 (no buffer, a split-KV run, or strides TMA cannot
  // describe): every thread stores its rows itself.
  int32_t o_tma;
  // A paged cache's page_size as a divisor (fast_divmod.hpp): a key's page and row in the
  // producer's look-ups (mainloop_load.cuh), by a multiply and a shift where integer division
  // took an I2F / MUFU.RCP / F2I sequence and its registers in the producer's 24 or 40.
  FastDivmod page_div;
  // A narrow pair's K and V heads read 8 columns left of column 0 where their rows start 16
  // bytes into a 32-byte sector (narrow.hpp's column_shift_bits; Q takes K's, O V's); 0 in
  // every other instantiation and on gathered pages. kv_group_div: q_heads_per_kv, for their
  // K/V head.
  int32_t k_shift = 0, v_shift = 0;
  FastDivmod kv_group_div;
  // A narrow pair's V map over each row's heads as one run of heads_kv * head_dim_v columns
  // (head_dim_v here, 0 otherwise): a box's columns past its head's head_dim_v are the next
  // head's, not zeros TMA fills, which O's store never writes (launch.cuh says why).
  int32_t v_flat_cols = 0;
  // A narrow pair's Q and K boxes of exactly head_dim columns (narrow.hpp's exact_qk_boxes), 0
  // for boxes of 64: the columns past them in the Q buffer and K stages, which no box writes,
  // are zeroed once at the kernel's start (launch.cuh says why).
  int32_t qk_box_cols = 0;
};

template <DType kType_, int kD_, int kBc_, int kStages_, int kConsumers_, bool kOverlap_,
          bool kPingpong_, bool kPersistent_>
struct Tile {
  static constexpr DType kType = kType_;
  // An FP8 tile: e4m3 Q, K and V (config.hpp's e4m3 layout), products on wgmma's k32 e4m3 form,
  // O in bf16 or fp16 (ForwardParams::o_bf16).
  static constexpr bool kFp8 = kType == DType::kE4M3;
  using Elem = std::conditional_t<kType == DType::kBF16, __nv_bfloat16,
                                  std::conditional_t<kFp8, uint8_t, __half>>;
  static constexpr int kElemBytes = kFp8 ? 1 : 2;
  // Columns of a 128-byte swizzle block (a TMA box's width), and the 32-byte k steps of
  // S = Q K^T (k16 for 16-bit types, k32 for e4m3).
  static constexpr int kBlockCols = 128 / kElemBytes;
  static constexpr int kD = kD_;
  static constexpr int kQkSteps = kD * kElemBytes / 32;
  static constexpr int kBc = kBc_;
  static constexpr int kStages = kStages_;
  static constexpr int kConsumers = kConsumers_;  // consumer warpgroups, 64 query rows each
  // Softmax of one key block overlapped with the tensor cores' Q K^T of the next and P V of the
  // previous one (FA3's intra-warpgroup pipelining); else each block's three steps in turn.
  static constexpr bool kOverlap = kOverlap_;
  // The two consumer warpgroups take turns issuing wgmma (named barriers 1 and 2), so the tensor
  // cores run one's products while the other runs its softmax (FA3's ping-pong).
  static constexpr bool kPingpong = kPingpong_;
  // One block per SM walks a tile of each round (see forward_kernel): the producer loads the
  // next tile's Q and first K/V blocks while the consumers finish and write the current one.
  static constexpr bool kPersistent = kPersistent_;
  static constexpr int kBr = 64 * kConsumers;
  static constexpr int kThreads = 128 * (kConsumers + 1);
  // Shared memory: tiles stored as blocks of kBlockCols columns (128 bytes) of rows, kD /
  // kBlockCols of them (V's: kDv / 64) (the SWIZZLE_128B atom is 8 rows x 128 bytes, so every
  // block starts 1024-byte aligned).
  static constexpr int kQBytes = kBr * kD * kElemBytes;
  static constexpr int kKVBytes = kBc * kD * kElemBytes;
  static constexpr int kBarrierBytes = 8 * (2 + 4 * kStages);
  // The columns of V and O: kD, or at d 192 128 where V's stages of kD columns would not fit
  // (config.hpp's v_cols: 128 keys, a kernel for value head dims up to 128).
  static constexpr int kDv =
      kD != 192 || 1024 + kQBytes + 2 * kStages * kKVBytes + kBarrierBytes <= 227 * 1024 ? kD : 128;
  // An FP8 tile's V stages hold V transposed ([kDv rows][kBc keys], 16-byte core matrices of 8
  // rows, groups of 8 rows kVtGroupBytes apart: config.hpp's e4m3 layout).
  static constexpr int kVtGroupBytes = kBc / 16 * 128 + 16;
  // A V stage's image in the workspace (v_images.cuh): its groups as the stage holds them.
  static constexpr int kVImageBytes = kDv / 8 * kVtGroupBytes;
  // (an FP8 stage rounded up to 128 bytes, so every stage has the first one's bank pattern)
  static constexpr int kVBytes = kFp8 ? (kVImageBytes + 127) / 128 * 128 : kBc * kDv * 2;
  // O's staging buffer after the stages starts on a 128-byte swizzle atom (TMA stores it from
  // there): an FP8 tile rounds the stages' end up to 1024 bytes once. (Each V stage rounded up
  // to 1024 bytes instead left d 256's 128-key tile 80 bytes short of its O buffer.)
  static constexpr int kStagesEnd = kQBytes + kStages * (kKVBytes + kVBytes);
  static constexpr int kOAt = kFp8 ? (kStagesEnd + 1023) / 1024 * 1024 : kStagesEnd;
  static constexpr int kPipeBytes = 1024 /* alignment slack */ + kOAt + kBarrierBytes;
  // O's staging buffer for the TMA store at d 128, where it fits beside the pipeline (two stages
  // of up to 128 keys; d 256's stages fill shared memory). At d 64, whose rows take 8 stores a
  // thread, staging ran 4-9% slower than the threads' own stores (non-causal 512-4096, H200),
  // and again in session 72 with stmatrix: 512-1k 0.995-1.005x, causal 4k-16k on the
  // 192 x 128 tile 0.960-0.977x (docs/performance.md session 72).
  // An FP8 tile's V as TMA loads it, before the producer transposes it: kVRawSlots slots (two
  // where they fit; none in a tile that copies V's images) of kBc rows x kD bytes after O's
  // buffer, then, after the pipeline's barriers, their "full" and "empty" barriers (Smem's
  // v8_tiles, v8_full, v8_empty).
  static constexpr int kVRawBytes = kBc * kD;
  // An FP8 tile whose consumers' S, P and O take more than 176 registers (config.hpp's
  // e4m3_images_only: d 128 with 192 keys, d 256 with 128) copies V's images only: no raw
  // slots, and its producer keeps 24 registers.
  static constexpr int kPRegs = kFp8 ? kBc / 8 : kBc / 4;  // P's (packed pairs, or 4 e4m3 bytes)
  static constexpr bool kImagesOnly = kFp8 && kBc / 2 + kPRegs + kDv / 2 > 176;
  static constexpr int kRawSlotBytes = kImagesOnly ? 0 : 2 * (kVRawBytes + 16);
  // An FP8 tile stages its 16-bit O (kBr rows x kDv x 2 bytes, twice its Q rows' bytes) where it
  // fits beside its raw V slots (two, or none): its threads' own 4-byte stores used 16 of each
  // 32-byte sector (ncu, d 128, 8k); staged, d 128 ran 1.08x and d 256 1.09x faster (H200,
  // docs/performance.md session 77).
  static constexpr int kOBytes =
      kFp8 ? (kPipeBytes + kBr * kDv * 2 + kRawSlotBytes <= 227 * 1024 ? kBr * kDv * 2 : 0)
      : kD == 128 && kPipeBytes + kQBytes <= 227 * 1024 ? kQBytes
                                                         : 0;
  static constexpr int kVRawSlots =
      kImagesOnly ? 0 : kPipeBytes + kOBytes + 2 * (kVRawBytes + 16) <= 227 * 1024 ? 2 : 1;
  static constexpr int kSmemBytes =
      kFp8 ? kPipeBytes + kOBytes + kVRawSlots * (kVRawBytes + 16) : kPipeBytes + kOBytes;
  // At d 192 and 256, whose stages leave no room for O's buffer, a block that runs one tile
  // stages O in its Q tile instead (FA4's layout: a warpgroup's 64 rows of each column block are
  // its own Q rows, read by no wgmma once its last Q K^T is waited on); a persistent block's
  // producer loads the next tile's Q there, so it stores O by the threads.
  static constexpr bool kOInQ = !kFp8 && kOBytes == 0 && kD >= 192 && !kPersistent;
  static_assert(kDv <= kD, "O's columns fit in the Q tile's");
  static constexpr bool kOStaged = kOBytes > 0 || kOInQ;
  // An e4m3 cache's layout (config.hpp's e4m3_smem_bytes): no O buffer, and after the 16-bit
  // stages kE4M3Slots e4m3 stages of K, then of V (kE4M3Bytes each: B_c rows of kD bytes, as
  // TMA writes them unswizzled), then the pipeline's barriers and the e4m3 stages' "full" and
  // "empty" ones. Two slots where they fit (d 64 and 128 at B_c 128), so TMA fills one while
  // the producer converts the other; one at d 256 (B_c 64: 230,512 bytes), refilled as soon as
  // it is converted (mainloop_load.cuh).
  static constexpr int kE4M3Bytes = kBc * kD;
  // bf16 queries at d 128 and 256 (config.hpp's rules::e4m3_keys, for the fp8_kv_tile kernels):
  // the plain e4m3 instantiation reads an e4m3 cache's K as TMA writes it into the K stage (kD /
  // 128 column blocks of B_c rows of 128 bytes, swizzled; the rest of the 16-bit stage unused),
  // its e4m3 stages holding V alone (kernel.cuh's kKeys8).
  static constexpr bool kE4M3Keys = kType == DType::kBF16 && kD % 128 == 0;
  static constexpr int kE4M3Slots = kPipeBytes + 2 * (2 * kE4M3Bytes + 32) <= 227 * 1024 ? 2 : 1;
  static constexpr int kE4M3SmemBytes = kPipeBytes + kE4M3Slots * (2 * kE4M3Bytes + 32);
  // Registers per thread after reallocation: the producer warpgroup gives its share to the
  // consumers. With two consumers, 40 / 232 up to d 192 (128 * 40 + 256 * 232 = 64512 of 65536;
  // setmaxnreg takes multiples of 8): at FA3's 24 / 240 those kernels of the default build
  // spilled 32-268 bytes (ptxas, bf16), mostly the producer's TMA issue and tile decoding, at
  // 40 / 232 0-164 (d 192: 0-16); speed 1.0015x (d 64), 0.9987x (d 128), 1.0012x (d 192) on an
  // H200 (docs/performance.md). 24 / 240 at d 256, whose consumers hold 128 floats of O and
  // spilled at 232 (0.994x; an e4m3 cache's instantiation splits 56 / 224: kernel.cuh); for
  // the d 192 tile that holds V in 128 columns (kDv): 0.967-0.991x at 512-2048 keys with
  // 40 / 232; and where S, P and O take more than 200 of 232 (d 128 with
  // 192 keys: 208, the rule's limit, and ptxas serialized its wgmmas, C7512).
  static constexpr bool kWideProducer =
      kConsumers == 2 && kD <= 192 && kDv == kD && kBc / 2 + kPRegs + kDv / 2 <= 200;
  // An FP8 tile's producer transposes V as well as loading: 56 / 224 (at 40 / 232 ptxas spilled
  // 24-32 bytes in the persistent d 128 kernel; its consumers' S, P and O take 144 registers);
  // one that copies V's images only: 24 / 240.
  static constexpr int kProducerRegs =
      kFp8 ? (kImagesOnly ? 24 : 56)
           : kConsumers == 1 ? 56 : kConsumers == 2 ? (kWideProducer ? 40 : 24) : 32;
  static constexpr int kConsumerRegs =
      kFp8 ? (kImagesOnly ? 240 : 224)
           : kConsumers == 1 ? 256 : kConsumers == 2 ? (kWideProducer ? 232 : 240) : 160;

  static_assert(kD % kBlockCols == 0 && kD <= 256, "head_dim in whole 128-byte swizzle blocks");
  static_assert(!kFp8 || (kConsumers == 2 && kBc % 32 == 0), "FP8: two consumers, k32 steps");
  static_assert(kBc % 16 == 0 && kBc <= 256, "keys per block: a k16 step of P V at a time");
  static_assert(kSmemBytes <= 227 * 1024, "Hopper's shared memory per block");
  static_assert(!kPingpong || kConsumers == 2, "ping-pong alternates two warpgroups");
  // setmaxnreg moves registers within the block's launch allocation (kThreads times the most a
  // thread may hold under __launch_bounds__(kThreads, 1), a multiple of 8: 168 with two
  // consumers), not the SM's 65536: a split past it waits forever in setmaxnreg.inc. A producer
  // of 32 with two consumers of 240 (65536) hung every kernel on the H200.
  static_assert(128 * (kProducerRegs + kConsumers * kConsumerRegs) <=
                    kThreads * (65536 / kThreads / 8 * 8 < 256 ? 65536 / kThreads / 8 * 8 : 256),
                "producer and consumer registers fit the block's launch allocation");
};

// The block's shared memory: the Q tile, kStages K stages (kD columns) and V stages (kDv), O's
// staging buffer (kOBytes, possibly none), then the pipeline's mbarriers.
// Key blocks pass through the stages in one sequence over all of a block's tiles: the pipe-th
// block (counted by both sides) uses stage pipe % kStages in phase (pipe / kStages) & 1, and the
// q-th tile with keys uses the Q buffer in phase q & 1.
// With an e4m3 cache (Tile's kE4M3 layout) the O buffer gives way to the e4m3 stages.
template <class T>
struct Smem {
  uint8_t* q_tile;
  uint8_t* k_tiles;
  uint8_t* v_tiles;
  uint8_t* o_tile;  // [kBr / 64 warpgroups][kDv / 64 column blocks][64 rows][128 bytes], swizzled
  uint8_t* k8_tiles;  // kE4M3Slots each, e4m3 caches only: [B_c rows][kD bytes]
  uint8_t* v8_tiles;  // the same, or in an FP8 tile kVRawSlots of V as TMA loads it
  uint64_t* q_full;
  uint64_t* q_empty;
  uint64_t* k_full;  // kStages each
  uint64_t* k_empty;
  uint64_t* v_full;
  uint64_t* v_empty;
  uint64_t* k8_full;  // kE4M3Slots each, e4m3 caches only
  uint64_t* k8_empty;
  // v8_full and v8_empty: kE4M3Slots each for e4m3 caches, kVRawSlots in an FP8 tile
  uint64_t* v8_full;
  uint64_t* v8_empty;

  __device__ __forceinline__ Smem(uint8_t* raw, bool e4m3) {
    // SWIZZLE_128B tiles start 1024-byte aligned (Tile::kSmemBytes has the slack).
    q_tile = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(raw) + 1023) & ~uintptr_t(1023));
    k_tiles = q_tile + T::kQBytes;
    v_tiles = k_tiles + T::kStages * T::kKVBytes;
    o_tile = q_tile + T::kOAt;
    k8_tiles = o_tile;
    v8_tiles = T::kFp8 ? o_tile + T::kOBytes : k8_tiles + T::kE4M3Slots * T::kE4M3Bytes;
    uint64_t* bars = reinterpret_cast<uint64_t*>(
        T::kFp8 ? v8_tiles + T::kVRawSlots * T::kVRawBytes
        : e4m3  ? v8_tiles + T::kE4M3Slots * T::kE4M3Bytes
                : o_tile + T::kOBytes);
    q_full = bars;
    q_empty = bars + 1;
    k_full = bars + 2;
    k_empty = k_full + T::kStages;
    v_full = k_empty + T::kStages;
    v_empty = v_full + T::kStages;
    k8_full = v_empty + T::kStages;
    k8_empty = k8_full + T::kE4M3Slots;
    v8_full = T::kFp8 ? k8_full : k8_empty + T::kE4M3Slots;
    v8_empty = v8_full + (T::kFp8 ? T::kVRawSlots : T::kE4M3Slots);
  }

  // By one thread, before the block's first barrier: a "full" barrier completes on the
  // producer's arrival and its bytes (TMA), or on kv_arrivals producer threads' arrivals after
  // their copies (gathered K and V) or conversions (e4m3); an "empty" one on an arrival per
  // consumer warp. An e4m3 stage's "full" barrier completes on TMA's bytes, its "empty" one
  // on the kv_arrivals converting threads (with `keys8`, K's 16-bit stages complete on TMA's
  // bytes and its e4m3 stages go unused). An FP8 tile's K stages are TMA's (one arrival),
  // its V stages the 128 transposing threads' (or, copied from V's images, the one copying
  // thread's and its bytes: kv_arrivals 1), its raw V slots TMA's and the transposing threads'.
  __device__ __forceinline__ void init_barriers(uint32_t kv_arrivals, bool e4m3,
                                                bool keys8) const {
    mbar_init(q_full, 1);
    mbar_init(q_empty, 4 * T::kConsumers);
    for (int s = 0; s < T::kStages; ++s) {
      mbar_init(&k_full[s], T::kFp8 || keys8 ? 1 : kv_arrivals);
      mbar_init(&v_full[s], kv_arrivals);
      mbar_init(&k_empty[s], 4 * T::kConsumers);
      mbar_init(&v_empty[s], 4 * T::kConsumers);
    }
    if constexpr (T::kFp8) {
      for (int s = 0; s < T::kVRawSlots; ++s) {
        mbar_init(&v8_full[s], 1);
        mbar_init(&v8_empty[s], 128);
      }
    }
    if (e4m3) {
      for (int s = 0; s < T::kE4M3Slots; ++s) {
        mbar_init(&k8_full[s], 1);
        mbar_init(&v8_full[s], 1);
        mbar_init(&k8_empty[s], kv_arrivals);
        mbar_init(&v8_empty[s], kv_arrivals);
      }
    }
    mbar_fence_init();
  }
};

}  // namespace fa::cuda::sm90
