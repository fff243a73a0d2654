#include <doctest/doctest.h>

#include <cstddef>

extern "C" int fa_test_c_api_use(char* msg, size_t msg_size);

TEST_SUITE("api") {

TEST_CASE("the API works from a C99 translation unit") {
  char msg[512] = "";
  int result = fa_test_c_api_use(msg, sizeof msg);
  INFO(msg);
  CHECK(result == 0);
}

}  // TEST_SUITE
