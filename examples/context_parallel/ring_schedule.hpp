// Ring attention over N ranks (context parallelism), written once for every way it runs: the
// NCCL example (ring_attention.cpp, one process per GPU), the one-process simulation
// (simulate_ring below: every rank's work in turn, on any fa context: the CPU backend in CI, one
// GPU on the device) and, mirrored line for line, ring_schedule.py.
//
// The sequence (seqlen rows) is cut into chunks and each rank holds the same rows of Q, K and V:
//   - contiguous: N chunks, rank r holds chunk r;
//   - zigzag: 2N chunks, rank r holds chunks r and 2N-1-r. Under a causal mask a rank's early chunk
//     meets few keys and its late chunk many, so every rank gets the same number of visible
//     (query, key) pairs (to one chunk's rounding), where contiguous shards leave rank N-1 with
//     2N-1 times the work of rank 0.
// Chunk lengths differ by at most one row (seqlen need not be a multiple of the chunk count).
// At step t (0 <= t < N) rank r holds the K/V shard of rank (r - t) mod N: its own at step 0, then
// each step passes the held shard to rank r+1 and receives one from rank r-1. For each of its Q
// chunks and each chunk of the held K/V shard the mask is decided by their global positions:
// keys wholly before the queries: full attention; the same chunk: causal (equal lengths, so the
// library's bottom-right mask is the diagonal); keys wholly after: skipped. Partial results of a
// Q chunk are merged with fa_merge_states in step order (their LSE-weighted combination).
//
// Header-only, C++17, needs only flashattn.h: no CUDA, no NCCL.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "flashattn.h"

namespace ring {

enum class Layout { contiguous, zigzag };

// Rows [begin, begin + length) of the global sequence.
struct Chunk {
  int64_t begin = 0;
  int64_t length = 0;
};

// One attention call of a step: the rows [q_offset, q_offset + q_length) of the rank's Q shard
// (its local chunk q_chunk) against the rows [kv_offset, kv_offset + kv_length) of the held K/V
// shard. `first`: no earlier call wrote this Q chunk, so the result goes straight into the
// accumulator; otherwise into scratch, then merged into it.
struct Work {
  int q_chunk = 0;
  int64_t q_offset = 0;
  int64_t q_length = 0;
  int64_t kv_offset = 0;
  int64_t kv_length = 0;
  bool causal = false;
  bool first = false;
};

class Schedule {
 public:
  Schedule(int64_t seqlen, int world, Layout layout, bool causal)
      : seqlen_(seqlen), world_(world), layout_(layout), causal_(causal) {
    const int64_t chunks = layout == Layout::zigzag ? 2 * int64_t{world} : int64_t{world};
    if (world < 1 || seqlen < chunks) {
      throw std::invalid_argument("ring::Schedule: need world >= 1 and seqlen (" +
                                  std::to_string(seqlen) + ") >= the chunk count (" +
                                  std::to_string(chunks) + ")");
    }
  }

  int world() const { return world_; }
  bool causal() const { return causal_; }
  Layout layout() const { return layout_; }
  int64_t seqlen() const { return seqlen_; }

  // Global chunk c of `count`: the first seqlen % count chunks get one row more.
  Chunk global_chunk(int64_t c) const {
    const int64_t count = layout_ == Layout::zigzag ? 2 * int64_t{world_} : int64_t{world_};
    const int64_t base = seqlen_ / count;
    const int64_t extra = seqlen_ % count;
    return Chunk{c * base + (c < extra ? c : extra), base + (c < extra ? 1 : 0)};
  }

  // The chunks rank r holds, in the order its shard stores them.
  std::vector<Chunk> chunks(int rank) const {
    if (layout_ == Layout::contiguous) {
      return {global_chunk(rank)};
    }
    return {global_chunk(rank), global_chunk(2 * int64_t{world_} - 1 - rank)};
  }

  int64_t shard_length(int rank) const {
    int64_t n = 0;
    for (const Chunk& c : chunks(rank)) {
      n += c.length;
    }
    return n;
  }

  int64_t max_shard_length() const {
    int64_t n = 0;
    for (int r = 0; r < world_; ++r) {
      n = shard_length(r) > n ? shard_length(r) : n;
    }
    return n;
  }

  // Whose K/V shard rank r holds at step t.
  int kv_origin(int rank, int step) const { return ((rank - step) % world_ + world_) % world_; }

  // The attention calls of rank r at step t, in the order they run. Adjacent K/V chunks that a Q
  // chunk sees in full become one call (zigzag: a late Q chunk against both chunks of a shard
  // from a higher rank), since without a position-dependent bias key order does not matter.
  std::vector<Work> work(int rank, int step) const {
    bool written[2] = {false, false};  // per local Q chunk: by an earlier call
    for (int t = 0; t < step; ++t) {
      for (const Work& e : raw_work(rank, t)) {
        written[e.q_chunk] = true;
      }
    }
    std::vector<Work> out = raw_work(rank, step);
    for (Work& w : out) {
      w.first = !written[w.q_chunk];
      written[w.q_chunk] = true;
    }
    return out;
  }

 private:
  std::vector<Work> raw_work(int rank, int step) const {
    const std::vector<Chunk> q = chunks(rank);
    const std::vector<Chunk> kv = chunks(kv_origin(rank, step));
    std::vector<Work> out;
    int64_t q_offset = 0;
    for (size_t i = 0; i < q.size(); ++i) {
      int64_t kv_offset = 0;
      for (const Chunk& k : kv) {
        const bool before = k.begin + k.length <= q[i].begin;
        const bool same = k.begin == q[i].begin;
        if (!causal_ || before || same) {
          const bool causal = causal_ && same;
          Work* last = out.empty() ? nullptr : &out.back();
          if (last != nullptr && last->q_chunk == static_cast<int>(i) && !last->causal && !causal &&
              last->kv_offset + last->kv_length == kv_offset) {
            last->kv_length += k.length;
          } else {
            out.push_back(Work{static_cast<int>(i), q_offset, q[i].length, kv_offset, k.length,
                               causal, false});
          }
        }
        kv_offset += k.length;
      }
      q_offset += q[i].length;
    }
    return out;
  }

  int64_t seqlen_;
  int world_;
  Layout layout_;
  bool causal_;
};

// The problem every rank shares: batch, heads, head_dim, dtype and scale (sequence lengths come
// from the schedule).
struct Problem {
  // FA_DTYPE_FP16, BF16 or FP32: o and the merges take the inputs' type (e4m3 inputs, which
  // write a 16-bit o, are refused).
  int dtype = FA_DTYPE_BF16;
  int64_t batch = 1;
  int64_t heads_q = 1;
  int64_t heads_kv = 1;
  int64_t head_dim = 1;
  float softmax_scale = 0.0f;
};

// One rank's buffers, all packed (dense [batch, rows, heads, head_dim]; LSE [batch, heads, rows]):
//   q, o:        its shard, shard_length(rank) rows;
//   k, v:        the held K/V shard, shard_length(kv_origin(rank, step)) rows;
//   o_scratch:   shard_length(rank) rows (a call's result before it is merged; the rows of one
//                Q chunk at its offset, so that accumulator and scratch share strides);
//   lse[c]:      the accumulated LSE of local chunk c, chunks(rank)[c].length rows;
//   lse_scratch: the longest local chunk's rows.
struct RankBuffers {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  void* o_scratch = nullptr;
  float* lse[2] = {nullptr, nullptr};
  float* lse_scratch = nullptr;
};

// The bytes of one element of q, k, v and o; 0 for a dtype the ring does not run (Problem).
inline size_t dtype_bytes(int dtype) {
  return dtype == FA_DTYPE_FP32 ? 4 : dtype == FA_DTYPE_FP16 || dtype == FA_DTYPE_BF16 ? 2 : 0;
}

// Runs rank r's step t: its attention calls and merges, on `stream` (NULL on a CPU context).
// Returns the first failing status (fa_last_error_detail() says why) or FA_STATUS_SUCCESS; a
// Problem::dtype the ring does not run is FA_STATUS_INVALID_ARGUMENT before anything is read
// (the library's message is then not about it).
inline fa_status run_step(fa_context_t* ctx, fa_stream_t stream, const Schedule& s,
                          const Problem& p, int rank, int step, const RankBuffers& b) {
  if (dtype_bytes(p.dtype) == 0) return FA_STATUS_INVALID_ARGUMENT;
  const int64_t q_rows = s.shard_length(rank);
  const int64_t kv_rows = s.shard_length(s.kv_origin(rank, step));
  const int64_t d = p.head_dim;
  const size_t elem = dtype_bytes(p.dtype);
  for (const Work& w : s.work(rank, step)) {
    fa_config c;
    fa_config_init(&c);
    c.dtype = p.dtype;
    c.causal = w.causal ? 1 : 0;
    c.batch = p.batch;
    c.seqlen_q = w.q_length;
    c.seqlen_k = w.kv_length;
    c.heads_q = p.heads_q;
    c.heads_kv = p.heads_kv;
    c.head_dim = d;
    c.softmax_scale = p.softmax_scale;
    // Views of sub-ranges of packed shards: the batch stride is the whole shard's.
    c.q_batch_stride = c.o_batch_stride = q_rows * p.heads_q * d;
    c.q_seq_stride = c.o_seq_stride = p.heads_q * d;
    c.q_head_stride = c.o_head_stride = d;
    c.k_batch_stride = c.v_batch_stride = kv_rows * p.heads_kv * d;
    c.k_seq_stride = c.v_seq_stride = p.heads_kv * d;
    c.k_head_stride = c.v_head_stride = d;
    const size_t q_at = static_cast<size_t>(w.q_offset * p.heads_q * d) * elem;
    const size_t kv_at = static_cast<size_t>(w.kv_offset * p.heads_kv * d) * elem;
    const auto* q = static_cast<const unsigned char*>(b.q) + q_at;
    const auto* k = static_cast<const unsigned char*>(b.k) + kv_at;
    const auto* v = static_cast<const unsigned char*>(b.v) + kv_at;
    auto* acc = static_cast<unsigned char*>(b.o) + q_at;
    auto* scratch = static_cast<unsigned char*>(b.o_scratch) + q_at;
    float* acc_lse = b.lse[w.q_chunk];
    fa_status st = fa_forward(ctx, &c, q, k, v, w.first ? acc : scratch,
                              w.first ? acc_lse : b.lse_scratch, stream);
    if (st != FA_STATUS_SUCCESS) {
      return st;
    }
    if (w.first) {
      continue;
    }
    fa_merge_config m;
    fa_merge_config_init(&m);
    m.dtype = p.dtype;
    m.batch = p.batch;
    m.seqlen = w.q_length;
    m.heads = p.heads_q;
    m.head_dim = d;
    m.o_batch_stride = c.o_batch_stride;
    m.o_seq_stride = c.o_seq_stride;
    m.o_head_stride = c.o_head_stride;
    st = fa_merge_states(ctx, &m, acc, acc_lse, scratch, b.lse_scratch, acc, acc_lse, stream);
    if (st != FA_STATUS_SUCCESS) {
      return st;
    }
  }
  return FA_STATUS_SUCCESS;
}

// Element offset of row `row` of a packed [batch, rows, heads, head_dim] tensor, batch 0.
inline int64_t row_elems(int64_t row, int64_t heads, int64_t head_dim) {
  return row * heads * head_dim;
}

// Copies rank r's rows of a packed [batch, seqlen, heads, head_dim] tensor into (to_shard) or out
// of (!to_shard) its packed shard [batch, shard_length(r), heads, head_dim], one contiguous copy
// per (batch, chunk). `copy(dst, src, bytes)` is memcpy on the host, cudaMemcpy on a GPU.
template <class Copy>
void shard_rows(const Schedule& s, int rank, int64_t batch, int64_t heads, int64_t head_dim,
                size_t elem, const void* from, void* to, bool to_shard, Copy&& copy) {
  const int64_t rows = s.shard_length(rank);
  for (int64_t bi = 0; bi < batch; ++bi) {
    int64_t local = 0;
    for (const Chunk& c : s.chunks(rank)) {
      const int64_t global_at = bi * s.seqlen() + c.begin;
      const int64_t local_at = bi * rows + local;
      const int64_t src_row = to_shard ? global_at : local_at;
      const int64_t dst_row = to_shard ? local_at : global_at;
      const size_t bytes = static_cast<size_t>(row_elems(c.length, heads, head_dim)) * elem;
      copy(static_cast<unsigned char*>(to) + row_elems(dst_row, heads, head_dim) * elem,
           static_cast<const unsigned char*>(from) + row_elems(src_row, heads, head_dim) * elem,
           bytes);
      local += c.length;
    }
  }
}

// The ring on one process: every rank's shards cut from packed full tensors q [batch, seqlen,
// heads_q, d], k and v [batch, seqlen, heads_kv, d]; all ranks run step 0, then step 1, ..., each
// reading the K/V shard it would hold (the shard of kv_origin(rank, step): the bytes the ring
// would have delivered); the ranks' outputs are written back into o (packed like q) and lse
// ([batch, heads_q, seqlen], float32). Memory comes from `alloc(bytes)` (returning a pointer
// that stays valid until `release`), copies from `copy`, so the same code runs on host memory (CPU
// context) and device memory (GPU context). Returns the first failing status (as run_step: a
// dtype the ring does not run is refused before any shard is copied).
template <class Alloc, class Release, class Copy>
fa_status simulate_ring(fa_context_t* ctx, const Schedule& s, const Problem& p, const void* q,
                        const void* k, const void* v, void* o, float* lse, Alloc&& alloc,
                        Release&& release, Copy&& copy) {
  if (dtype_bytes(p.dtype) == 0) return FA_STATUS_INVALID_ARGUMENT;
  const int n = s.world();
  const size_t elem = dtype_bytes(p.dtype);
  const int64_t d = p.head_dim;
  std::vector<void*> owned;
  auto take = [&](size_t bytes) {
    owned.push_back(alloc(bytes));
    return owned.back();
  };
  std::vector<RankBuffers> ranks(static_cast<size_t>(n));
  std::vector<const void*> k_shard(static_cast<size_t>(n)), v_shard(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    const auto rows = static_cast<size_t>(p.batch * s.shard_length(r));
    const size_t q_bytes = rows * static_cast<size_t>(p.heads_q * d) * elem;
    const size_t kv_bytes = rows * static_cast<size_t>(p.heads_kv * d) * elem;
    RankBuffers& b = ranks[static_cast<size_t>(r)];
    void* qs = take(q_bytes);
    void* ks = take(kv_bytes);
    void* vs = take(kv_bytes);
    shard_rows(s, r, p.batch, p.heads_q, d, elem, q, qs, true, copy);
    shard_rows(s, r, p.batch, p.heads_kv, d, elem, k, ks, true, copy);
    shard_rows(s, r, p.batch, p.heads_kv, d, elem, v, vs, true, copy);
    b.q = qs;
    k_shard[static_cast<size_t>(r)] = ks;
    v_shard[static_cast<size_t>(r)] = vs;
    b.o = take(q_bytes);
    b.o_scratch = take(q_bytes);
    const std::vector<Chunk> chunks = s.chunks(r);
    int64_t longest = 0;
    for (size_t c = 0; c < chunks.size(); ++c) {
      b.lse[c] = static_cast<float*>(
          take(static_cast<size_t>(p.batch * p.heads_q * chunks[c].length) * sizeof(float)));
      longest = chunks[c].length > longest ? chunks[c].length : longest;
    }
    b.lse_scratch = static_cast<float*>(
        take(static_cast<size_t>(p.batch * p.heads_q * longest) * sizeof(float)));
  }
  fa_status st = FA_STATUS_SUCCESS;
  for (int t = 0; t < n && st == FA_STATUS_SUCCESS; ++t) {
    for (int r = 0; r < n && st == FA_STATUS_SUCCESS; ++r) {
      RankBuffers& b = ranks[static_cast<size_t>(r)];
      b.k = k_shard[static_cast<size_t>(s.kv_origin(r, t))];
      b.v = v_shard[static_cast<size_t>(s.kv_origin(r, t))];
      st = run_step(ctx, nullptr, s, p, r, t, b);
    }
  }
  for (int r = 0; r < n && st == FA_STATUS_SUCCESS; ++r) {
    const RankBuffers& b = ranks[static_cast<size_t>(r)];
    shard_rows(s, r, p.batch, p.heads_q, d, elem, b.o, o, false, copy);
    // LSE [batch, heads, chunk rows] per chunk into [batch, heads, seqlen].
    const std::vector<Chunk> chunks = s.chunks(r);
    for (size_t c = 0; c < chunks.size(); ++c) {
      for (int64_t bh = 0; bh < p.batch * p.heads_q; ++bh) {
        copy(lse + bh * s.seqlen() + chunks[c].begin, b.lse[c] + bh * chunks[c].length,
             static_cast<size_t>(chunks[c].length) * sizeof(float));
      }
    }
  }
  for (void* ptr : owned) {
    release(ptr);
  }
  return st;
}

}  // namespace ring
