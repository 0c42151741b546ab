// Error construction shared by every layer: messages name the op and argument and end with file:line.
#pragma once

#include <sstream>
#include <string>

#include "flashgdn/flashgdn.hpp"

namespace flashgdn::detail {

template <class... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
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
#define FGDN_ERROR(code, ...) ::flashgdn::detail::make_status(::flashgdn::StatusCode::code, __FILE__, __LINE__, __VA_ARGS__)
#define FGDN_INVALID(...) FGDN_ERROR(invalid_argument, __VA_ARGS__)
#define FGDN_RETURN_IF_ERROR(expr)        \
  do {                                    \
    ::flashgdn::Status _fgdn_st = (expr); \
    if (!_fgdn_st.ok()) return _fgdn_st;  \
  } while (0)
