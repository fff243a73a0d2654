#include "cuda/registry.hpp"

namespace fa::cuda {

void register_generated_kernels(Registry& registry);  // generated: registry_generated.cpp

void add_kernel(Registry& registry, KernelEntry const& entry) {
  registry.emplace(entry.config, entry);
}

Registry const& registry() {
  // Function-local static: built once, thread-safely, on first use (no static-init-order reliance).
  static Registry const instance = [] {
    Registry r;
    register_generated_kernels(r);
    return r;
  }();
  return instance;
}

}  // namespace fa::cuda
