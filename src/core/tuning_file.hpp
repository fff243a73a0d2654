// The tuning file as bytes on disk: reading and writing it whole with the operating system's
// reason on failure, and its first line. Header-only, so the host tests check these without a
// GPU context (fa_context_load_tuning and fa_context_save_tuning need one).
#pragma once

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <string>
#include <string_view>
#include <system_error>

namespace fa {

namespace detail {
inline std::string os_reason(int err) {
  return std::error_code(err != 0 ? err : EIO, std::generic_category()).message();
}
}  // namespace detail

// Reads the file at `path` into *text. Returns "" on success, else the operating system's reason
// (*text untouched). A directory fails with EISDIR's reason: fopen opens one for reading on Linux,
// and an empty read would pass for an empty file.
inline std::string read_text_file(char const* path, std::string* text) {
  errno = 0;
  std::FILE* f = std::fopen(path, "rb");
  if (f == nullptr) return detail::os_reason(errno);
  struct stat st;
  errno = 0;
  if (fstat(fileno(f), &st) != 0 || S_ISDIR(st.st_mode)) {
    int const err = errno != 0 ? errno : EISDIR;
    std::fclose(f);
    return detail::os_reason(err);
  }
  std::string out;
  char buf[4096];
  errno = 0;
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
  bool const failed = std::ferror(f) != 0;
  int const err = errno;
  std::fclose(f);
  if (failed) return detail::os_reason(err);
  *text = std::move(out);
  return {};
}

// Replaces the file at `path` with `text`. Returns "" on success, else the operating system's
// reason.
inline std::string write_text_file(char const* path, std::string_view text) {
  errno = 0;
  std::FILE* f = std::fopen(path, "wb");
  if (f == nullptr) return detail::os_reason(errno);
  bool const written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  int err = written ? 0 : errno;
  if (std::fclose(f) != 0 && err == 0) err = errno != 0 ? errno : EIO;
  return written && err == 0 ? std::string() : detail::os_reason(err);
}

// The version of a tuning file's first line, exactly "<magic> <decimal digits>" (at most 9, so
// it fits int); -1 for any other line ("libflashattn-tuning 1x" is not version 1).
inline int tuning_file_version(std::string_view line, std::string_view magic) {
  if (line.size() <= magic.size() + 1 || line.substr(0, magic.size()) != magic ||
      line[magic.size()] != ' ') {
    return -1;
  }
  std::string_view const digits = line.substr(magic.size() + 1);
  if (digits.size() > 9) return -1;
  int version = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return -1;
    version = version * 10 + (c - '0');
  }
  return version;
}

}  // namespace fa
