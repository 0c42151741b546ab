// Progress of a long CLI phase (the fp64 oracle, a CPU prefill) on stderr: "      oracle  42% (8 s, ~11 s
// left)", redrawn in place. Drawn only when stderr is a terminal, so logs and pipes get the phase lines on
// stdout and no carriage returns.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>

namespace flashgdn::cli {

// The line for `done` of `total` units after `elapsed_s` seconds; the estimate assumes a constant rate:
// left = elapsed * (total - done) / done.
inline std::string progress_line(const std::string& label, int64_t done, int64_t total, double elapsed_s) {
  const double f = total > 0 ? double(done) / double(total) : 1.0;
  char buf[160];
  if (done > 0 && done < total)
    std::snprintf(buf, sizeof buf, "%s %3.0f%% (%.0f s, ~%.0f s left)", label.c_str(), 100 * f, elapsed_s,
                  elapsed_s * double(total - done) / double(done));
  else
    std::snprintf(buf, sizeof buf, "%s %3.0f%% (%.0f s)", label.c_str(), 100 * f, elapsed_s);
  return buf;
}

class Progress {
 public:
  Progress(std::string label, int64_t total, bool enabled = isatty(fileno(stderr)) != 0)
      : label_(std::move(label)), total_(total), enabled_(enabled), t0_(std::chrono::steady_clock::now()) {
    update(0);
  }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  ~Progress() {
    if (enabled_) std::fprintf(stderr, "\r%*s\r", int(width_), "");  // leave no partial line behind
  }
  void update(int64_t done) {
    if (!enabled_) return;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    const std::string line = progress_line(label_, done, total_, s);
    width_ = std::max(width_, line.size());
    std::fprintf(stderr, "\r%-*s", int(width_), line.c_str());
    std::fflush(stderr);
  }

 private:
  std::string label_;
  int64_t total_;
  bool enabled_;
  std::chrono::steady_clock::time_point t0_;
  size_t width_ = 0;
};

}  // namespace flashgdn::cli
