// Error construction shared by every layer: messages name the op and argument and end with file:line.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>
#include <type_traits>

#include "flashgdn/flashgdn.hpp"

namespace flashgdn::detail {

// Message pieces are appended without iostreams: an error path must not depend on the locale machinery of
// whatever C++ runtime the host process loaded (a Python extension shares the interpreter's process with torch).
inline void append_piece(std::string& s, std::string_view v) {
  s.append(v.data(), v.size());
}
inline void append_piece(std::string& s, const char* v) {
  s.append(v ? v : "(null)");
}
inline void append_piece(std::string& s, const std::string& v) {
  s.append(v);
}
inline void append_piece(std::string& s, char v) {
  s.push_back(v);
}
inline void append_piece(std::string& s, const void* v) {  // an address, as 0x...
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%p", v);
  s.append(buf);
}
inline void append_piece(std::string& s, bool v) {
  s.append(v ? "true" : "false");
}
template <class T, std::enable_if_t<std::is_integral_v<T>, int> = 0>
void append_piece(std::string& s, T v) {
  s.append(std::to_string(v));
}
template <class T, std::enable_if_t<std::is_floating_point_v<T>, int> = 0>
void append_piece(std::string& s, T v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", double(v));
  s.append(buf);
}
template <class T, std::enable_if_t<std::is_enum_v<T>, int> = 0>
void append_piece(std::string& s, T v) {
  s.append(std::to_string(static_cast<long long>(v)));
}

template <class... Args>
std::string str_cat(const Args&... args) {
  std::string s;
  (append_piece(s, args), ...);
  return s;
}

inline const char* short_file(const char* f) {
  // Keep the path from "src/" on, so messages do not carry the build machine's directories.
  std::string s(f);
  auto pos = s.rfind("src/");
  return pos == std::string::npos ? f : f + pos;
}

template <class... Args>
Status make_status(StatusCode code, const char* file, int line, const Args&... args) {
  return Status(code, str_cat(args..., " (", short_file(file), ":", line, ")"));
}

}  // namespace flashgdn::detail

// FGDN_ERROR(code, parts...) -> Status whose message is the concatenation of parts plus file:line.
#define FGDN_ERROR(code, ...) \
  ::flashgdn::detail::make_status(::flashgdn::StatusCode::code, __FILE__, __LINE__, __VA_ARGS__)
#define FGDN_INVALID(...) FGDN_ERROR(invalid_argument, __VA_ARGS__)
#define FGDN_RETURN_IF_ERROR(expr)        \
  do {                                    \
    ::flashgdn::Status _fgdn_st = (expr); \
    if (!_fgdn_st.ok()) return _fgdn_st;  \
  } while (0)
