// The tuning file's bytes (src/core/tuning_file.hpp): what fa_context_load_tuning and
// fa_context_save_tuning report for files they cannot use, checked without a GPU context.
#include <doctest/doctest.h>

#include <cerrno>
#include <cstdio>
#include <string>
#include <system_error>

#include "core/tuning_file.hpp"

namespace {
std::string reason(int err) { return std::error_code(err, std::generic_category()).message(); }
}  // namespace

TEST_SUITE("core") {

// Defects 5 and 6: a directory read as an empty file, so loading one returned PARSE_ERROR ("not
// a libflashattn tuning file") instead of IO_ERROR, and no IO_ERROR said why.
TEST_CASE("tuning file: a directory or a missing file is an I/O error with the system's reason") {
  std::string text = "untouched";
  CHECK(fa::read_text_file(".", &text) == reason(EISDIR));
  CHECK(fa::read_text_file("no/such/tuning.txt", &text) == reason(ENOENT));
  CHECK(text == "untouched");
  CHECK(fa::write_text_file(".", "x") == reason(EISDIR));
  CHECK(fa::write_text_file("no/such/tuning.txt", "x") == reason(ENOENT));
}

TEST_CASE("tuning file: written bytes read back whole") {
  char const* path = "tuning_file_roundtrip.txt";
  std::string const body = "libflashattn-tuning 1\narch 80\n" + std::string(10000, '#') + "\n";
  REQUIRE(fa::write_text_file(path, body).empty());
  std::string text;
  CHECK(fa::read_text_file(path, &text).empty());
  CHECK(text == body);
  std::remove(path);
}

// "libflashattn-tuning 1x" was read as version 1 (operator>> stops at the x).
TEST_CASE("tuning file: the first line is exactly the magic and a decimal version") {
  char const* magic = "libflashattn-tuning";
  CHECK(fa::tuning_file_version("libflashattn-tuning 1", magic) == 1);
  CHECK(fa::tuning_file_version("libflashattn-tuning 12", magic) == 12);
  for (char const* bad : {"libflashattn-tuning 1x", "libflashattn-tuning", "libflashattn-tuning ",
                          "libflashattn-tuning  1", "libflashattn-tuning -1",
                          "libflashattn-tuning 1 ", "libflashattn-tuningx 1",
                          "libflashattn-tuning 99999999999", "libflashattn-tunin 1"}) {
    INFO(bad);
    CHECK(fa::tuning_file_version(bad, magic) == -1);
  }
}

}  // TEST_SUITE
