// hawser — the command-line tool: serve, bench, segment, doctor, config.
#include <CLI/CLI.hpp>

#include "tools/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"hawser: move bytes between registered memory and storage, over every transport"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "hawser 0.1.0");
  hawser::tools::Commands cmds;
  hawser::tools::addServe(app, cmds);
  hawser::tools::addBench(app, cmds);
  hawser::tools::addDoctor(app, cmds);
  hawser::tools::addSegment(app, cmds);
  hawser::tools::addConfig(app, cmds);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return cmds.run ? cmds.run() : 0;
}

