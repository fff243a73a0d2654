// The sm90 tile scheduler's division by a launch's constants (src/cuda/sm90/fast_divmod.hpp)
// against / and % over its whole domain's edges: divisors and dividends in [1, 2^31).
#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "cuda/sm90/fast_divmod.hpp"

namespace fa::cuda::sm90 {

TEST_SUITE("family") {
  TEST_CASE("FastDivmod: n / d and n % d for every divisor class and the dividends' edges") {
    std::vector<int64_t> divisors;
    for (int64_t d = 1; d <= 3000; ++d) divisors.push_back(d);
    for (int k = 11; k <= 30; ++k) {
      for (int64_t e : {-1, 0, 1}) divisors.push_back((int64_t(1) << k) + e);
    }
    divisors.push_back((int64_t(1) << 31) - 1);
    std::mt19937_64 rng(20261128);
    for (int i = 0; i < 2000; ++i) divisors.push_back(int64_t(rng() % ((uint64_t(1) << 31) - 1)) + 1);
    int64_t const top = (int64_t(1) << 31) - 1;
    int64_t checked = 0, wrong = 0;
    for (int64_t d : divisors) {
      FastDivmod const f = FastDivmod::make(d);
      std::vector<int64_t> ns = {0, 1, d - 1, d, d + 1, 2 * d - 1, 2 * d, top, top - 1, top - d};
      for (int64_t m = top / d - 1; m <= top / d; ++m) ns.push_back(m * d + d - 1);
      for (int i = 0; i < 200; ++i) ns.push_back(int64_t(rng() % uint64_t(top + 1)));
      for (int64_t n : ns) {
        if (n < 0 || n > top) continue;
        uint32_t q = 0, r = 0;
        f.divmod(uint32_t(n), q, r);
        ++checked;
        if (int64_t(q) != n / d || int64_t(r) != n % d) {
          if (++wrong <= 5) MESSAGE(n << " / " << d << ": " << q << " rem " << r);
        }
      }
    }
    MESSAGE(checked << " divisions checked");
    CHECK(wrong == 0);
    CHECK(checked > 1000000);
  }

  TEST_CASE("FastDivmod: a divisor of 1 is the identity; the multiplier fits 32 bits") {
    FastDivmod const one = FastDivmod::make(1);
    CHECK(one.div(0x7fffffffu) == 0x7fffffffu);
    uint32_t q = 7, r = 7;
    one.divmod(12345u, q, r);
    CHECK(q == 12345u);
    CHECK(r == 0u);
    // Powers of two: multiplier 2^31, a shift of log2 d - 1 (d = 2^k: l = k).
    FastDivmod const p = FastDivmod::make(int64_t(1) << 20);
    CHECK(p.multiplier == 0x80000000u);
    CHECK(p.shift == 19u);
    CHECK(p.div(0x7fffffffu) == 0x7ffu);
  }
}

}  // namespace fa::cuda::sm90
