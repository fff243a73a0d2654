// Text helpers for the kernel names and the rules' messages (core/kernel_config.cpp and each
// family's config.cpp).
#pragma once

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace fa {

// printf into a std::string; every message of the rules fits the 256 bytes.
template <class... Args>
std::string fmt(char const* format, Args... args) {
  char buf[256];
  std::snprintf(buf, sizeof buf, format, args...);
  return buf;
}

// `s` without leading blanks and trailing blanks or line ends.
inline std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

// The parts of `s` between `sep`s (one part when there is none).
inline std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  for (;;) {
    size_t at = s.find(sep);
    parts.push_back(s.substr(0, at));
    if (at == std::string_view::npos) return parts;
    s.remove_prefix(at + 1);
  }
}

// Whether trimmed `s` is a whole int32 (written to *out).
inline bool parse_int(std::string_view s, int32_t* out) {
  s = trim(s);
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size() && !s.empty();
}

}  // namespace fa
