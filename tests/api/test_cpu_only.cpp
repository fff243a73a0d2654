// A CPU-only build (FA_CUDA=OFF) refuses GPU contexts with a status and a detail that say why and
// what runs instead; the CPU backend is the whole library.
#include <doctest/doctest.h>

#include <string>

#include "flashattn.h"

TEST_SUITE("api") {

TEST_CASE("a CPU-only build refuses GPU contexts and says so" * doctest::skip(FA_CUDA_BUILT)) {
  for (int device : {0, 1, 1 << 20}) {
    CAPTURE(device);
    fa_context_t* ctx = nullptr;
    CHECK(fa_context_create(device, &ctx) == FA_STATUS_NO_DEVICE);
    CHECK(ctx == nullptr);
    std::string const detail = fa_last_error_detail();
    CHECK(detail.find("device = " + std::to_string(device)) != std::string::npos);
    CHECK(detail.find("built without CUDA") != std::string::npos);
    CHECK(detail.find("FA_DEVICE_CPU") != std::string::npos);
  }
  CHECK(fa_kernel_count() == 0);
  fa_context_t* cpu = nullptr;
  REQUIRE(fa_context_create(FA_DEVICE_CPU, &cpu) == FA_STATUS_SUCCESS);
  fa_context_destroy(cpu);
}

}  // TEST_SUITE
