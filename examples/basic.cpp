// libflashattn from C++17 through include/flashattn.hpp: causal grouped-query attention in
// float32 on the CPU backend, a plan run twice, and an error caught with its status and detail.
//
//   build/examples/flashattn_cpp_example
#include <cmath>
#include <cstdio>
#include <vector>

#include "flashattn.hpp"

int main() {
  namespace fa = flashattn;
  int const batch = 2, seq_q = 64, seq_k = 96, heads_q = 8, heads_kv = 2, dim = 64;
  std::vector<float> q(size_t(batch) * seq_q * heads_q * dim), o(q.size());
  std::vector<float> k(size_t(batch) * seq_k * heads_kv * dim), v(k.size());
  for (size_t i = 0; i < q.size(); ++i) q[i] = std::sin(0.37f * float(i));
  for (size_t i = 0; i < k.size(); ++i) k[i] = std::cos(0.23f * float(i)), v[i] = std::sin(0.11f * float(i));

  try {
    fa::Context ctx = fa::Context::cpu();  // fa::Context(0) for GPU 0, with device buffers
    auto const Q = fa::Tensor<float>::packed(q.data(), batch, seq_q, heads_q, dim);
    auto const K = fa::Tensor<float>::packed(k.data(), batch, seq_k, heads_kv, dim);
    auto const V = fa::Tensor<float>::packed(v.data(), batch, seq_k, heads_kv, dim);
    auto const O = fa::Tensor<float>::packed(o.data(), batch, seq_q, heads_q, dim);

    // One-shot: dtype, sizes and strides come from the tensors; options from the lambda.
    ctx.forward(Q, K, V, O, nullptr, [](fa::Config& c) { c.causal(); });
    double const first = o[0];

    // A plan validates once; each run only computes (the plan is freed before the context).
    fa::Config config = fa::Config::attention<float>(Q, K, V, O);
    config.causal();
    fa::Plan plan = ctx.plan(config);
    plan.run(q.data(), k.data(), v.data(), o.data());
    std::printf("libflashattn %s from C++: causal GQA forward on the CPU, o[0] = %.6f (%s)\n",
                fa::version().c_str(), o[0], first == o[0] ? "plan and one-shot agree" : "MISMATCH");

    // Errors are flashattn::Error, with the C API's status and detail.
    config.raw().heads_kv = 3;  // 8 query heads cannot share 3 K/V heads
    ctx.plan(config);
    return 1;
  } catch (fa::Error const& e) {
    std::printf("caught as expected: %s (status %d)\n", e.what(), int(e.status()));
    return e.status() == FA_STATUS_INVALID_ARGUMENT ? 0 : 1;
  }
}
