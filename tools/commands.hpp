// The `flashgdn` CLI's subcommands. Each lives in its own file and has one registration function that adds the
// subcommand and its options (CLI11) to the app and returns the function that runs it after a successful parse.
// A new subcommand is one more file and one more line in tools/flashgdn.cpp.
#pragma once

#include <CLI/CLI.hpp>
#include <charconv>
#include <cstdint>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>

namespace flashgdn::cli {

// Exit codes of every subcommand.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;       // ran, and a check failed or an op returned an error
inline constexpr int kExitUsage = 2;        // bad command line: nothing ran
inline constexpr int kExitUnavailable = 3;  // valid request this build or machine cannot serve (e.g. no GPU)

struct Command {
  CLI::App* app = nullptr;  // the subcommand; parsed() says whether it was chosen
  std::function<int()> run;
};

Command add_demo(CLI::App& app);
Command add_bench(CLI::App& app);
Command add_plan(CLI::App& app);

// An integer option in [lo, hi] written in decimal. CLI11 converts with strtoll, which saturates on overflow
// and reads "010" as octal, so the text is checked first: "--tokens: expected an integer in [8, 262144], got
// 99999999999999999999".
template <class T>
CLI::Validator integer_in(T lo, T hi) {
  const std::string range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  return CLI::Validator(
      [lo, hi, range](std::string& s) -> std::string {
        T x{};
        const char* end = s.data() + s.size();
        auto [p, ec] = std::from_chars(s.data(), end, x);
        if (ec == std::errc() && p == end && x >= lo && x <= hi) return {};
        return "expected an integer in " + range + ", got '" + s + "'";
      },
      range);
}

}  // namespace flashgdn::cli
