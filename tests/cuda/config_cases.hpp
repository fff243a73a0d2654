// Kernel configs for the families' config-rule tests (tests/cuda/sm*/test_config.cpp): host only,
// through the core dispatch (core/kernel_config.hpp) to each family's config.cpp.
#pragma once

#include <doctest/doctest.h>

#include <string>

#include "core/kernel_config.hpp"
#include "core/kernel_config_text.hpp"

namespace fa::test {

// `base` changed by `change`.
template <class Change>
KernelConfig with(KernelConfig base, Change change) {
  change(base);
  return base;
}

// Valid configs pass; each invalid one fails with a message naming the rule's field.
inline void check_valid(KernelConfig const& c) {
  INFO(short_name(c));
  CHECK(validate(c).empty());
}
inline void check_invalid(KernelConfig const& c, char const* field) {
  INFO(short_name(c) << ", field: " << field);
  std::string const why = validate(c);
  CHECK(!why.empty());
  CHECK(why.find(field) != std::string::npos);
}

// Whether the seed's autotune filter keeps `c`; a dropped config says the rule that dropped it.
inline bool kept(KernelConfig const& c) { return autotune_filter(c).empty(); }

// `name` parsed, checking that it parses.
inline KernelConfig parsed(std::string const& name) {
  KernelConfig c{};
  std::string error;
  INFO(name);
  REQUIRE(parse_short_name(name, &c, &error));
  return c;
}

}  // namespace fa::test
