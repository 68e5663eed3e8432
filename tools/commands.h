// Subcommand registration for the hawser CLI. Each cmd_<name>.cpp defines
// add<Name>(app, cmds): it adds its subcommand and, in the subcommand's
// callback, sets cmds.run to the function main() calls after parsing.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace hawser::tools {

struct Commands {
  std::function<int()> run;
};

void addServe(CLI::App& app, Commands& cmds);
void addBench(CLI::App& app, Commands& cmds);
void addDoctor(CLI::App& app, Commands& cmds);
void addSegment(CLI::App& app, Commands& cmds);  // tools/cmd_segment.cpp
void addConfig(CLI::App& app, Commands& cmds);   // tools/cmd_config.cpp

}  // namespace hawser::tools
