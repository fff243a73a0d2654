// A CUDA build on a machine without an NVIDIA driver: GPU contexts are refused with a detail that
// says no driver was found and that the CPU backend runs (not the runtime's "CUDA driver version
// is insufficient", which reads as "update the driver").
#include <dlfcn.h>
#include <doctest/doctest.h>

#include <string>

#include "flashattn.h"

namespace {

bool driver_loads() {
  void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (driver == nullptr) return false;
  dlclose(driver);
  return true;
}

}  // namespace

TEST_SUITE("api") {

TEST_CASE("without a driver, GPU contexts say no NVIDIA driver was found" *
          doctest::skip(!FA_CUDA_BUILT || driver_loads())) {
  fa_context_t* ctx = nullptr;
  CHECK(fa_context_create(0, &ctx) == FA_STATUS_NO_DEVICE);
  CHECK(ctx == nullptr);
  std::string const detail = fa_last_error_detail();
  CHECK(detail.find("device = 0") != std::string::npos);
  CHECK(detail.find("no NVIDIA driver was found") != std::string::npos);
  CHECK(detail.find("FA_DEVICE_CPU") != std::string::npos);
}

}  // TEST_SUITE
