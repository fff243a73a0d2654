// The sm90 family's producer: the producer warpgroup streams each tile's Q and its key blocks'
// K and V into the pipeline's stages (Smem), waiting on a stage's "empty" barrier before reusing
// it and signalling its "full" barrier when the stage holds the block. The consumers read the
// same 128-byte-swizzled tiles whichever way they were filled:
//   - dense tensors and contiguous caches: one thread of warp 0 issues a TMA copy per 64 columns;
//   - a paged cache with large pages: maps over its page pool ({head_dim, page_size, heads_kv,
//     num_pages}) in boxes of Params::kv_box_rows = gcd(B_c, page_size) rows, so every box of a
//     key block lies within one page, copied from the page the block table names (box i by
//     lane i / 4 of warp i % 4 in load_tiles and in the e4m3-cache converters, by lane i of
//     warp 0 in the FP8 tiles' producers; a box of a multiple of 8 rows lands on a 1024-byte
//     boundary, where the swizzle pattern restarts);
//   - a paged cache whose boxes would not be a multiple of 8 rows (pages of 1, 3, 4, 12, ...;
//     config.hpp's gathers_pages, Params::kv_gather): the whole warpgroup gathers rows with
//     16-byte cp.async copies, applying the swizzle itself.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/forward_params.hpp"
#include "cuda/ptx.cuh"
#include "cuda/sm90/narrow.hpp"
#include "cuda/sm90/ptx_sm90.cuh"
#include "cuda/sm90/tile.cuh"
#include "cuda/sm90/tile_scheduler.cuh"
#include "cuda/sm90/v_image_index.cuh"

namespace fa::cuda::sm90 {

// 16-byte chunks of a row that one gather pass covers: the whole row at d 64, 128 and 256 (8,
// 16 or 32: a warp holds whole rows), a 64-column block at a time at d 192 (24 chunks would
// split rows across warps).
template <class T>
constexpr int gather_row_chunks() {
  return 32 % (T::kD / 8) == 0 ? T::kD / 8 : 8;
}

// 16-byte chunks a gathering thread copies per row (gather_kv): 4, 2 or 1, the most
// that leave whole passes of rows over a key block and a power of two of threads per row.
template <class T>
constexpr int gather_chunks_per_thread() {
  constexpr int kChunks = gather_row_chunks<T>();
  for (int n = 4; n > 1; n /= 2) {
    if (kChunks % n == 0 && T::kBc % (128 / (kChunks / n)) == 0) return n;
  }
  return 1;
}

// The producer thread's index (0-127: the producer warpgroup is the block's first), read afresh
// by a volatile move from %tid.x, so that what the gather derives from it (lane, warp, chunk,
// row, swizzle) is recomputed where it is used instead of being held across the key loop in the
// producer's 24 or 40 registers.
__device__ __forceinline__ int producer_thread() {
  uint32_t t;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(t));
  return int(t);
}

// The K and V blocks of one tile gathered from a paged cache by the 128 producer threads: each
// copies 1 to 4 16-byte chunks of a row per pass (gather_chunks_per_thread), rows past the
// sequence's keys as zeros (so the table's padding is never followed and no stale value reaches
// P V), table entries clamped into [0, num_pages). A warp's 32 lanes copy kBc / 4 rows of each
// block (at d 128: 8 rows of 16 chunks per pass), so each lane looks up the page of one or two of
// them and the others take it by shuffle: one table load per lane per block instead of one per row
// and pass, issued for the next block while this block's copies run. (The first version looked
// every row up just before its copy: 16 dependent global loads per thread and block, 4.8x the
// contiguous time at page 16 on the H200, 4 x 512 against 8k.) Each stage's "full" barrier is
// signalled after the thread's copies into it complete (cp.async.wait_group) and the proxy fence
// that makes cp.async's writes visible to wgmma. The order follows the consumers', who with overlap
// issue block it + 1's Q K^T before block it's P V (mainloop_mma.cuh): K(it) is signalled before
// the producer waits for anything that needs V(it), and V(it) once K(it + 1)'s copies are in
// flight. (Signalling a block only after the next block's copies were issued deadlocked: the next
// block's V stage frees only after a P V that waits for this block's K.) The tile's last V is
// signalled before the tile ends (the consumers release Q only after it, and the next tile's Q
// waits for that).
template <class T, bool kBounded>
__device__ __forceinline__ void gather_kv(Params const& params, Smem<T> const& sm, Work const& w,
                                          int kv_head, int64_t pipe) {
  using Elem = typename T::Elem;
  ForwardParams const& p = params.p;
  // 16-byte chunks of a row per pass, kGroups passes over the block's columns.
  constexpr int kChunks = gather_row_chunks<T>();
  constexpr int kGroups = T::kD / 8 / kChunks;     // K's
  constexpr int kVGroups = T::kDv / 8 / kChunks;  // V's (Tile::kDv columns)
  static_assert(T::kDv % (8 * kChunks) == 0, "gather: V's columns in whole passes");
  // Chunks per thread and row: 4 (64 bytes) where whole passes of rows result, else 2
  // or 1 (2 at d 128 with 176 keys and d 192 with 96, 1 at d 192 with 112). The copies of one
  // row share its page look-up, shuffle and address: with one chunk per thread, a copy took
  // about 16 instructions in a dependent chain on the producer's 24 registers (then its
  // allocation at every head dim; 40 up to d 192 since, tile.cuh), and the
  // consumers waited on K for 14% of their samples (ncu, H200, page 1, 4 x 512 against 8k,
  // d 128: 0.59x the contiguous time).
  constexpr int kPerThread = gather_chunks_per_thread<T>();
  constexpr int kRowThreads = kChunks / kPerThread;  // threads per row
  constexpr int kRowsPerPass = 128 / kRowThreads;
  constexpr int kWarpRows = 32 / kRowThreads;      // a warp's rows per pass
  constexpr int kPasses = T::kBc / kRowsPerPass;
  constexpr int kWarpList = kPasses * kWarpRows;  // a warp's rows per block: kBc / 4
  constexpr int kSlots = (kWarpList + 31) / 32;   // rows a lane looks up per block
  static_assert(T::kBc % kRowsPerPass == 0 && 32 % kWarpRows == 0, "gather: rows per pass");
  static_assert(kSlots <= 2, "gather: a lane looks up at most two rows per block");
  // This lane's rows of key block n: entry `slot` is the warp's row index slot * 32 + lane, pass
  // idx / kWarpRows, row warp * kWarpRows + idx % kWarpRows + pass * kRowsPerPass of the block;
  // page -1 marks a row past the keys. The table's row and the page's by the launcher's
  // divisor (Params::page_div).
  int page[kSlots], row[kSlots];
  auto look_up = [&](int n) {
    int const ptid = producer_thread();
    int const lane = ptid % 32, warp = ptid / 32;
    int32_t const* const table = p.block_table + int64_t(w.batch) * p.max_pages_per_seq;
#pragma unroll
    for (int slot = 0; slot < kSlots; ++slot) {
      int const idx = slot * 32 + lane;
      int const r = warp * kWarpRows + idx % kWarpRows + (idx / kWarpRows) * kRowsPerPass;
      int const key = n * T::kBc + r;
      page[slot] = -1;
      row[slot] = 0;
      if (idx < kWarpList && key < w.seq.sk) {
        uint32_t entry, in_page;
        params.page_div.divmod(uint32_t(key), entry, in_page);
        page[slot] = min(max(__ldg(table + entry), 0), p.num_pages - 1);
        row[slot] = int(in_page);
      }
    }
  };
  // The lanes' rows of the looked-up block (page[], row[]) as element offsets of the K/V head's
  // row in K or V (page, row and head strides), -1 past the keys: each lane turns them into
  // offsets once per block and tensor, so a pass shuffles two words and adds, rather than
  // multiplying 64-bit strides per copy (10 of the 27 instructions a copy took). The head's
  // offset is added here rather than to the copies' 64-bit base pointer, which then needs no
  // register of its own across the passes (with one, ptxas spilled 4 bytes at d 256).
  auto offsets = [&](int64_t page_stride, int64_t row_stride, int64_t head_stride,
                     int64_t(&off)[kSlots]) {
    int64_t const head_off = int64_t(kv_head) * head_stride;
#pragma unroll
    for (int slot = 0; slot < kSlots; ++slot) {
      off[slot] = page[slot] >= 0 ? int64_t(uint32_t(page[slot])) * page_stride +
                                        int64_t(uint32_t(row[slot])) * row_stride + head_off
                                  : -1;
    }
  };
  // Key block n of K or V (`tensor`, its head stride) into the stage at `dst`, from the lanes'
  // row offsets `off` (offsets() of block n's look-ups), `groups` passes of kChunks columns. A
  // chunk at or past `cols` (the tensor's head dim: below the kernel's in the bounded
  // instantiations only, the general one and the narrow pairs: kernel.cuh) is zero-filled,
  // never read.
  auto gather = [&](void const* tensor, int64_t const(&off)[kSlots],
                    uint32_t dst, int cols, int groups, bool whole) {
    int const ptid = producer_thread();
    int const lane = ptid % 32, warp = ptid / 32;
    // This thread's first chunk of a row, and its row in its warp's pass. Its kPerThread chunks
    // are kRowThreads apart (chunk, chunk + kRowThreads, ...), so one copy instruction of the
    // kRowThreads threads of a row covers kRowThreads adjacent chunks: whole 32-byte sectors
    // where rows start on 32 bytes. (With each thread's chunks adjacent, one instruction's
    // 16-byte pieces lay 16 * kPerThread bytes apart and every sector was fetched from L2 twice,
    // by two instructions: page 1 ran 1.05-1.20x slower at d 128 and d 256 on the H200.)
    int const chunk = ptid % kRowThreads, sub = lane / kRowThreads;
    // The first chunk's place in a stage: its 64-column block, then its 16-byte unit within the
    // row (chunk j adds j * kRowThreads chunks, group g adds g * kChunks: whole 64-column
    // blocks).
    uint32_t const unit = chunk % 8;
    // This thread's row at pass i is r0 + i * kRowsPerPass, so its destination advances by a
    // constant and its swizzled unit (unit ^ (r & 7)) takes at most two values: written out,
    // the compiler keeps them in registers rather than precomputing 16 offsets and shuffle lanes
    // and spilling them to local memory under the producer's 24 registers of then (ptxas did,
    // 152 bytes: one local load per pass in the loop). Chunk j of the thread's kPerThread sits
    // j * kRowThreads / 8 blocks on, at unit + j * kRowThreads % 8, whose swizzled place is the
    // first's XOR that (below 8, kRowThreads is a power of two above unit).
    int const r0 = warp * kWarpRows + sub;
    uint32_t const swizzle[2] = {(unit ^ uint32_t(r0 & 7)) << 4,
                                 (unit ^ uint32_t((r0 + kRowsPerPass) & 7)) << 4};
    // This thread's chunk of row 0 of page 0 (off[] holds the head's offset).
    Elem const* const base = static_cast<Elem const*>(tensor) + chunk * 8;
    dst += uint32_t(chunk / 8) * T::kBc * 128 + uint32_t(r0) * 128;
    // Not unrolled: d 192's three groups unrolled kept three sets of addresses live in the
    // producer's 24 registers of then (ptxas: 348-412 bytes of spills at 112 keys, 100-160
    // rolled).
#pragma unroll 1
    for (int g = 0; g < groups; ++g) {
      // How many of the thread's kPerThread chunks of a row lie within `cols` (a multiple of 8:
      // whole chunks): chunk j does where j is below it. A count compared with constants
      // rather than each chunk's column compared with `cols`: those four columns held across
      // the passes spilled 8 bytes under the producer's 24 registers at d 256 (ptxas).
      int const in_cols_chunks =
          min(kPerThread, max(cols / 8 - chunk - g * kChunks + kRowThreads - 1, 0) / kRowThreads);
      auto pass = [&](int i, auto whole_block) {
        // The warp's row index i * kWarpRows + sub lives in lane (i * kWarpRows) % 32 + sub of
        // slot (i * kWarpRows) / 32 (selected, not indexed: a rolled loop would put off[] in
        // local memory).
        int const from = (i * kWarpRows) % 32 + sub;
        int64_t const mine = (i * kWarpRows) / 32 == 0 ? off[0] : off[kSlots - 1];
        int64_t const pass_off = __shfl_sync(0xffffffffu, mine, from);
        constexpr bool kWhole = decltype(whole_block)::value;
        bool const in_keys = kWhole || pass_off >= 0;
        Elem const* src = base + g * kChunks * 8 + (in_keys ? pass_off : 0);
        uint32_t const at = uint32_t(g * kChunks / 8 * T::kBc * 128) +
                            uint32_t(i * kRowsPerPass * 128) +
                            ((i * kRowsPerPass / 4) & 1 ? swizzle[1] : swizzle[0]);
#pragma unroll
        for (int j = 0; j < kPerThread; ++j) {
          uint32_t const block = uint32_t(j * kRowThreads / 8) * T::kBc * 128;
          uint32_t const flip = uint32_t(j * kRowThreads % 8) << 4;
          if constexpr (kWhole) {
            ptx::cp_async_16(dst + block + (at ^ flip), src + j * kRowThreads * 8);
          } else {
            bool const in_cols = !kBounded || j < in_cols_chunks;
            ptx::cp_async_16_zfill(dst + block + (at ^ flip), src + j * kRowThreads * 8,
                                   in_keys && in_cols);
          }
        }
      };
      // Several chunks per thread: passes in a loop, so the copies of one pass are in flight
      // before the next pass's look-up, on the producer's 24 registers of then (unrolled, ptxas
      // hoisted the passes' shuffles and spilled 204-504 bytes in the d 128 kernels, from
      // 60-384).
      auto passes = [&](auto whole_block) {
        if constexpr (kPerThread > 1) {
#pragma unroll 1
          for (int i = 0; i < kPasses; ++i) pass(i, whole_block);
        } else {
#pragma unroll
          for (int i = 0; i < kPasses; ++i) pass(i, whole_block);
        }
      };
      // The form is a tag of the innermost lambdas: nvcc 13.0's front end crashed on it as a
      // template parameter or tag of the outer one.
      if (whole) {
        passes(std::true_type{});
      } else {
        passes(std::false_type{});
      }
    }
    ptx::cp_async_commit();
  };
  auto signal = [&](uint64_t* full) {
    fence_proxy_async_shared();
    mbar_arrive(full);
  };
  if (w.n_blocks > 0) look_up(w.n_begin + w.n_blocks - 1);
  int pending_v = -1;  // the stage whose V copies are in flight, not yet signalled
  for (int it = 0; it < w.n_blocks; ++it, ++pipe) {
    int const n = w.n_begin + w.n_blocks - 1 - it;
    int const s = int(pipe % T::kStages);
    uint32_t const phase = (pipe / T::kStages) & 1;
    int64_t off[kSlots];
    mbar_wait(&sm.k_empty[s], phase ^ 1);
    offsets(p.k_batch_stride, p.k_seq_stride, p.k_head_stride, off);
    // A block of whole rows and columns (every block but a sequence's last, where its keys end
    // mid-block, and a bounded head dim's) copies with the plain cp.async: the zero-filling form
    // (SASS LDGSTS...ZFILL) costs 8 shared-memory wavefronts an instruction where the plain one
    // costs 4, as FA4's copies do (ncu, H200, d 256 on pages of 1: 132.6 M -> 66.3 M, the
    // kernel 1.03x faster; docs/performance.md session 58).
    bool const whole_rows = (n + 1) * T::kBc <= w.seq.sk;
    gather(p.k, off, smem_addr(sm.k_tiles + s * T::kKVBytes), p.head_dim,
           kGroups, whole_rows && (!kBounded || p.head_dim >= T::kD));
    // V's offsets, then the next block's pages, which load while this block's copies run and
    // the V stage frees. Looked up after V's copies instead (no offsets held across the wait),
    // pages of 1 ran 0.93-0.97x as fast (chunked prefill, d 128, H200; docs/performance.md):
    // the table's latency fell where the next block's K gather needs its pages.
    offsets(p.v_batch_stride, p.v_seq_stride, p.v_head_stride, off);
    // Where K's copies run in a loop over column groups (d 192), the next block's index is
    // derived afresh from the loop's count: n held across that loop spilled 4 bytes under the
    // producer's 24 registers; with one group (d 256 with 80 keys) deriving it so spilled 24.
    if (it + 1 < w.n_blocks) {
      look_up(kGroups > 1 ? w.n_begin + w.n_blocks - 2 - int(opaque(uint32_t(it))) : n - 1);
    }
    if (pending_v >= 0) {
      ptx::cp_async_wait<1>();  // the previous block's V; this block's K may still run
      signal(&sm.v_full[pending_v]);
    }
    // The phase read afresh from the pipeline's count: held across K's gather, ptxas spilled it
    // (4 bytes at d 256 with 80 keys, under the producer's 24 registers).
    mbar_wait(&sm.v_empty[s], (uint32_t(opaque(pipe) / T::kStages) & 1) ^ 1);
    gather(p.v, off, smem_addr(sm.v_tiles + s * T::kVBytes), p.head_dim_v,
           kVGroups, whole_rows && (!kBounded || p.head_dim_v >= T::kDv));
    ptx::cp_async_wait<1>();  // this block's K; its V may still run
    signal(&sm.k_full[s]);
    pending_v = s;
  }
  if (pending_v >= 0) {
    ptx::cp_async_wait<0>();
    signal(&sm.v_full[pending_v]);
  }
}

// The tensor maps into the TMA unit's cache, by the producer's first thread.
__device__ __forceinline__ void prefetch_maps(Params const& params) {
  tma_prefetch_map(&params.q_map);
  tma_prefetch_map(&params.k_map);
  tma_prefetch_map(&params.v_map);
}

// The bytes of `rows` rows of a tensor's boxes, `cols` columns a row in boxes of 64 or, where a
// narrow pair's boxes are exact (Params::qk_box_cols), of box_cols each: a "full" barrier's
// transaction count.
template <class T>
__device__ __forceinline__ int box_bytes(int rows, int cols, int box_cols) {
  return rows * (cols / T::kBlockCols) * (box_cols != 0 ? box_cols : T::kBlockCols) *
         T::kElemBytes;
}
// Params::qk_box_cols, which only a d 64 kernel's pairs take (narrow.hpp's exact_qk_boxes):
// the other kernels' producers compile without it.
template <class T>
__device__ __forceinline__ int exact_boxes(Params const& params) {
  return T::kD == 64 ? params.qk_box_cols : 0;
}
// Whether a launch takes a narrow pair's shifting loops (kShift in load_tiles): any column
// shift, V's map over a row's heads, or Q's and K's exact boxes.
template <class T>
__device__ __forceinline__ bool shifts_columns(Params const& params) {
  return (params.k_shift | params.v_shift | params.v_flat_cols | exact_boxes<T>(params)) != 0;
}
// The map coordinates (first column, head) of a K/V head's boxes: its own head from column 0,
// or with kShift its column shift (narrow.hpp's column_shift) to the left and, where V's map
// runs over a row's heads (flat: Params::v_flat_cols), head 0 from the head's first column.
template <bool kShift>
__device__ __forceinline__ int2 box_origin(int kv_head, int32_t shift_bits, int flat) {
  if constexpr (!kShift) return make_int2(0, kv_head);
  return make_int2(kv_head * flat - column_shift(shift_bits, kv_head), flat != 0 ? 0 : kv_head);
}

// Tile w's Q into its buffer, by the producer's first thread once the buffer is free; its
// columns `shift` to the right there, as its K head's (narrow.hpp's column_shift);
// bytes: what its boxes bring (box_bytes).
template <class T>
__device__ __forceinline__ void load_q(Params const& params, Smem<T> const& sm, Work const& w,
                                       int shift, int bytes = T::kQBytes) {
  mbar_arrive_expect_tx(sm.q_full, bytes);
  for (int cb = 0; cb < T::kD / T::kBlockCols; ++cb) {
    tma_load_4d(sm.q_tile + cb * T::kBr * 128, &params.q_map, sm.q_full,
                cb * T::kBlockCols - shift, int(w.seq.q_first) + w.m_block * T::kBr, w.head,
                w.map_batch);
  }
}

// The block's tiles in the scheduler's order, for the producer: for each tile with keys, the
// threads that `wait` wait for the Q buffer to be free and the leader loads Q into it, then
// body(w, kv_head) loads the tile's key blocks. A tile with keys waits for the parity of the
// count of tiles with keys up to and including it (a tile without keys neither loads nor frees
// Q).
// kPhaseInStep (the gathered pages' loop): that parity is the low bit of the loop's counter,
// the round the rest, so it stays in the uniform registers that hold the counter and the tile's
// decode there. Counted apart, ptxas held it in a vector register and spilled it across the
// gather under the producer's 24 registers (8 bytes in d 192's persistent general
// instantiation, the default build's last spill; nvcc 13.0). In every loop, the form made
// ptxas spill elsewhere (4 bytes in d 256's 80-key tiles' producers, 12 / 32 in d 128's
// 176-key general consumers): the other loops keep the separate count.
// kShift: a narrow pair's loop, Q shifted as the tile's K head (Params::k_shift).
template <class T, bool kPhaseInStep = false, bool kShift = false, class Body>
__device__ __forceinline__ void for_each_tile(Params const& params, Smem<T> const& sm,
                                              TileScheduler<T> const& sched, bool wait,
                                              bool leader, Body&& body) {
  constexpr int kStep = kPhaseInStep ? 2 : 1;
  int64_t q_round = 0;
  for (int64_t step = 0;; step += kStep) {
    int64_t const tile = sched.tile(step >> (kStep - 1));
    if (tile >= sched.n_tiles) break;
    Work const w = work_of<T>(params, tile);
    if (w.n_blocks == 0) continue;
    // A fresh barrier has completed parity 1: the first tile with keys waits for nothing.
    uint32_t phase = uint32_t(q_round & 1) ^ 1;
    if constexpr (kPhaseInStep) {
      step ^= 1;
      phase = uint32_t(step & 1);
    } else {
      ++q_round;
    }
    if (wait) mbar_wait(sm.q_empty, phase);
    if constexpr (kShift) {
      // Q's shift needs its K head first: by multiply and shift, not a division, ahead of Q's
      // copy.
      int const kv_head = int(params.kv_group_div.div(uint32_t(w.head)));
      if (leader) {
        load_q<T>(params, sm, w, column_shift(params.k_shift, kv_head),
                  box_bytes<T>(T::kBr, T::kD, exact_boxes<T>(params)));
      }
      body(w, kv_head);
    } else {
      if (leader) load_q<T>(params, sm, w, 0);
      body(w, w.head / params.p.q_heads_per_kv);
    }
  }
}

// TMA box `slot` (slot * box rows on) of key block n of tile w in a paged cache: its page and
// its first row there. A box that starts past the sequence's keys (or a slot past the block's
// boxes) reads page num_pages, past the map: TMA fills it with zeros and the table's padding is
// never read. Table entries are clamped into [0, num_pages), never trusted.
template <class T>
__device__ __forceinline__ void box_of(Params const& params, Work const& w, int n, int slot,
                                       int box, int& page, int& row) {
  ForwardParams const& p = params.p;
  int const key = n * T::kBc + slot * box;
  page = p.num_pages;
  row = 0;
  if (slot * box < T::kBc && key < w.seq.sk) {
    uint32_t entry, in_page;
    params.page_div.divmod(uint32_t(key), entry, in_page);
    page = min(max(p.block_table[int64_t(w.batch) * p.max_pages_per_seq + entry], 0),
               p.num_pages - 1);
    row = int(in_page);
  }
}

// box_of with the table entry kept as loaded (`entry`; `reads` whether the box reads a page),
// for a producer that computes between its look-up and its copy: box_page clamps it where the
// copy uses it. The clamp next to the load makes the warp wait for the block table right
// there: the e4m3 converters' warp 0 then started each block's conversion an L2 round trip
// late (chunked prefill on pages of 16 ran 0.76x its contiguous speed at d 128, H200).
template <class T>
__device__ __forceinline__ void box_entry_of(Params const& params, Work const& w, int n, int slot,
                                             int box, int& entry, int& row, bool& reads) {
  ForwardParams const& p = params.p;
  int const key = n * T::kBc + slot * box;
  reads = slot * box < T::kBc && key < w.seq.sk;
  entry = 0;
  row = 0;
  if (reads) {
    uint32_t index, in_page;
    params.page_div.divmod(uint32_t(key), index, in_page);
    entry = p.block_table[int64_t(w.batch) * p.max_pages_per_seq + index];
    row = int(in_page);
  }
}
__device__ __forceinline__ int box_page(ForwardParams const& p, int entry, bool reads) {
  return reads ? min(max(entry, 0), p.num_pages - 1) : p.num_pages;
}

// A key block of e4m3 K, rows first .. first + B_c - 1 of a dense, varlen or contiguous-cache
// problem (an FP8 tile's, or an e4m3 cache's read as loaded: kKeys8), into stage s by TMA, one
// box of 128 columns at a time, by the thread that armed the stage's "full" barrier for its
// bytes.
template <class T>
__device__ __forceinline__ void tma_load_k_block(Params const& params, Smem<T> const& sm, int s,
                                                 int first, int kv_head, int map_batch) {
#pragma unroll
  for (int cb = 0; cb < T::kD / 128; ++cb) {
    tma_load_4d(sm.k_tiles + s * T::kKVBytes + cb * T::kBc * 128, &params.k_map, &sm.k_full[s],
                cb * 128, first, kv_head, map_batch);
  }
}

// An e4m3 cache (the kernel's kE4M3 instantiation), run by the producer warpgroup's 128 threads
// instead of load_tiles: warp 0 loads Q and each key block's K and V bytes by TMA into the e4m3
// stages (Smem::k8_tiles, v8_tiles: B_c rows of kD bytes, a box of whole rows; a paged block's
// boxes by all four warps, below); all 128 threads turn each block into the 16-bit stage the
// consumers read, in their order (K(it), then V(it)), exactly, as fp16 for either query type
// (ptx::e4m3x4_to's one instruction per pair; the consumers' products run in fp16), fence the
// async proxy (wgmma reads the stage) and arrive on its "full" barrier and on the e4m3 stage's
// "empty" one (128 arrivals each). With two e4m3
// stages per tensor (d 64 and 128) the next block loads while this one converts; with one (d
// 256, tile.cuh) each tensor's next block is issued as soon as this block's bytes of it are
// converted, its load then under the other tensor's conversion and the consumers' lead of one
// 16-bit stage. Thread t converts 8 bytes of one column unit per pass, passes 8 rows apart at d
// 128 (16 at d 64, 4 at d 256), so its 128-byte-swizzled place (unit ^ row % 8) is the same
// every pass (at d 256 every other pass, the row's bit 2 flipping the chunk's) and its
// addresses are constants from two bases. Columns past head_dim arrive from TMA as zero bytes,
// rows past the keys are zeroed here (convert). Measured on the H200 (chunked prefill 4 x 512
// against 16k, bf16 queries, docs/performance.md): three warps converting while warp 0 only issued
// TMA, the unit and row recomputed per copy, 0.36x the bf16 cache's speed; all four warps with
// constant addresses 0.57x; four loads before their stores and 40 producer registers (no spills)
// 0.75x; as fp16 for bf16 queries too (the products in fp16, bf16 queries rescaled per row:
// mainloop_mma.cuh's q_bf16_to_fp16) instead of bf16 by bit operations, see docs/performance.md.
// kKeys8 (the plain instantiation of a Tile::kE4M3Keys tile): K goes by TMA straight into its
// 16-bit stage, one block ahead, and only V is converted: the consumers multiply K's e4m3
// bytes on wgmma's e4m3 form (mainloop_mma.cuh's q_bf16_to_e4m3_pair). Chunked prefill at d 128
// on pages of 16 then ran 1.06x faster, 0.943x the bf16 cache's speed (from 0.885x), and 0.971x
// with the hi query rows in registers (H200, docs/performance.md session 63).
template <class T, bool kKeys8>
__device__ __forceinline__ void load_convert_e4m3(Params const& params, Smem<T> const& sm,
                                                  TileScheduler<T> const& sched, int ptid) {
  constexpr int kRowUnits = T::kD / 8;           // 8-byte units of a row: 16 at d 128
  constexpr int kPassRows = 128 / kRowUnits;     // rows per pass: 8 at d 128, 16 at d 64, 4 at 256
  constexpr int kPasses = T::kBc / kPassRows;
  static_assert(128 % kRowUnits == 0 && (kPassRows % 8 == 0 || kPassRows == 4) &&
                    T::kBc % kPassRows == 0,
                "e4m3: whole passes, each keeping its row's swizzle or flipping its bit 2");
  // One e4m3 stage per tensor (d 256) or two: block it + 1 loads into the stages block it - 1
  // freed.
  constexpr bool kOneSlot = T::kE4M3Slots == 1;
  static_assert(T::kE4M3Slots == 1 || T::kE4M3Slots == 2, "e4m3: one or two stages per tensor");
  static_assert(T::kDv == T::kD, "e4m3: V converted in K's row layout");
  ForwardParams const& p = params.p;
  int const lane = ptid % 32;
  bool const paged = p.layout == kLayoutPagedKv;
  // Warp 0 issues a contiguous block's one box per tensor; a paged block's boxes (8 per tensor
  // at B_c 128 on pages of 16) are spread over the four warps, box lane * 4 + warp, since every
  // warp also converts a quarter of each block: issued and looked up by warp 0 alone, its
  // conversion started last and every block's "full" arrival waited for it.
  bool const leader = ptid == 0, loader = paged || ptid < 32;
  int const slot = lane * 4 + ptid / 32;
  int const unit = ptid % kRowUnits, row0 = ptid / kRowUnits;
  uint32_t const src_off = uint32_t(row0 * T::kD + unit * 8);
  uint32_t const dst_off = uint32_t(unit / 8) * T::kBc * 128 + uint32_t(row0) * 128 +
                           ((uint32_t(unit % 8) ^ uint32_t(row0 % 8)) << 4);
  // Eight passes' loads (at d 64 a block's all) are issued before their conversions and
  // stores: the volatile copies keep their order, and one load at a time, each behind the store
  // before it, left every warp's conversion waiting on shared-memory latency (four with 40
  // registers spilled 36 bytes at d 128; eight with 56 none, kernel.cuh).
  constexpr int kBatch = 8;
  static_assert(kPasses % kBatch == 0, "e4m3: whole batches of passes");
  // Rows at or past `keys` (the block's rows inside the sequence) convert as zeros: TMA
  // zero-fills only past the map (the cache's capacity, or a box that starts past the keys), so
  // the rows of a contiguous cache beyond its length and the tail of a page hold whatever the
  // caller left there, and an fp16 NaN in V would survive P = 0 into O. Only a sequence's last
  // block has such rows, so the test is compiled into a second copy of the loop (in the only
  // one, its compare and selects per pass cost bf16 queries 17% at 4 x 512 against 16k).
  auto convert_rows = [&](auto masked, uint8_t const* src, uint8_t* dst, int keys) {
    uint32_t const from = smem_addr(src) + src_off, to = smem_addr(dst) + dst_off;
#pragma unroll
    for (int i = 0; i < kPasses; i += kBatch) {
      uint32_t word[2 * kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];"
                     : "=r"(word[2 * b]), "=r"(word[2 * b + 1])
                     : "r"(from + uint32_t((i + b) * kPassRows * T::kD)));
        if constexpr (decltype(masked)::value) {
          if (row0 + (i + b) * kPassRows >= keys) word[2 * b] = word[2 * b + 1] = 0;
        }
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        uint2 const lo = ptx::e4m3x4_to<__half>(word[2 * b]);
        uint2 const hi = ptx::e4m3x4_to<__half>(word[2 * b + 1]);
        // Passes of 4 rows: the odd ones' rows have bit 2 set, which the swizzle XORs into the
        // chunk index (bit 6 of the address: the 1024-byte-aligned stage's rows are 128 bytes).
        uint32_t const flip = kPassRows % 8 == 0 ? 0u : uint32_t((i + b) & 1) << 6;
        asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};"
                     ::"r"((to + uint32_t((i + b) * kPassRows * 128)) ^ flip), "r"(lo.x),
                     "r"(lo.y), "r"(hi.x), "r"(hi.y)
                     : "memory");
      }
    }
  };
  auto convert = [&](uint8_t const* src, uint8_t* dst, int keys) {
    if (keys >= T::kBc) {
      convert_rows(std::false_type{}, src, dst, keys);
    } else {
      convert_rows(std::true_type{}, src, dst, keys);
    }
  };
  if (leader) prefetch_maps(params);
  int const box = params.kv_box_rows;
  int64_t pipe = 0;
  for_each_tile<T>(params, sm, sched, loader, leader, [&](Work const& w, int kv_head) {
    // This thread's box of a paged key block (box_entry_of), looked up before its copies.
    int entry = 0, row = 0;
    bool reads = false;
    auto look_up = [&](int it) {
      box_entry_of<T>(params, w, w.n_begin + w.n_blocks - 1 - it, slot, box, entry, row, reads);
    };
    // Block `it` of the tile (pipeline block pipe + it) of K (kv 0) or V (1) into its e4m3
    // stage, by the loaders; thread 0 arms the stage for all its boxes' bytes (a box's bytes
    // may land first: the phase waits for that arrival too).
    auto load = [&](int it, int kv) {
      int64_t const at = pipe + it;
      int const j = int(at % T::kE4M3Slots);
      uint32_t const phase = (at / T::kE4M3Slots) & 1;
      int const n = w.n_begin + w.n_blocks - 1 - it;
      uint64_t* const full = kv == 0 ? &sm.k8_full[j] : &sm.v8_full[j];
      mbar_wait(kv == 0 ? &sm.k8_empty[j] : &sm.v8_empty[j], phase ^ 1);
      if (leader) mbar_arrive_expect_tx(full, T::kE4M3Bytes);
      uint8_t* const dst = (kv == 0 ? sm.k8_tiles : sm.v8_tiles) + j * T::kE4M3Bytes;
      CUtensorMap const* map = kv == 0 ? &params.k_map : &params.v_map;
      if (paged) {
        if (slot * box < T::kBc) {
          tma_load_4d(dst + slot * box * T::kD, map, full, 0, row, kv_head,
                      box_page(p, entry, reads));
        }
      } else if (leader) {
        tma_load_4d(dst, map, full, 0, int(w.seq.k_first) + n * T::kBc, kv_head, w.map_batch);
      }
    };
    // kKeys8: block `it`'s K straight into its 16-bit stage, as the consumers read it
    // (128-byte rows of each 128-column block, swizzled: launch.cuh's map), by the loaders once
    // the stage is free; thread 0 arms it for the bytes of all their boxes. Its rows past the
    // sequence's keys hold what the cache holds there: the consumers mask their scores.
    auto load_k = [&](int it) {
      int64_t const at = pipe + it;
      int const s = int(at % T::kStages);
      int const n = w.n_begin + w.n_blocks - 1 - it;
      mbar_wait(&sm.k_empty[s], ((at / T::kStages) & 1) ^ 1);
      if (leader) mbar_arrive_expect_tx(&sm.k_full[s], T::kE4M3Bytes);
      uint8_t* const dst = sm.k_tiles + s * T::kKVBytes;
      if (paged) {
        if (slot * box < T::kBc) {
#pragma unroll
          for (int cb = 0; cb < T::kD / 128; ++cb) {
            tma_load_4d(dst + (cb * T::kBc + slot * box) * 128, &params.k_map, &sm.k_full[s],
                        cb * 128, row, kv_head, box_page(p, entry, reads));
          }
        }
      } else if (leader) {
        tma_load_k_block<T>(params, sm, s, int(w.seq.k_first) + n * T::kBc, kv_head, w.map_batch);
      }
    };
    auto load_kv = [&](int it) {
      if constexpr (kKeys8) {
        load_k(it);
      } else {
        load(it, 0);
      }
      load(it, 1);
    };
    if (loader) {
      if (paged) look_up(0);
      load_kv(0);
      if (!kOneSlot && paged && w.n_blocks > 1) look_up(1);
    }
    for (int it = 0; it < w.n_blocks; ++it) {
      bool const next = loader && it + 1 < w.n_blocks;
      if constexpr (kOneSlot) {
        // Block it's boxes are all issued: the next block's are looked up under its conversion
        // (and its K, read as loaded, issued).
        if (next && paged) look_up(it + 1);
        if constexpr (kKeys8) {
          if (next) load_k(it + 1);
        }
      } else if (next) {
        // The next block's bytes load while this one converts (its e4m3 stages free once every
        // thread has converted the block before this one).
        load_kv(it + 1);
        if (paged && it + 2 < w.n_blocks) look_up(it + 2);
      }
      int64_t const at = pipe + it;
      int const s = int(at % T::kStages), j = int(at % T::kE4M3Slots);
      uint32_t const phase = (at / T::kStages) & 1, phase8 = (at / T::kE4M3Slots) & 1;
      int const keys = w.seq.sk - (w.n_begin + w.n_blocks - 1 - it) * T::kBc;
      // One tensor's block from its e4m3 stage j into its 16-bit stage s, once the bytes have
      // landed and the consumers are done with the stage; then frees stage j.
      auto convert_block = [&](uint64_t* e4m3_full, uint64_t* e4m3_empty, uint8_t const* from,
                               uint64_t* full, uint64_t* empty, uint8_t* to) {
        mbar_wait(e4m3_full, phase8);
        mbar_wait(empty, phase ^ 1);
        convert(from, to, keys);
        fence_proxy_async_shared();
        mbar_arrive(full);
        mbar_arrive(e4m3_empty);
      };
      if constexpr (!kKeys8) {
        convert_block(&sm.k8_full[j], &sm.k8_empty[j], sm.k8_tiles + j * T::kE4M3Bytes,
                      &sm.k_full[s], &sm.k_empty[s], sm.k_tiles + s * T::kKVBytes);
        if (kOneSlot && next) load(it + 1, 0);
      }
      convert_block(&sm.v8_full[j], &sm.v8_empty[j], sm.v8_tiles + j * T::kE4M3Bytes,
                    &sm.v_full[s], &sm.v_empty[s], sm.v_tiles + s * T::kVBytes);
      if (kOneSlot && next) load(it + 1, 1);
    }
    pipe += w.n_blocks;
  });
}

// An FP8 tile's producer (e4m3 Q, K and V), run by the producer warpgroup's 128 threads instead
// of load_tiles: warp 0 loads Q, each key block's K straight into its stage (128-byte-swizzled
// boxes of 128 columns, dense or paged, a paged block's boxes by the lanes of warp 0) and its V
// bytes into a raw slot (a box of whole rows, unswizzled), one block ahead; then all 128 threads
// transpose the block's V into its stage as [d_head rows][B_c keys] (wgmma's e4m3 B operand is
// K-major), fence the async proxy and arrive on the stage's "full" barrier and the slot's
// "empty" one (128 arrivals each).
//
// The keys are written in the order of P's e4m3 A registers (mainloop_mma.cuh's to_p): within
// each 16 keys, position 4 q + i of a V row holds key 8 (i / 2) + 2 q + i % 2. A thread's unit is
// 4 bytes (columns) of 16 keys: two halves, each 8 keys (4 h + {0..3} and 8 + 4 h + {0..3},
// positions 8 h .. 8 h + 7) read as 8 words, turned into 4 rows of 8 bytes by two 4 x 4 byte
// transposes and written with 8-byte stores. Lane l takes columns 4 l .. 4 l + 3 of a 128-byte
// block (a load instruction's 32 words then lie in 32 banks), and lanes 8-15 and 24-31 take the
// halves in the other order, so that with the 16 spare bytes per 8-row group (config.hpp) the
// stores of each half-warp fill every bank once. Keys past the sequence are written as zeros:
// TMA fills zeros only past the tensor, and an e4m3 NaN there times P = 0 would reach O.
template <class T>
__device__ __forceinline__ void load_transpose_v(Params const& params, Smem<T> const& sm,
                                                 TileScheduler<T> const& sched, int ptid) {
  static_assert(T::kFp8 && T::kDv == T::kD && T::kD % 128 == 0 && T::kBc % 16 == 0,
                "FP8 tiles: whole 128-byte column blocks and 16-key groups");
  constexpr int kKeyGroups = T::kBc / 16;
  constexpr int kUnits = kKeyGroups * (T::kD / 128);  // (key group, column block) pairs
  static_assert(kUnits % 4 == 0, "FP8: the units spread over the producer's four warps");
  // Warp 0 copies block it + 1 into the raw slot block it - 1 freed before it transposes block it
  // itself: two slots (every valid FP8 config has them: config.hpp's e4m3_v_slots).
  static_assert(T::kVRawSlots == 2, "FP8: a raw V slot loading while the other is transposed");
  ForwardParams const& p = params.p;
  int const lane = ptid % 32, warp = ptid / 32;
  bool const leader = ptid == 0, loader = ptid < 32;
  int const flip = (lane / 8) & 1;
  // Block `raw` (B_c rows of kD bytes) into the stage at shared address `vt`, rows at or past
  // `keys` as zeros (only a sequence's last block has any: a second copy of the loop).
  auto transpose_rows = [&](auto masked, uint32_t raw, uint32_t vt, int keys) {
    // Rolled: unrolled, ptxas spilled 44-96 bytes of the producer's 56 registers.
#pragma unroll 1
    for (int n = 0; n < kUnits / 4; ++n) {
      int const unit = warp + 4 * n;
      int const group = unit % kKeyGroups;
      int const col = (unit / kKeyGroups) * 128 + 4 * lane;  // this lane's first column
      // Row col + i of the stage: 8-row group (col + i) / 8, row (col + i) % 8 = 4 (lane % 2) + i
      // of its core matrices, the key group's core matrix.
      uint32_t const row_at = vt + uint32_t(col / 8) * T::kVtGroupBytes +
                              uint32_t(col % 8) * 16 + uint32_t(group) * 128;
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        int const h = j ^ flip;
        int const key0 = 16 * group + 4 * h;
        // Positions 8 h + 4 q .. 8 h + 4 q + 3 of rows col + i (q = 0: lo, 1: hi) hold keys
        // key0 + 2 q + {0, 1, 8, 9}: four words each, transposed as soon as they are loaded.
        auto quad = [&](int q, uint32_t(&out)[4]) {
          uint32_t word[4];
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            int const key = key0 + 2 * q + (k & 1) + 8 * (k >> 1);
            asm volatile("ld.shared.b32 %0, [%1];"
                         : "=r"(word[k])
                         : "r"(raw + uint32_t(key * T::kD + col)));
            if constexpr (decltype(masked)::value) {
              if (key >= keys) word[k] = 0;
            }
          }
          ptx::transpose_bytes_4x4(word[0], word[1], word[2], word[3], out);
        };
        uint32_t lo[4], hi[4];
        quad(0, lo);
        quad(1, hi);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          asm volatile("st.shared.v2.b32 [%0], {%1, %2};"
                       ::"r"(row_at + uint32_t(i * 16 + h * 8)), "r"(lo[i]), "r"(hi[i])
                       : "memory");
        }
      }
    }
  };
  auto transpose = [&](uint32_t raw, uint32_t vt, int keys) {
    if (keys >= T::kBc) {
      transpose_rows(std::false_type{}, raw, vt, keys);
    } else {
      transpose_rows(std::true_type{}, raw, vt, keys);
    }
  };
  if (leader) prefetch_maps(params);
  bool const paged = p.layout == kLayoutPagedKv;
  int const box = params.kv_box_rows;
  int64_t pipe = 0;
  for_each_tile<T>(params, sm, sched, loader, leader, [&](Work const& w, int kv_head) {
    // This lane's box of a paged key block (box_of), looked up a block ahead of its copy.
    int page = 0, row = 0;
    auto look_up = [&](int it) {
      box_of<T>(params, w, w.n_begin + w.n_blocks - 1 - it, lane, box, page, row);
    };
    // Block `it` of the tile (pipeline block pipe + it): K into its stage, V into its raw slot,
    // by warp 0.
    auto load = [&](int it) {
      int64_t const at = pipe + it;
      int const s = int(at % T::kStages), j = int(at % T::kVRawSlots);
      uint32_t const phase = (at / T::kStages) & 1, phase8 = (at / T::kVRawSlots) & 1;
      int const n = w.n_begin + w.n_blocks - 1 - it;
      int const first = int(w.seq.k_first) + n * T::kBc;
      mbar_wait(&sm.k_empty[s], phase ^ 1);
      if (leader) mbar_arrive_expect_tx(&sm.k_full[s], T::kKVBytes);
      uint8_t* const k_dst = sm.k_tiles + s * T::kKVBytes;
      if (paged) {
        for (int cb = 0; cb < T::kD / 128; ++cb) {
          if (lane * box < T::kBc) {
            tma_load_4d(k_dst + (cb * T::kBc + lane * box) * 128, &params.k_map, &sm.k_full[s],
                        cb * 128, row, kv_head, page);
          }
        }
      } else if (leader) {
        tma_load_k_block<T>(params, sm, s, first, kv_head, w.map_batch);
      }
      mbar_wait(&sm.v8_empty[j], phase8 ^ 1);
      if (leader) mbar_arrive_expect_tx(&sm.v8_full[j], T::kVRawBytes);
      uint8_t* const v_dst = sm.v8_tiles + j * T::kVRawBytes;
      if (paged) {
        if (lane * box < T::kBc) {
          tma_load_4d(v_dst + lane * box * T::kD, &params.v_map, &sm.v8_full[j], 0, row, kv_head,
                      page);
        }
      } else if (leader) {
        tma_load_4d(v_dst, &params.v_map, &sm.v8_full[j], 0, first, kv_head, w.map_batch);
      }
    };
    if (loader) {
      if (paged) look_up(0);
      load(0);
      if (paged && w.n_blocks > 1) look_up(1);
    }
    for (int it = 0; it < w.n_blocks; ++it) {
      // The next block loads while this one's V is transposed (its raw slot frees once every
      // thread has transposed the block before this one).
      if (loader && it + 1 < w.n_blocks) {
        load(it + 1);
        if (paged && it + 2 < w.n_blocks) look_up(it + 2);
      }
      int64_t const at = pipe + it;
      int const s = int(at % T::kStages), j = int(at % T::kVRawSlots);
      uint32_t const phase = (at / T::kStages) & 1, phase8 = (at / T::kVRawSlots) & 1;
      mbar_wait(&sm.v8_full[j], phase8);
      mbar_wait(&sm.v_empty[s], phase ^ 1);
      int const keys = w.seq.sk - (w.n_begin + w.n_blocks - 1 - it) * T::kBc;
      transpose(smem_addr(sm.v8_tiles + j * T::kVRawBytes),
                smem_addr(sm.v_tiles + s * T::kVBytes), keys);
      fence_proxy_async_shared();
      mbar_arrive(&sm.v_full[s]);
      mbar_arrive(&sm.v8_empty[j]);
    }
    pipe += w.n_blocks;
  });
}

// An FP8 tile on a dense or varlen problem whose V was transposed ahead of the run
// (v_images.cuh), by warp 0 (every lane waiting on the barriers, lane 0 arming them and issuing
// the copies): each key block's K by TMA as load_transpose_v does and its V stage as one bulk
// copy of the block's image, which holds the stage's bytes as the transposing threads would
// write them (keys past the sequence as zeros). The other three producer warps have nothing to
// do.
template <class T>
__device__ __forceinline__ void load_fp8_images(Params const& params, Smem<T> const& sm,
                                                TileScheduler<T> const& sched, bool leader) {
  static_assert(T::kFp8 && T::kVImageBytes % 16 == 0 && T::kVImageBytes <= T::kVBytes,
                "FP8: a V image is one bulk copy into its stage");
  ForwardParams const& p = params.p;
  uint8_t const* const images = static_cast<uint8_t const*>(p.v_images);
  if (leader) prefetch_maps(params);
  int64_t pipe = 0;
  for_each_tile<T>(params, sm, sched, true, leader, [&](Work const& w, int kv_head) {
    int64_t const image0 = v_image_index<T>(p, w.batch, kv_head, 0, w.seq.k_first);
    for (int it = 0; it < w.n_blocks; ++it, ++pipe) {
      int const n = w.n_begin + w.n_blocks - 1 - it;
      int const s = int(pipe % T::kStages);
      uint32_t const phase = (pipe / T::kStages) & 1;
      mbar_wait(&sm.k_empty[s], phase ^ 1);
      if (leader) {
        mbar_arrive_expect_tx(&sm.k_full[s], T::kKVBytes);
        tma_load_k_block<T>(params, sm, s, int(w.seq.k_first) + n * T::kBc, kv_head, w.map_batch);
      }
      mbar_wait(&sm.v_empty[s], phase ^ 1);
      if (leader) {
        mbar_arrive_expect_tx(&sm.v_full[s], T::kVImageBytes);
        bulk_load(sm.v_tiles + s * T::kVBytes, images + (image0 + n) * T::kVImageBytes,
                  T::kVImageBytes, &sm.v_full[s]);
      }
    }
  });
}

// Key block's K (kCols = kD) or V (kDv) into stage s of `tiles`, once the stage is free:
// thread 0 arms its "full" barrier for the block's bytes, copy(dst, full) issues this thread's
// copies.
// bytes: what the copies bring, the stage's size unless a narrow pair's boxes are exact.
template <class T, int kCols, class Copy>
__device__ __forceinline__ void load_stage(uint8_t* tiles, uint64_t* full, uint64_t* empty, int s,
                                           uint32_t phase, bool leader, Copy&& copy,
                                           int bytes = T::kBc * kCols * 2) {
  constexpr int kBytes = T::kBc * kCols * 2;
  mbar_wait(&empty[s], phase ^ 1);
  if (leader) mbar_arrive_expect_tx(&full[s], bytes);
  copy(tiles + s * kBytes, &full[s]);
}

// Dense tensors and contiguous caches, by warp 0 (every lane waiting on the barriers, lane 0
// arming them and issuing one copy per 64 columns; kShift: a narrow pair's, from its heads'
// column shifts).
template <class T, bool kShift>
__device__ __forceinline__ void load_contiguous(Params const& params, Smem<T> const& sm,
                                                TileScheduler<T> const& sched, bool leader) {
  if (leader) prefetch_maps(params);
  int64_t pipe = 0;
  for_each_tile<T, false, kShift>(params, sm, sched, true, leader, [&](Work const& w,
                                                                      int kv_head) {
    for (int it = 0; it < w.n_blocks; ++it, ++pipe) {
      int const first = int(w.seq.k_first) + (w.n_begin + w.n_blocks - 1 - it) * T::kBc;
      int const s = int(pipe % T::kStages);
      uint32_t const phase = (pipe / T::kStages) & 1;
      // flat: the map's columns run over the row's heads (Params::v_flat_cols), its head 0.
      auto copy = [&](CUtensorMap const* map, int cols, int32_t shift_bits, int flat) {
        return [&, map, cols, shift_bits, flat](uint8_t* dst, uint64_t* full) {
          if (!leader) return;
          int2 const at = box_origin<kShift>(kv_head, shift_bits, flat);
          for (int cb = 0; cb < cols / 64; ++cb) {
            tma_load_4d(dst + cb * T::kBc * 128, map, full, at.x + cb * 64, first, at.y,
                        w.map_batch);
          }
        };
      };
      load_stage<T, T::kD>(sm.k_tiles, sm.k_full, sm.k_empty, s, phase, leader,
                           copy(&params.k_map, T::kD, params.k_shift, 0),
                           box_bytes<T>(T::kBc, T::kD, kShift ? exact_boxes<T>(params) : 0));
      load_stage<T, T::kDv>(sm.v_tiles, sm.v_full, sm.v_empty, s, phase, leader,
                            copy(&params.v_map, T::kDv, params.v_shift, params.v_flat_cols));
    }
  });
}

// A paged cache in TMA boxes, by all four warps: thread 0 arms the barriers, box i of a key
// block is copied (one copy per 64 columns) by lane i / 4 of warp i % 4. A warp issues its
// lanes' copies one after another (each takes the lane's coordinates into uniform registers
// first), so with every box in warp 0 a key block's 32 copies at d 128 and pages of 16 (8 boxes
// of 16 rows x 2 column blocks, for K and for V) were issued in series: in a contiguous cache,
// boxes of 16 rows from one warp ran 0.87x the speed of 128-row boxes, of 32 rows 0.97x, of 8
// rows 0.69x; dealt round four warps, page 16 ran 1.11-1.16x faster (H200, chunked prefill at
// d 128; docs/performance.md). (A box's bytes may complete on a "full" barrier before thread 0
// arms it: the barrier's transaction count goes negative meanwhile, and its phase waits for
// thread 0's arrival either way.)
template <class T, bool kShift>
__device__ __forceinline__ void load_paged_boxes(Params const& params, Smem<T> const& sm,
                                                 TileScheduler<T> const& sched, int ptid) {
  int const slot = (ptid % 32) * 4 + ptid / 32;  // this thread's box
  bool const leader = ptid == 0;
  int const box = params.kv_box_rows;
  // Threads without a box in any block (B_c / box boxes: 1 to 24) gate nothing: they leave
  // rather than spin on every barrier beside the consumers (thread 0, box 0, arms them).
  if (!leader && slot * box >= T::kBc) return;
  if (leader) prefetch_maps(params);
  int64_t pipe = 0;
  for_each_tile<T, false, kShift>(params, sm, sched, true, leader, [&](Work const& w,
                                                                      int kv_head) {
    // This thread's box of a key block (box_of): the tile's first block here, each next one
    // once this block's copies are issued, so the table's latency overlaps the wait for a free
    // stage.
    int page = 0, row = 0;
    box_of<T>(params, w, w.n_begin + w.n_blocks - 1, slot, box, page, row);
    for (int it = 0; it < w.n_blocks; ++it, ++pipe) {
      int const s = int(pipe % T::kStages);
      uint32_t const phase = (pipe / T::kStages) & 1;
      auto copy = [&](CUtensorMap const* map, int cols, int32_t shift_bits, int flat) {
        return [&, map, cols, shift_bits, flat](uint8_t* dst, uint64_t* full) {
          if (slot * box >= T::kBc) return;
          int2 const at = box_origin<kShift>(kv_head, shift_bits, flat);
          for (int cb = 0; cb < cols / 64; ++cb) {
            tma_load_4d(dst + (cb * T::kBc + slot * box) * 128, map, full, at.x + cb * 64, row,
                        at.y, page);
          }
        };
      };
      load_stage<T, T::kD>(sm.k_tiles, sm.k_full, sm.k_empty, s, phase, leader,
                           copy(&params.k_map, T::kD, params.k_shift, 0),
                           box_bytes<T>(T::kBc, T::kD, kShift ? exact_boxes<T>(params) : 0));
      load_stage<T, T::kDv>(sm.v_tiles, sm.v_full, sm.v_empty, s, phase, leader,
                            copy(&params.v_map, T::kDv, params.v_shift, params.v_flat_cols));
      if (it + 1 < w.n_blocks) {
        box_of<T>(params, w, w.n_begin + w.n_blocks - 2 - it, slot, box, page, row);
      }
    }
  });
}

// Run by the producer warpgroup's 128 threads (ptid = its thread index): a paged cache whose
// boxes would not be a multiple of 8 rows gathered (gather_kv), one in TMA boxes
// (load_paged_boxes), dense tensors and contiguous caches by TMA (load_contiguous). Three loops,
// not one with the layout's branches inside: in one, each path's values stayed live across the
// others' code in the producer's 24 or 40 registers. With the gather's values recomputed where
// used, the pages by Params::page_div and V's offsets held across the V wait (gather_kv), ptxas
// spilled in 39 of the default build's 131 bf16 sm90 functions instead of 76 (1520 bytes of
// stores instead of 3724), then in none once the gathered path's values were derived where used
// (gather_kv, for_each_tile; docs/performance.md sessions 70-72); the e4m3 converters spill none
// at 56. kShift: a narrow pair's TMA loads take its heads' column shifts (Params::k_shift,
// v_shift), V's map over a row's heads (v_flat_cols) and Q's and K's exact boxes (qk_box_cols,
// d 64's pairs only: exact_boxes); the launcher leaves all four 0 on gathered pages, and a
// launch with none of them runs the loops without them (the pairs at their own width, d 80 on
// (80, 80) and the like: 0.995x the base's speed that way, 0.991x through the shifting loops;
// H200, docs/performance.md session 73).
template <class T, bool kBounded, bool kShift>
__device__ __forceinline__ void load_tiles(Params const& params, Smem<T> const& sm,
                                           TileScheduler<T> const& sched, int ptid) {
  bool const leader = ptid == 0;
  if (params.kv_gather != 0) {
    if (leader) prefetch_maps(params);
    int64_t pipe = 0;
    for_each_tile<T, true>(params, sm, sched, true, leader, [&](Work const& w, int kv_head) {
      gather_kv<T, kBounded>(params, sm, w, kv_head, pipe);
      pipe += w.n_blocks;
    });
  } else if (params.p.layout == kLayoutPagedKv) {
    if (kShift && shifts_columns<T>(params)) {
      load_paged_boxes<T, kShift>(params, sm, sched, ptid);
    } else {
      load_paged_boxes<T, false>(params, sm, sched, ptid);
    }
  } else if (ptid < 32) {
    if (kShift && shifts_columns<T>(params)) {
      load_contiguous<T, kShift>(params, sm, sched, leader);
    } else {
      load_contiguous<T, false>(params, sm, sched, leader);
    }
  }
}

}  // namespace fa::cuda::sm90
