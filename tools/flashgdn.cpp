// The `flashgdn` command-line tool: one subcommand per file (tools/commands.hpp), parsed by CLI11.
// Exit codes: 0 ok, 1 a run failed, 2 usage error (nothing ran), 3 not available on this build or machine.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "commands.hpp"
#include "flashgdn/flashgdn.hpp"

int main(int argc, char** argv) {
  using namespace flashgdn::cli;
  CLI::App app{std::string("flashgdn ") + flashgdn::version() + ": Gated DeltaNet kernels", "flashgdn"};
  // At most one command; none is a usage error reported after parsing, so that an unknown word is named
  // ("The following arguments were not expected: frobnicate") rather than reported as a missing command.
  app.require_subcommand(0, 1);
  app.set_version_flag("--version", std::string("flashgdn ") + flashgdn::version());
  app.footer(
      "Exit codes: 0 ok, 1 a run failed, 2 usage error, 3 not available on this build or machine.\n"
      "`flashgdn <command> --help` explains each command.");

  std::vector<Command> commands = {add_demo(app), add_bench(app), add_plan(app)};
  CLI::App* version = app.add_subcommand("version", "print the version and whether a CUDA device is usable");
  commands.push_back({version, [] {
                        std::printf("flashgdn %s, CUDA device: %s\n", flashgdn::version(),
                                    flashgdn::cuda_available() ? "yes" : "no");
                        return kExitOk;
                      }});

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Help and --version exit 0; every bad argument one code, with CLI11's message naming it.
    return app.exit(e) == 0 ? kExitOk : kExitUsage;
  }
  if (app.get_subcommands().empty()) {
    std::fprintf(stderr, "flashgdn: a command is required\n%s", app.help().c_str());
    return kExitUsage;
  }
  for (const Command& c : commands) {
    if (!c.app->parsed()) continue;
    try {
      return c.run();
    } catch (const CLI::ValidationError& e) {  // a check that needs more than one option's value
      std::fprintf(stderr, "flashgdn %s: %s\n", c.app->get_name().c_str(), e.what());
      return kExitUsage;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "flashgdn %s: %s\n", c.app->get_name().c_str(), e.what());
      return kExitFailed;
    }
  }
  return kExitUsage;  // unreachable: every subcommand is in `commands`
}
