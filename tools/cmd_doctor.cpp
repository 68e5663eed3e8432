// `hawser doctor`: what this host has.
#include <fmt/format.h>

#include "tools/commands.h"

namespace hawser::tools {
void addDoctor(CLI::App& app, Commands& cmds) {
  auto* sub = app.add_subcommand("doctor", "Report what this host has: transports, NICs, GPUs, io_uring, metadata");
  sub->callback([&cmds] { cmds.run = [] { return 0; }; });
}
}  // namespace hawser::tools
