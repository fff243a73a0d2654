// Arguments of one forward launch, shared by the host launcher and the kernels.
#pragma once

#include <cstdint>

namespace fa::cuda {

// Values of ForwardParams::layout (the public fa_layout values).
enum : int32_t { kLayoutDense = 0, kLayoutVarlen = 1, kLayoutKvCache = 2, kLayoutPagedKv = 3 };

struct ForwardParams {
  void const* __restrict__ q;
  void const* __restrict__ k;
  void const* __restrict__ v;
  void* __restrict__ o;
  float* __restrict__ lse;  // nullable; [batch, heads_q, seqlen_q], or [heads_q, total_q] (varlen)
  int64_t q_batch_stride, q_seq_stride, q_head_stride;  // elements
  int64_t k_batch_stride, k_seq_stride, k_head_stride;  // a paged cache's batch stride is per page
  int64_t v_batch_stride, v_seq_stride, v_head_stride;
  int64_t o_batch_stride, o_seq_stride, o_head_stride;
  int32_t seqlen_q;        // dense: every sequence's; varlen: the upper bound (max_seqlen_q)
  int32_t seqlen_k;        // dense: every sequence's; varlen: the bound; caches: the capacity
  int32_t heads_q;
  int32_t batch;           // sequences (the sm90 family's tensor maps span them)
  int32_t q_heads_per_kv;  // heads_q / heads_kv
  // With pack_gqa the q_heads_per_kv query heads of one K/V head share a tile: tile row r is
  // query r / q_heads_per_kv of head kv_head * q_heads_per_kv + r % q_heads_per_kv, so K and V
  // are read once for all of them (decode). Else a tile holds rows of one query head.
  int32_t pack_gqa;
  int32_t head_units;      // heads_kv when packed, else heads_q
  int32_t n_q_blocks;      // ceil(rows per sequence / B_r); rows = seqlen_q (x q_heads_per_kv packed)
  int32_t num_splits;      // >= 1; the grid is n_q_blocks * head_units * num_splits * batch blocks

  // Batch layout and its run-time index tensors (clamped on use: never trusted).
  int32_t layout;
  int32_t const* __restrict__ cu_seqlens_q;   // varlen: batch + 1
  int32_t const* __restrict__ cu_seqlens_k;   // varlen: batch + 1
  int32_t const* __restrict__ cache_seqlens;  // caches: batch
  int32_t const* __restrict__ block_table;    // paged: batch x max_pages_per_seq
  int32_t total_q;
  int32_t total_k;
  int32_t num_pages;
  int32_t page_size;
  int32_t max_pages_per_seq;

  // Masks: key j is visible to query i (of a sequence with sq queries, sk keys) iff
  // i + sk - sq - window_left <= j <= i + sk - sq + window_right and j < sk. Unbounded sides
  // and causal are folded in by the host (unbounded = 2^40; causal caps window_right at 0).
  int64_t window_left;
  int64_t window_right;
  int32_t masked;          // 0 when neither causal nor a window restricts any key

  // Scores. Without `transform`, softmax runs on raw scores with the scale folded into exp2
  // (score_scale_log2 = softmax_scale * log2 e; needs softmax_scale > 0). With it, each score is
  // first rewritten in place as log2 e * bias(softcap(softmax_scale * s)) and
  // score_scale_log2 = 1.
  int32_t transform;
  float softmax_scale;
  float score_scale_log2;
  float lse_scale;         // multiplies the running max (in the units above) into natural log
  float softcap;           // 0 = off
  float inv_softcap;
  int32_t alibi;           // 0 none, 1 per head, 2 per batch and head
  float const* __restrict__ alibi_slopes;
  float const* __restrict__ sinks;  // nullable; heads_q natural-log logits

  // Split-KV: with num_splits > 1 each block writes its normalised fp32 O and natural-log LSE
  // for its share of the keys to o_partial [num_splits, rows, heads_q, d] and
  // lse_partial [num_splits, heads_q, rows] (rows = batch * seqlen_q, or total_q), and the
  // combine kernel writes o and lse (and adds the sinks).
  float* __restrict__ o_partial;
  float* __restrict__ lse_partial;
  int32_t partial_rows;

  // The problem's head dims (Q and K; V and O), at most the kernel's, head_dim_v <= head_dim:
  // the columns past them are zero-filled on load and never written; the split partials' rows
  // hold head_dim_v floats.
  int32_t head_dim;
  int32_t head_dim_v;

  // An e4m3 (FP8) K/V cache with 16-bit queries (both families' fp8_kv_tile kernels):
  // scores are k_descale * (q . k), O is v_descale * (P V). The descales are one float each, or
  // with descale_per_head one per (sequence, K/V head) (batch x heads_kv); NULL reads 1.
  int32_t kv_e4m3;
  int32_t descale_per_head;
  float const* __restrict__ k_descale;
  float const* __restrict__ v_descale;

  // The mma.sync decode tiles' key split (kernel.cuh's kKeySplit): every query row of every tile
  // fits one warp's 16 rows, so the warps share each key block instead of the rows.
  int32_t key_split;

  // e4m3 queries (the sm90 family's FP8 kernels, whose K and V are e4m3 too): scores are
  // q_descale * k_descale * (q . k), indexed as k_descale; o is bf16 (o_bf16 = 1) or fp16.
  float const* __restrict__ q_descale;
  int32_t o_bf16;

  // The sm90 family's FP8 kernels on dense and varlen problems: V transposed ahead of the run
  // into the caller's workspace (sm90/v_images.cuh), each key block as the image of a V stage
  // the producer copies as it is, v_image_blocks per (sequence, K/V head) (varlen: slots per K/V
  // head, v_images.cuh's v_image_index); NULL when the kernel's producer transposes V itself (no
  // such workspace given, or a problem the schedule leaves to it).
  void* __restrict__ v_images;
  int32_t v_image_blocks;
};

}  // namespace fa::cuda
