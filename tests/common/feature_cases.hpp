// The matrix of inference-feature cases both backends are tested on: every feature alone and
// combined with causal, GQA ratios 1/2/4/8, seqlen_q != seqlen_k, awkward lengths, page sizes
// 1/3/16/64/256, caches row-major and head-major, zero-length varlen sequences, and forced /
// automatic split counts.
#pragma once

#include <vector>

#include "common/features.hpp"

namespace fa_test {

// head_dim: 64 on the CPU (any works there); the GPU tests pass each compiled head dim.
// `long_keys` is the longest key length (the CPU tests keep it short: the float64 reference costs
// O(rows x keys x d)).
inline std::vector<FeatureCase> feature_cases(int dtype, int64_t head_dim, int64_t long_keys) {
  std::vector<FeatureCase> cases;
  auto add = [&](FeatureCase c) {
    c.dtype = dtype;
    c.head_dim = head_dim;
    cases.push_back(c);
  };
  const int64_t gqa[][2] = {{4, 4}, {4, 2}, {8, 2}, {8, 1}};  // ratios 1, 2, 4, 8
  // Masks and biases on dense problems, alone and with causal, over GQA ratios and lengths.
  const int64_t lengths[][2] = {{1, 1}, {17, 177}, {177, 17}, {100, long_keys}, {64, 64}};
  for (int causal = 0; causal < 2; ++causal) {
    for (int g = 0; g < 4; ++g) {
      for (const auto& len : lengths) {
        FeatureCase base;
        base.heads_q = gqa[g][0];
        base.heads_kv = gqa[g][1];
        base.sq = {len[0], len[0]};
        base.sk = {len[1], len[1]};
        base.causal = causal != 0;
        FeatureCase w = base;  // a window of both sides
        w.window = true;
        w.left = 37;
        w.right = 5;
        add(w);
        FeatureCase wl = base;  // left only (the local attention of Mistral / Gemma)
        wl.window = true;
        wl.left = 64;
        wl.right = -1;
        add(wl);
        FeatureCase sc = base;
        sc.softcap = 2.5f;
        sc.scale = 1.0f;  // scores up to ~head_dim: softcap actually bends them
        add(sc);
        FeatureCase al = base;
        al.alibi = g % 2 == 0 ? FA_ALIBI_PER_HEAD : FA_ALIBI_PER_BATCH;
        add(al);
        FeatureCase sk = base;
        sk.sinks = true;
        add(sk);
        FeatureCase all = base;  // everything at once
        all.window = true;
        all.left = 50;
        all.right = 20;
        all.softcap = 5.0f;
        all.alibi = FA_ALIBI_PER_HEAD;
        all.sinks = true;
        all.scale = -0.1f;  // a negative scale runs everywhere
        add(all);
      }
    }
  }
  // Variable-length batches, zero-length sequences included, with masks.
  for (int g = 0; g < 4; ++g) {
    for (int causal = 0; causal < 2; ++causal) {
      FeatureCase v;
      v.layout = FA_LAYOUT_VARLEN;
      v.heads_q = gqa[g][0];
      v.heads_kv = gqa[g][1];
      v.sq = {17, 0, 177, 1, 64, 5};
      v.sk = {33, 12, 177, 0, 300, 5};
      v.causal = causal != 0;
      add(v);
      v.window = true;
      v.left = 20;
      v.right = 3;
      v.sinks = true;
      add(v);
    }
  }
  // KV caches, contiguous and paged, decode (sq 1) and speculative (sq 4, 16) and chunked
  // prefill (sq 77), page sizes 1, 3, 16, 64, 256, with forced and automatic splits.
  const int64_t pages[] = {0, 1, 3, 16, 64, 256};
  const int splits[] = {1, 3, 0};
  for (int64_t page : pages) {
    for (int g = 0; g < 4; ++g) {
      for (int64_t sq : {1, 4, 16, 77}) {
        FeatureCase k;
        k.layout = page == 0 ? FA_LAYOUT_KV_CACHE : FA_LAYOUT_PAGED_KV;
        k.page_size = page;
        k.heads_q = gqa[g][0];
        k.heads_kv = gqa[g][1];
        k.sq = {sq, sq, sq};
        k.sk = {long_keys, 77, 0};
        k.sk[2] = sq > 1 ? sq : 1;  // causal needs sk >= sq to see anything; 1 key still is
        k.causal = sq > 1;
        k.num_splits = splits[(g + static_cast<int>(sq)) % 3];
        add(k);
        // The same caches head-major (Hugging Face's static cache, FlashInfer's HND pages):
        // decode and chunked prefill, pages read in TMA boxes (16, 64) and gathered (3).
        if (g == 1 && (sq == 1 || sq == 77) && page != 1 && page != 256) {
          FeatureCase h = k;
          h.head_major = true;
          add(h);
        }
        if (g == 2) {
          k.window = true;
          k.left = 100;
          k.right = -1;
          k.alibi = FA_ALIBI_PER_BATCH;
          k.sinks = true;
          add(k);
        }
      }
    }
  }
  return cases;
}

}  // namespace fa_test
