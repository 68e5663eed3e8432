// `hawser segment`: file segments and host path maps in metadata; list, show
// and remove segments.
//
//   hawser segment register NAME FILE... [--name HOST] [--replace]
//   hawser segment map NAME FILE LOCAL_PATH --host HOST
//   hawser segment list
//   hawser segment show NAME
//   hawser segment remove NAME [--force]
// Every subcommand takes --metadata URI (p2p | etcd://h:p[,h:p]; default p2p)
// and --json. With p2p the segments live in the JSON file given by
// --file-segments PATH (or config file_segments / HAWSER_FILE_SEGMENTS), the
// file a p2p engine loads; edits take an exclusive flock on PATH.lock.
// With etcd each edit is one write: register is a create-if-absent txn, map is
// a compare-and-swap on the key's mod_revision (retried on conflict).
//
// Exit status: 0 ok, 2 bad input (invalid_argument), 3 not found (segment or
// file), 4 metadata unreachable or timed out, 1 anything else. With --json
// errors are also printed as {"error":{"code":..., "message":...}} on stdout.
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fmt/format.h>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/config.h"
#include "metadata/descriptor.h"
#include "metadata/p2p_store.h"
#include "tools/commands.h"
#if HAWSER_HAVE_ETCD
#include "metadata/etcd_store.h"
#endif

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

// One segment as a tool sees it.
struct Item {
  SegmentDesc desc;
  bool is_file = false;
  std::string key;        // etcd key (empty with p2p)
  int64_t lease = 0;      // etcd lease (memory segments)
  int64_t mod_revision = 0;
  Status decode;          // why desc could not be read
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string where() const = 0;
  // replace=false: kInvalidArgument if the name is taken.
  virtual Status create(const SegmentDesc& d, bool replace) = 0;
  virtual Status update(const std::string& name, const std::function<Status(SegmentDesc&)>& edit) = 0;
  virtual Status get(const std::string& name, Item& out) = 0;
  virtual Status list(std::vector<Item>& out) = 0;
  virtual Status remove(const std::string& name, bool force) = 0;
};

Status checkName(const std::string& name) {
  if (name.empty()) return {Code::kInvalidArgument, "segment NAME is empty"};
  if (name.size() > 255) return {Code::kInvalidArgument, fmt::format("segment NAME '{}...' is longer than 255 bytes", name.substr(0, 32))};
  for (unsigned char c : name) {
    if (c == '/' || std::isspace(c) || std::iscntrl(c))
      return {Code::kInvalidArgument, fmt::format("segment NAME '{}' contains '/', whitespace or a control character", name)};
  }
  if (name.rfind("file:", 0) == 0)
    return {Code::kInvalidArgument, fmt::format("segment NAME '{}' must not start with file:", name)};
  return Status::OK();
}

// ---- p2p: the JSON file a p2p engine loads ---------------------------------

class FileBackend : public Backend {
 public:
  explicit FileBackend(std::string path) : path_(std::move(path)) {}
  std::string where() const override { return "file segments '" + path_ + "'"; }

  Status create(const SegmentDesc& d, bool replace) override {
    return locked([&](std::map<std::string, SegmentDesc>& segs, bool& dirty) -> Status {
      if (!replace && segs.count(d.name))
        return {Code::kInvalidArgument,
                fmt::format("segment '{}' already exists in {} (use --replace)", d.name, path_)};
      segs[d.name] = d;
      dirty = true;
      return Status::OK();
    });
  }
  Status update(const std::string& name, const std::function<Status(SegmentDesc&)>& edit) override {
    return locked([&](std::map<std::string, SegmentDesc>& segs, bool& dirty) -> Status {
      auto it = segs.find(name);
      if (it == segs.end()) return {Code::kSegmentNotFound, fmt::format("no file segment '{}' in {}", name, path_)};
      Status s = edit(it->second);
      if (s.ok()) dirty = true;
      return s;
    });
  }
  Status get(const std::string& name, Item& out) override {
    std::map<std::string, SegmentDesc> segs;
    Status s = read(segs);
    if (!s.ok()) return s;
    auto it = segs.find(name);
    if (it == segs.end()) return {Code::kSegmentNotFound, fmt::format("no file segment '{}' in {}", name, path_)};
    out = Item{};
    out.desc = it->second;
    out.is_file = true;
    return Status::OK();
  }
  Status list(std::vector<Item>& out) override {
    out.clear();
    std::map<std::string, SegmentDesc> segs;
    Status s = read(segs);
    if (!s.ok()) return s;
    for (auto& [n, d] : segs) {
      Item i;
      i.desc = d;
      i.is_file = true;
      out.push_back(std::move(i));
    }
    return Status::OK();
  }
  Status remove(const std::string& name, bool) override {
    return locked([&](std::map<std::string, SegmentDesc>& segs, bool& dirty) -> Status {
      if (segs.erase(name) == 0) return {Code::kSegmentNotFound, fmt::format("no file segment '{}' in {}", name, path_)};
      dirty = true;
      return Status::OK();
    });
  }

 private:
  Status read(std::map<std::string, SegmentDesc>& segs) {
    // A file that does not exist yet holds no segments.
    return loadFileSegments(path_, segs);
  }
  // Read-modify-write under an exclusive lock on PATH.lock.
  Status locked(const std::function<Status(std::map<std::string, SegmentDesc>&, bool&)>& fn) {
    const std::string lock_path = path_ + ".lock";
    int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
      int e = errno;
      return {e == EACCES ? Code::kPermissionDenied : Code::kMetadataError,
              fmt::format("cannot open lock file '{}': {}", lock_path, std::strerror(e))};
    }
    if (::flock(fd, LOCK_EX) != 0) {
      int e = errno;
      ::close(fd);
      return {Code::kMetadataError, fmt::format("cannot lock '{}': {}", lock_path, std::strerror(e))};
    }
    std::map<std::string, SegmentDesc> segs;
    Status s = read(segs);
    bool dirty = false;
    if (s.ok()) s = fn(segs, dirty);
    if (s.ok() && dirty) s = saveFileSegments(path_, segs);
    ::close(fd);  // releases the lock
    return s;
  }
  std::string path_;
};

// ---- etcd -------------------------------------------------------------------

#if HAWSER_HAVE_ETCD
class EtcdBackend : public Backend {
 public:
  EtcdBackend(std::unique_ptr<EtcdStore> s, std::string uri) : store_(std::move(s)), uri_(std::move(uri)) {}
  std::string where() const override { return fmt::format("etcd {} (prefix '{}')", uri_, store_->prefix()); }

  Status create(const SegmentDesc& d, bool replace) override {
    if (replace) return store_->putFileSegment(d);
    return store_->createFileSegment(d);
  }
  Status update(const std::string& name, const std::function<Status(SegmentDesc&)>& edit) override {
    return store_->updateFileSegment(name, edit);
  }
  Status get(const std::string& name, Item& out) override {
    EtcdStore::Entry e;
    Status s = store_->getEntry(name, e);
    if (!s.ok()) return s;
    out = fromEntry(std::move(e));
    return Status::OK();
  }
  Status list(std::vector<Item>& out) override {
    out.clear();
    std::vector<EtcdStore::Entry> es;
    Status s = store_->listEntries(es);
    if (!s.ok()) return s;
    for (auto& e : es) out.push_back(fromEntry(std::move(e)));
    return Status::OK();
  }
  Status remove(const std::string& name, bool force) override {
    EtcdStore::Entry e;
    Status s = store_->getEntry(name, e);
    if (!s.ok()) return s;
    if (!e.is_file && !force) {
      std::string owner = e.decode.ok() ? fmt::format(" of the engine at {}:{} (pid {})", e.desc.host,
                                                      e.desc.rpc_port, e.desc.pid)
                                        : std::string();
      return {Code::kInvalidArgument,
              fmt::format("'{}' is the memory segment{}; it vanishes when that engine stops or its lease "
                          "expires. Use --force to delete the key anyway (a running engine re-publishes it)",
                          name, owner)};
    }
    return store_->removeKey(name, e.is_file);
  }

 private:
  static Item fromEntry(EtcdStore::Entry e) {
    Item i;
    i.desc = std::move(e.desc);
    if (i.desc.name.empty()) i.desc.name = e.name;
    i.is_file = e.is_file;
    i.key = e.key;
    i.lease = e.lease;
    i.mod_revision = e.mod_revision;
    i.decode = e.decode;
    return i;
  }
  std::unique_ptr<EtcdStore> store_;
  std::string uri_;
};
#endif

Status openBackend(const SegmentOpts& o, std::unique_ptr<Backend>& out) {
  Config config = Config::fromEnv();
  if (!o.prefix.empty()) config.set("metadata.prefix", o.prefix);
  if (o.metadata.empty() || o.metadata == "p2p") {
    std::string path = o.file_segments.empty() ? config.getString("file_segments", "") : o.file_segments;
    if (path.empty())
      return {Code::kInvalidArgument,
              "with --metadata p2p, give the file segments JSON file: --file-segments PATH (or HAWSER_FILE_SEGMENTS), "
              "the file p2p engines load"};
    out = std::make_unique<FileBackend>(path);
    return Status::OK();
  }
  if (o.metadata.rfind("etcd://", 0) == 0) {
#if HAWSER_HAVE_ETCD
    std::unique_ptr<EtcdStore> s;
    Status st = makeEtcdStoreTyped(o.metadata, config, s);
    if (!st.ok()) return st;
    out = std::make_unique<EtcdBackend>(std::move(s), o.metadata);
    return Status::OK();
#else
    return {Code::kNotSupported, fmt::format("--metadata '{}': this build has no etcd support", o.metadata)};
#endif
  }
  return {Code::kInvalidArgument,
          fmt::format("--metadata '{}' is not supported: use p2p or etcd://host:port[,host:port]", o.metadata)};
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

uint64_t memoryBytes(const SegmentDesc& d) {
  uint64_t n = 0;
  for (auto& b : d.buffers) n += b.length;
  return n;
}

nlohmann::json itemJson(const Item& i) {
  nlohmann::json j;
  j["name"] = i.desc.name;
  j["kind"] = i.is_file ? "file" : "memory";
  if (!i.key.empty()) {
    j["key"] = i.key;
    j["mod_revision"] = i.mod_revision;
    j["lease"] = i.lease;
  }
  if (!i.decode.ok()) {
    j["error"] = i.decode.toString();
    return j;
  }
  if (i.is_file) {
    j["bytes"] = i.desc.fileSpan();
    j["owner"] = nullptr;
  } else {
    j["owner"] = {{"server_name", i.desc.server_name}, {"host", i.desc.host}, {"rpc_port", i.desc.rpc_port},
                  {"pid", i.desc.pid}};
    j["bytes"] = memoryBytes(i.desc);
  }
  j["descriptor"] = encodeSegment(i.desc);
  return j;
}

void printItemText(const Item& i, bool full) {
  if (!i.decode.ok()) {
    fmt::print("{}  {}  unreadable: {}\n", i.desc.name, i.is_file ? "file" : "memory", i.decode.toString());
    return;
  }
  if (!i.is_file) {
    fmt::print("{}  memory  owner {} at {}:{} pid {}  {} buffers, {} bytes{}\n", i.desc.name, i.desc.server_name,
               i.desc.host, i.desc.rpc_port, i.desc.pid, i.desc.buffers.size(), memoryBytes(i.desc),
               i.lease ? fmt::format("  lease {:x}", i.lease) : std::string());
    if (full) {
      for (auto& b : i.desc.buffers) fmt::print("  buffer {:#x} +{} {}\n", b.addr, b.length, b.location);
      if (!i.desc.transports.empty()) fmt::print("  transports {}\n", i.desc.transports.dump());
    }
    return;
  }
  fmt::print("{}  file  {} files, {} bytes\n", i.desc.name, i.desc.files.size(), i.desc.fileSpan());
  if (full) {
    uint64_t off = 0;
    for (size_t k = 0; k < i.desc.files.size(); ++k) {
      const auto& f = i.desc.files[k];
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

// Absolute path and size of a backing file; kFileNotFound / kPermissionDenied /
// kInvalidArgument (not a regular file or block device, or empty).
Status inspectFile(const std::string& arg, std::string& abs, uint64_t& length) {
  char resolved[PATH_MAX];
  if (::realpath(arg.c_str(), resolved) == nullptr) {
    int e = errno;
    Code c = e == ENOENT || e == ENOTDIR ? Code::kFileNotFound : e == EACCES ? Code::kPermissionDenied : Code::kIoError;
    return {c, fmt::format("FILE '{}': {}", arg, std::strerror(e))};
  }
  abs = resolved;
  struct stat st {};
  if (::stat(abs.c_str(), &st) != 0) {
    int e = errno;
    return {e == EACCES ? Code::kPermissionDenied : Code::kIoError, fmt::format("FILE '{}': {}", arg, std::strerror(e))};
  }
  if (S_ISREG(st.st_mode)) {
    length = static_cast<uint64_t>(st.st_size);
  } else if (S_ISBLK(st.st_mode)) {
    int fd = ::open(abs.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      int e = errno;
      return {e == EACCES ? Code::kPermissionDenied : Code::kIoError, fmt::format("FILE '{}': {}", arg, std::strerror(e))};
    }
    uint64_t n = 0;
    int rc = ::ioctl(fd, BLKGETSIZE64, &n);
    ::close(fd);
    if (rc != 0) return {Code::kIoError, fmt::format("FILE '{}': cannot read the device size", arg)};
    length = n;
  } else {
    return {Code::kInvalidArgument, fmt::format("FILE '{}' is not a regular file or block device", arg)};
  }
  if (length == 0) return {Code::kInvalidArgument, fmt::format("FILE '{}' is empty (a segment file needs >= 1 byte)", arg)};
  if (::access(abs.c_str(), R_OK) != 0)
    return {Code::kPermissionDenied, fmt::format("FILE '{}' is not readable: {}", arg, std::strerror(errno))};
  return Status::OK();
}

int runRegister(const SegmentOpts& o) {
  Status s = checkName(o.name);
  if (!s.ok()) return report(o, "register", s);
  const std::string host = o.this_host.empty() ? hostName() : o.this_host;
  SegmentDesc d;
  d.kind = SegmentDesc::Kind::kFile;
  d.name = o.name;
  for (const auto& arg : o.files) {
    FileDesc f;
    s = inspectFile(arg, f.file_path, f.length);
    if (!s.ok()) return report(o, "register", s);
    f.local_path_map[host] = f.file_path;
    d.files.push_back(std::move(f));
  }
  std::unique_ptr<Backend> b;
  s = openBackend(o, b);
  if (!s.ok()) return report(o, "register", s);
  s = b->create(d, o.replace);
  if (!s.ok()) return report(o, "register", s);
  Item i;
  i.desc = d;
  i.is_file = true;
  if (o.json) {
    (void)b->get(o.name, i);  // key and revision, when the store has them
    fmt::print("{}\n", itemJson(i).dump());
  } else {
    fmt::print("registered file segment '{}' in {}: {} files, {} bytes, mapped for host '{}'\n", d.name, b->where(),
               d.files.size(), d.fileSpan(), host);
  }
  return 0;
}

int runMap(const SegmentOpts& o) {
  Status s = checkName(o.name);
  if (!s.ok()) return report(o, "map", s);
  if (o.host.empty()) return report(o, "map", {Code::kInvalidArgument, "--host is empty"});
  if (o.local_path.empty() || o.local_path[0] != '/')
    return report(o, "map", {Code::kInvalidArgument, fmt::format("LOCAL_PATH '{}' must be absolute", o.local_path)});
  std::unique_ptr<Backend> b;
  s = openBackend(o, b);
  if (!s.ok()) return report(o, "map", s);
  // FILE names a file of the segment: its file_path, a path it is mapped to, or its index.
  std::string resolved;
  char buf[PATH_MAX];
  if (::realpath(o.file.c_str(), buf) != nullptr) resolved = buf;
  size_t which = 0;
  s = b->update(o.name, [&](SegmentDesc& d) -> Status {
    for (size_t k = 0; k < d.files.size(); ++k) {
      const auto& f = d.files[k];
      bool hit = f.file_path == o.file || (!resolved.empty() && f.file_path == resolved) ||
                 std::to_string(k) == o.file;
      for (auto& [h, p] : f.local_path_map) hit = hit || p == o.file;
      if (hit) {
        which = k;
        d.files[k].local_path_map[o.host] = o.local_path;
        return Status::OK();
      }
    }
    std::string known;
    for (size_t k = 0; k < d.files.size(); ++k) known += fmt::format("{}[{}] {}", k ? ", " : "", k, d.files[k].file_path);
    return {Code::kInvalidArgument, fmt::format("FILE '{}' is not a file of segment '{}' (its files: {})", o.file,
                                                o.name, known)};
  });
  if (!s.ok()) return report(o, "map", s);
  if (o.json) {
    Item i;
    s = b->get(o.name, i);
    if (!s.ok()) return report(o, "map", s);
    fmt::print("{}\n", itemJson(i).dump());
  } else {
    fmt::print("segment '{}' file [{}]: host '{}' -> {}\n", o.name, which, o.host, o.local_path);
  }
  return 0;
}

int runList(const SegmentOpts& o) {
  std::unique_ptr<Backend> b;
  Status s = openBackend(o, b);
  if (!s.ok()) return report(o, "list", s);
  std::vector<Item> items;
  s = b->list(items);
  if (!s.ok()) return report(o, "list", s);
  if (o.json) {
    nlohmann::json arr = nlohmann::json::array();
    for (auto& i : items) arr.push_back(itemJson(i));
    fmt::print("{}\n", nlohmann::json{{"segments", arr}}.dump());
    return 0;
  }
  if (items.empty()) fmt::print("no segments in {}\n", b->where());
  for (auto& i : items) printItemText(i, false);
  return 0;
}

int runShow(const SegmentOpts& o) {
  Status s = checkName(o.name);
  if (!s.ok()) return report(o, "show", s);
  std::unique_ptr<Backend> b;
  s = openBackend(o, b);
  if (!s.ok()) return report(o, "show", s);
  Item i;
  s = b->get(o.name, i);
  if (!s.ok()) return report(o, "show", s);
  if (o.json) {
    fmt::print("{}\n", itemJson(i).dump());
  } else {
    printItemText(i, true);
  }
  return i.decode.ok() ? 0 : report(o, "show", i.decode);
}

int runRemove(const SegmentOpts& o) {
  Status s = checkName(o.name);
  if (!s.ok()) return report(o, "remove", s);
  std::unique_ptr<Backend> b;
  s = openBackend(o, b);
  if (!s.ok()) return report(o, "remove", s);
  s = b->remove(o.name, o.force);
  if (!s.ok()) return report(o, "remove", s);
  if (o.json) {
    fmt::print("{}\n", nlohmann::json{{"removed", o.name}}.dump());
  } else {
    fmt::print("removed segment '{}' from {}\n", o.name, b->where());
  }
  return 0;
}

void addCommon(CLI::App* sub, const std::shared_ptr<SegmentOpts>& o) {
  sub->add_option("--metadata", o->metadata, "metadata: p2p or etcd://host:port[,host:port]")->capture_default_str();
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
