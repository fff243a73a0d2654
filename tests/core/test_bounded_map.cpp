// fa::BoundedMap, the bounded cache behind a context's built-in kernel choices.
#include <doctest/doctest.h>

#include <string>

#include "core/bounded_map.hpp"

TEST_SUITE("core") {

TEST_CASE("BoundedMap keeps at most its capacity and finds what it holds") {
  fa::BoundedMap<int, std::string> map(3);
  CHECK(map.capacity() == 3);
  CHECK(map.find(1) == nullptr);
  for (int k = 1; k <= 3; ++k) map.insert(k, std::to_string(10 * k));
  REQUIRE(map.size() == 3);
  for (int k = 1; k <= 3; ++k) {
    REQUIRE(map.find(k) != nullptr);
    CHECK(*map.find(k) == std::to_string(10 * k));
  }

  SUBCASE("a present key is kept, not replaced, and does not empty a full map") {
    map.insert(2, "other");
    CHECK(map.size() == 3);
    CHECK(*map.find(2) == "20");
  }
  SUBCASE("a new key into a full map empties it first") {
    map.insert(4, "40");
    CHECK(map.size() == 1);
    CHECK(map.find(1) == nullptr);
    CHECK(map.find(3) == nullptr);
    REQUIRE(map.find(4) != nullptr);
    CHECK(*map.find(4) == "40");
  }
  SUBCASE("never-repeating keys stay within the bound") {
    for (int k = 100; k < 1100; ++k) {
      map.insert(k, "x");
      CHECK(map.size() <= 3);
      CHECK(map.find(k) != nullptr);
    }
  }
}

TEST_CASE("BoundedMap of capacity 0 holds one entry") {
  fa::BoundedMap<int, int> map(0);
  map.insert(7, 70);
  CHECK(map.size() == 1);
  map.insert(8, 80);
  CHECK(map.size() == 1);
  CHECK(map.find(7) == nullptr);
  CHECK(*map.find(8) == 80);
}

}  // TEST_SUITE
