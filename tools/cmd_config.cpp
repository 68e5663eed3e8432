// `hawser config`: the config table (hawser/config.h configKeys()).
//   hawser config               every key: type, default, range, env, doc
//   hawser config --markdown    the table docs/config.md and README.md hold
//                               (a test fails when they drift from it:
//                               cmake/config_docs.cmake)
//   --prefix P (repeatable)     only the keys that start with P
//   hawser config KEY...        the effective value of each key here (the
//                               environment, else the default), validated
#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "hawser/config.h"
#include "hawser/engine.h"
#include "tools/commands.h"

namespace hawser::tools {

namespace {

std::string cell(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += "\\|";
    else out += c;
  }
  return out;
}

std::string markdownRange(const ConfigKey& k) {
  if (k.type != "enum") return k.range;
  std::string out;
  size_t start = 0;
  while (start <= k.range.size()) {
    size_t bar = k.range.find('|', start);
    if (bar == std::string::npos) bar = k.range.size();
    if (!out.empty()) out += ", ";
    out += fmt::format("`{}`", std::string_view(k.range).substr(start, bar - start));
    start = bar + 1;
  }
  return out;
}

void printMarkdown(const std::vector<ConfigKey>& keys) {
  std::printf("| key | env | type | default | range | what it does |\n");
  std::printf("| --- | --- | --- | --- | --- | --- |\n");
  for (const auto& k : keys) {
    std::string def = k.default_value.empty() ? "(empty)" : fmt::format("`{}`", k.default_value);
    std::printf("| `%s` | `%s` | %s | %s | %s | %s |\n", k.key.c_str(), k.env.c_str(), k.type.c_str(), def.c_str(),
                cell(markdownRange(k)).c_str(), cell(k.doc).c_str());
  }
}

void printText(const std::vector<ConfigKey>& keys) {
  size_t wk = 0, wt = 0, wd = 0, wr = 0;
  for (const auto& k : keys) {
    wk = std::max(wk, k.key.size());
    wt = std::max(wt, k.type.size());
    wd = std::max(wd, k.default_value.size() + 2);
    wr = std::max(wr, k.range.size());
  }
  for (const auto& k : keys) {
    std::string def = fmt::format("'{}'", k.default_value);
    std::printf("%s\n", fmt::format("{:<{}}  {:<{}}  {:<{}}  {:<{}}  {}", k.key, wk, k.type, wt, def, wd, k.range, wr,
                                    k.env)
                            .c_str());
    std::printf("    %s\n", k.doc.c_str());
  }
}

int showValues(const std::vector<std::string>& names) {
  EngineOptions none;
  int rc = 0;
  for (const auto& n : names) {
    std::string v;
    ConfigSource src = ConfigSource::kDefault;
    Status s = configValue(n, none, v, &src);
    if (!s.ok()) {
      std::fprintf(stderr, "hawser config: %s\n", s.toString().c_str());
      rc = 1;
      continue;
    }
    bool secret = false;
    for (const auto& k : configKeys()) secret |= k.key == n && k.secret;
    if (secret && !v.empty()) v = "(set, hidden)";
    std::printf("%s = '%s' (%s)\n", n.c_str(), v.c_str(),
                src == ConfigSource::kEnvironment ? "environment" : src == ConfigSource::kOptions ? "options" : "default");
  }
  return rc;
}

}  // namespace

void addConfig(CLI::App& app, Commands& cmds) {
  auto markdown = std::make_shared<bool>(false);
  auto names = std::make_shared<std::vector<std::string>>();
  auto prefixes = std::make_shared<std::vector<std::string>>();
  auto* sub = app.add_subcommand("config", "List every tunable (key, env, type, default, range), or show the values of some");
  sub->add_flag("--markdown", *markdown, "print the table as Markdown (the table of docs/config.md)");
  sub->add_option("--prefix", *prefixes, "only keys starting with this (repeatable)");
  sub->add_option("keys", *names, "keys whose effective value (environment, else default) to show, validated");
  sub->callback([&cmds, markdown, names, prefixes] {
    cmds.run = [markdown, names, prefixes] {
      if (!names->empty()) return showValues(*names);
      std::vector<ConfigKey> keys;
      for (auto& k : configKeys()) {
        bool match = prefixes->empty();
        for (auto& p : *prefixes) match |= k.key.rfind(p, 0) == 0;
        if (match) keys.push_back(k);
      }
      if (*markdown) {
        printMarkdown(keys);
      } else {
        printText(keys);
      }
      return 0;
    };
  });
}

}  // namespace hawser::tools
