// `hawser segment`: file segments and host path maps in metadata; list, show
// and remove segments.
//
//   hawser segment register NAME FILE... [--name HOST] [--replace]
//   hawser segment map NAME FILE LOCAL_PATH --host HOST
//   hawser segment list
//   hawser segment show NAME
//   hawser segment remove NAME [--force]
// Every subcommand takes --metadata URI (p2p | etcd://h:p[,h:p] | etcds://h:p[,h:p] | http://h:p/metadata;
// default p2p)
// and --json. With p2p the segments live in the JSON file given by
// --file-segments PATH (or config file_segments / HAWSER_FILE_SEGMENTS), the
// file a p2p engine loads; edits take an exclusive flock on PATH.lock.
// With etcd each edit is one write: register is a create-if-absent txn, map is
// a compare-and-swap on the key's mod_revision (retried on conflict).
// Everything goes through the public hawser::MetadataAdmin (hawser/metadata.h).
//
// Exit status: 0 ok, 2 bad input (invalid_argument), 3 not found (segment or
// file), 4 metadata unreachable or timed out, 1 anything else. With --json
// errors are also printed as {"error":{"code":..., "message":...}} on stdout.
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <fmt/format.h>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hawser/config.h"
#include "hawser/engine.h"
#include "hawser/metadata.h"
#include "tools/commands.h"

namespace hawser::tools {

namespace {

struct SegmentOpts {
  std::string metadata = "p2p";
  std::string file_segments;
  std::string prefix;
  bool json = false;
  // register / map / show / remove
  std::string name;
  std::vector<std::string> files;
  std::string this_host;
  bool replace = false;
  std::string file;
  std::string local_path;
  std::string host;
  bool force = false;
};

bool isP2p(const std::string& uri) { return uri.empty() || uri == "p2p"; }

Status openAdmin(const SegmentOpts& o, std::unique_ptr<MetadataAdmin>& out) {
  if (!isP2p(o.metadata) && o.metadata.rfind("etcd://", 0) != 0 &&
      o.metadata.rfind("etcds://", 0) != 0 && o.metadata.rfind("http://", 0) != 0)
    return {Code::kInvalidArgument,
            fmt::format("--metadata '{}' is not supported: use p2p, etcd://host:port[,host:port], etcds://... (TLS) or "
                        "http://host:port/metadata",
                        o.metadata)};
  std::string env_file_segments;
  if (isP2p(o.metadata) && o.file_segments.empty()) {
    Status s = configValue("file_segments", EngineOptions{}, env_file_segments);  // HAWSER_FILE_SEGMENTS
    if (!s.ok()) return s;
  }
  if (isP2p(o.metadata) && o.file_segments.empty() && env_file_segments.empty())
    return {Code::kInvalidArgument,
            "with --metadata p2p, give the file segments JSON file: --file-segments PATH (or HAWSER_FILE_SEGMENTS), "
            "the file p2p engines load"};
  std::map<std::string, std::string> config;
  if (!o.prefix.empty()) config["metadata.prefix"] = o.prefix;
  if (!o.file_segments.empty()) config["file_segments"] = o.file_segments;
  return MetadataAdmin::open(isP2p(o.metadata) ? "p2p" : o.metadata, config, out);
}

// ---- output -------------------------------------------------------------------

int exitCode(const Status& s) {
  switch (s.code()) {
    case Code::kOk: return 0;
    case Code::kInvalidArgument: return 2;
    case Code::kSegmentNotFound:
    case Code::kFileNotFound: return 3;
    case Code::kUnavailable:
    case Code::kTimeout: return 4;
    default: return 1;
  }
}

int report(const SegmentOpts& o, const char* cmd, const Status& s) {
  fmt::print(stderr, "hawser segment {}: {}\n", cmd, s.toString());
  if (o.json) {
    nlohmann::json j = {{"error", {{"code", std::string(codeName(s.code()))}, {"message", s.message()}}}};
    fmt::print("{}\n", j.dump());
  }
  return exitCode(s);
}

nlohmann::json itemJson(const SegmentRecord& i) {
  nlohmann::json j;
  j["name"] = i.name;
  j["kind"] = i.is_file ? "file" : "memory";
  if (!i.key.empty()) {
    j["key"] = i.key;
    j["mod_revision"] = i.mod_revision;
    j["lease"] = i.lease;
  }
  if (!i.error.ok()) {
    j["error"] = i.error.toString();
    return j;
  }
  if (i.is_file) {
    j["bytes"] = i.bytes;
    j["owner"] = nullptr;
  } else {
    j["owner"] = {{"server_name", i.server_name}, {"host", i.host}, {"rpc_port", i.rpc_port}, {"pid", i.pid}};
    j["bytes"] = i.bytes;
  }
  j["descriptor"] = nlohmann::json::parse(i.descriptor_json, nullptr, /*allow_exceptions=*/false);
  return j;
}

void printItemText(const SegmentRecord& i, bool full) {
  if (!i.error.ok()) {
    fmt::print("{}  {}  unreadable: {}\n", i.name, i.is_file ? "file" : "memory", i.error.toString());
    return;
  }
  if (!i.is_file) {
    fmt::print("{}  memory  owner {} at {}:{} pid {}  {} buffers, {} bytes{}\n", i.name, i.server_name, i.host,
               i.rpc_port, i.pid, i.buffers.size(), i.bytes,
               i.lease ? fmt::format("  lease {:x}", i.lease) : std::string());
    if (full) {
      for (auto& b : i.buffers) fmt::print("  buffer {:#x} +{} {}\n", b.addr, b.length, b.location);
      if (!i.transports_json.empty()) fmt::print("  transports {}\n", i.transports_json);
    }
    return;
  }
  fmt::print("{}  file  {} files, {} bytes\n", i.name, i.files.size(), i.bytes);
  if (full) {
    uint64_t off = 0;
    for (size_t k = 0; k < i.files.size(); ++k) {
      const auto& f = i.files[k];
      fmt::print("  [{}] {}  length {}  offset {}\n", k, f.file_path, f.length, off);
      for (auto& [h, p] : f.local_path_map) fmt::print("      {} -> {}\n", h, p);
      off += f.length;
    }
  }
}

// ---- subcommands ------------------------------------------------------------------

std::string hostName() {
  char buf[HOST_NAME_MAX + 1] = {0};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

int runRegister(const SegmentOpts& o) {
  Status s = MetadataAdmin::checkName(o.name);
  if (!s.ok()) return report(o, "register", s);
  const std::string host = o.this_host.empty() ? hostName() : o.this_host;
  std::vector<FileDesc> files;
  uint64_t bytes = 0;
  for (const auto& arg : o.files) {
    FileDesc f;
    s = MetadataAdmin::inspectFile(arg, f);
    if (!s.ok()) return report(o, "register", s);
    f.local_path_map[host] = f.file_path;
    bytes += f.length;
    files.push_back(std::move(f));
  }
  std::unique_ptr<MetadataAdmin> admin;
  s = openAdmin(o, admin);
  if (!s.ok()) return report(o, "register", s);
  SegmentRecord stored;
  s = admin->registerFileSegment(o.name, files, o.replace, &stored);
  if (!s.ok()) return report(o, "register", s);
  if (o.json) {
    fmt::print("{}\n", itemJson(stored).dump());
  } else {
    fmt::print("registered file segment '{}' in {}: {} files, {} bytes, mapped for host '{}'\n", o.name,
               admin->where(), files.size(), bytes, host);
  }
  return 0;
}

int runMap(const SegmentOpts& o) {
  Status s = MetadataAdmin::checkName(o.name);
  if (!s.ok()) return report(o, "map", s);
  if (o.host.empty()) return report(o, "map", {Code::kInvalidArgument, "--host is empty"});
  if (o.local_path.empty() || o.local_path[0] != '/')
    return report(o, "map", {Code::kInvalidArgument, fmt::format("LOCAL_PATH '{}' must be absolute", o.local_path)});
  std::unique_ptr<MetadataAdmin> admin;
  s = openAdmin(o, admin);
  if (!s.ok()) return report(o, "map", s);
  size_t which = 0;
  s = admin->mapFile(o.name, o.file, o.host, o.local_path, &which);
  if (!s.ok()) return report(o, "map", s);
  if (o.json) {
    SegmentRecord i;
    s = admin->show(o.name, i);
    if (!s.ok()) return report(o, "map", s);
    fmt::print("{}\n", itemJson(i).dump());
  } else {
    fmt::print("segment '{}' file [{}]: host '{}' -> {}\n", o.name, which, o.host, o.local_path);
  }
  return 0;
}

int runList(const SegmentOpts& o) {
  std::unique_ptr<MetadataAdmin> admin;
  Status s = openAdmin(o, admin);
  if (!s.ok()) return report(o, "list", s);
  std::vector<SegmentRecord> items;
  s = admin->list(items);
  if (!s.ok()) return report(o, "list", s);
  if (o.json) {
    nlohmann::json arr = nlohmann::json::array();
    for (auto& i : items) arr.push_back(itemJson(i));
    fmt::print("{}\n", nlohmann::json{{"segments", arr}}.dump());
    return 0;
  }
  if (items.empty()) fmt::print("no segments in {}\n", admin->where());
  for (auto& i : items) printItemText(i, false);
  return 0;
}

int runShow(const SegmentOpts& o) {
  Status s = MetadataAdmin::checkName(o.name);
  if (!s.ok()) return report(o, "show", s);
  std::unique_ptr<MetadataAdmin> admin;
  s = openAdmin(o, admin);
  if (!s.ok()) return report(o, "show", s);
  SegmentRecord i;
  s = admin->show(o.name, i);
  if (!s.ok()) return report(o, "show", s);
  if (o.json) {
    fmt::print("{}\n", itemJson(i).dump());
  } else {
    printItemText(i, true);
  }
  return i.error.ok() ? 0 : report(o, "show", i.error);
}

int runRemove(const SegmentOpts& o) {
  Status s = MetadataAdmin::checkName(o.name);
  if (!s.ok()) return report(o, "remove", s);
  std::unique_ptr<MetadataAdmin> admin;
  s = openAdmin(o, admin);
  if (!s.ok()) return report(o, "remove", s);
  s = admin->remove(o.name, o.force);
  if (!s.ok()) return report(o, "remove", s);
  if (o.json) {
    fmt::print("{}\n", nlohmann::json{{"removed", o.name}}.dump());
  } else {
    fmt::print("removed segment '{}' from {}\n", o.name, admin->where());
  }
  return 0;
}

void addCommon(CLI::App* sub, const std::shared_ptr<SegmentOpts>& o) {
  sub->add_option("--metadata", o->metadata,
                  "metadata: p2p, etcd://host:port[,host:port], etcds://... (TLS: etcd.* config keys) or "
                  "http://host:port/metadata")
      ->capture_default_str();
  sub->add_option("--file-segments", o->file_segments,
                  "p2p: the file segments JSON file engines load (default: HAWSER_FILE_SEGMENTS)");
  sub->add_option("--prefix", o->prefix, "etcd key prefix (default: metadata.prefix / HAWSER_METADATA_PREFIX, hawser)");
  sub->add_flag("--json", o->json, "machine-readable output (one JSON object)");
}

}  // namespace

void addSegment(CLI::App& app, Commands& cmds) {
  auto o = std::make_shared<SegmentOpts>();
  auto* seg = app.add_subcommand("segment", "File segments and host path maps in metadata; list, show, remove");
  seg->require_subcommand(1);

  auto* reg = seg->add_subcommand("register", "Publish a file segment made of FILE... (lengths from the files)");
  reg->add_option("NAME", o->name, "segment name")->required();
  reg->add_option("FILE", o->files, "backing files, concatenated in order")->required();
  reg->add_option("--name", o->this_host, "this host's server name for the path map (default: hostname)");
  reg->add_flag("--replace", o->replace, "overwrite an existing file segment of that name");
  addCommon(reg, o);
  reg->callback([o, &cmds] { cmds.run = [o] { return runRegister(*o); }; });

  auto* map = seg->add_subcommand("map", "Record where another host sees one file of a segment");
  map->add_option("NAME", o->name, "segment name")->required();
  map->add_option("FILE", o->file, "the segment's file: its path, a mapped path, or its index")->required();
  map->add_option("LOCAL_PATH", o->local_path, "absolute path of that file on --host")->required();
  map->add_option("--host", o->host, "server name of the host the path is valid on")->required();
  addCommon(map, o);
  map->callback([o, &cmds] { cmds.run = [o] { return runMap(*o); }; });

  auto* list = seg->add_subcommand("list", "List segments (memory and file) with their kind and owner");
  addCommon(list, o);
  list->callback([o, &cmds] { cmds.run = [o] { return runList(*o); }; });

  auto* show = seg->add_subcommand("show", "Show one segment's descriptor");
  show->add_option("NAME", o->name, "segment name")->required();
  addCommon(show, o);
  show->callback([o, &cmds] { cmds.run = [o] { return runShow(*o); }; });

  auto* rm = seg->add_subcommand("remove", "Remove a segment from metadata");
  rm->add_option("NAME", o->name, "segment name")->required();
  rm->add_flag("--force", o->force, "etcd: also delete a memory segment's key");
  addCommon(rm, o);
  rm->callback([o, &cmds] { cmds.run = [o] { return runRemove(*o); }; });
}

}  // namespace hawser::tools
