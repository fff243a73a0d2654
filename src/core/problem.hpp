// A validated attention problem: what every backend receives after the C API has checked fa_config.
#pragma once

#include <cstdint>

namespace fa {

// Values equal the public fa_dtype values.
enum class DType : int32_t { kFP16 = 1, kBF16 = 2, kFP32 = 3 };

constexpr int dtype_size(DType t) { return t == DType::kFP32 ? 4 : 2; }

// Element strides of one (batch, seq, head, dim) tensor; dim is contiguous.
struct TensorStrides {
  int64_t batch;
  int64_t seq;
  int64_t head;
};

// All fields resolved: softmax_scale is never 0 and packed-default strides are filled in.
struct Problem {
  DType dtype;
  bool causal;  // bottom-right aligned: key j is visible to query i iff j <= i + seqlen_k - seqlen_q
  int64_t batch;
  int64_t seqlen_q;
  int64_t seqlen_k;
  int64_t heads_q;
  int64_t heads_kv;  // heads_q % heads_kv == 0; query head h reads K/V head h / (heads_q / heads_kv)
  int64_t head_dim;
  float softmax_scale;
  TensorStrides q;
  TensorStrides k;
  TensorStrides v;
  TensorStrides o;
};

}  // namespace fa
