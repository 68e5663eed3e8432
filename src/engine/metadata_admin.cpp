// hawser::MetadataAdmin (include/hawser/metadata.h): the public face of the
// metadata store's admin verbs (metadata/store.h), plus what a tool needs
// around them: name rules, backing-file inspection, the path-map edit.
// Messages name arguments the way `hawser segment` does (NAME, FILE), the
// tool being this API's first user.
#include "hawser/metadata.h"

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fmt/format.h>

#include "base/config.h"
#include "base/file_info.h"
#include "metadata/store.h"

namespace hawser {

struct MetadataAdmin::Impl {
  Config config;  // the store keeps a reference: lives as long as it
  std::unique_ptr<MetadataStore> store;
};

namespace {

bool isP2p(const std::string& uri) { return uri.empty() || uri == "p2p" || uri == "P2PHANDSHAKE"; }

// `path` with symbolic links resolved; "" when it cannot be resolved.
std::string resolvedPath(const std::string& path, int* err = nullptr) {
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf) == nullptr) {
    if (err) *err = errno;
    return std::string();
  }
  return buf;
}

SegmentRecord recordOf(SegmentEntry e) {
  SegmentRecord r;
  const SegmentDesc& d = e.desc;
  r.name = d.name.empty() ? e.name : d.name;
  r.is_file = e.is_file;
  r.key = e.key;
  r.mod_revision = e.mod_revision;
  r.lease = e.lease;
  r.error = e.decode;
  if (!r.error.ok()) return r;
  r.server_name = d.server_name;
  r.host = d.host;
  r.rpc_port = d.rpc_port;
  r.pid = d.pid;
  for (const auto& b : d.buffers) {
    r.buffers.push_back(SegmentBuffer{b.addr, b.length, b.location});
    if (!r.is_file) r.bytes += b.length;
  }
  if (!d.transports.empty()) r.transports_json = d.transports.dump();
  r.files = d.files;
  if (r.is_file) r.bytes = d.fileSpan();
  SegmentDesc named = d;
  named.name = r.name;
  r.descriptor_json = encodeSegmentText(named);
  return r;
}

}  // namespace

MetadataAdmin::MetadataAdmin(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MetadataAdmin::~MetadataAdmin() = default;

Status MetadataAdmin::open(const std::string& metadata_uri, const std::map<std::string, std::string>& config,
                           std::unique_ptr<MetadataAdmin>& out) {
  auto impl = std::make_unique<Impl>();
  // As an engine's init: every value (environment and `config`) validated
  // first, an unknown key in `config` refused.
  impl->config = Config::fromEnv();
  for (const auto& [k, v] : config) impl->config.set(k, v, ConfigSource::kOptions);
  Status s = impl->config.validate();
  if (!s.ok()) return s;
  std::string file_segments;
  if (!(s = impl->config.getString("file_segments", file_segments)).ok()) return s;
  if (isP2p(metadata_uri) && file_segments.empty()) {
    return {Code::kInvalidArgument,
            fmt::format("metadata '{}': p2p segments are edited in the file segments JSON file that p2p engines "
                        "load; none is given (config file_segments, env {})",
                        metadata_uri, Config::envName("file_segments"))};
  }
  s = makeMetadataStore(metadata_uri, impl->config, /*rpc=*/nullptr, impl->store);
  if (!s.ok()) return s;
  out.reset(new MetadataAdmin(std::move(impl)));
  return Status::OK();
}

std::string MetadataAdmin::where() const { return impl_->store->where(); }

Status MetadataAdmin::list(std::vector<SegmentRecord>& out) {
  out.clear();
  std::vector<SegmentEntry> entries;
  Status s = impl_->store->listEntries(entries);
  if (!s.ok()) return s;
  for (auto& e : entries) out.push_back(recordOf(std::move(e)));
  return Status::OK();
}

Status MetadataAdmin::show(const std::string& name, SegmentRecord& out) {
  Status s = checkName(name);
  if (!s.ok()) return s;
  SegmentEntry e;
  s = impl_->store->getEntry(name, e);
  if (!s.ok()) return s;
  out = recordOf(std::move(e));
  return Status::OK();
}

Status MetadataAdmin::registerFileSegment(const std::string& name, const std::vector<FileDesc>& files, bool replace,
                                          SegmentRecord* stored) {
  Status s = checkName(name);
  if (!s.ok()) return s;
  if (files.empty()) return {Code::kInvalidArgument, fmt::format("file segment '{}' has no files", name)};
  for (size_t k = 0; k < files.size(); ++k) {
    const FileDesc& f = files[k];
    if (f.file_path.empty() || f.file_path[0] != '/')
      return {Code::kInvalidArgument,
              fmt::format("file segment '{}' file [{}]: file_path '{}' is not absolute", name, k, f.file_path)};
    if (f.length == 0)
      return {Code::kInvalidArgument, fmt::format("file segment '{}' file [{}] '{}' has length 0", name, k, f.file_path)};
  }
  SegmentDesc d;
  d.kind = SegmentDesc::Kind::kFile;
  d.name = name;
  d.files = files;
  s = impl_->store->registerFileSegment(d, replace);
  if (!s.ok()) return s;
  if (stored) {
    SegmentEntry e;
    if (!impl_->store->getEntry(name, e).ok()) {  // written, but not readable back: what we wrote
      e = SegmentEntry{};
      e.name = name;
      e.is_file = true;
      e.desc = d;
    }
    *stored = recordOf(std::move(e));
  }
  return Status::OK();
}

Status MetadataAdmin::mapFile(const std::string& name, const std::string& file, const std::string& host,
                              const std::string& local_path, size_t* index) {
  Status s = checkName(name);
  if (!s.ok()) return s;
  if (host.empty()) return {Code::kInvalidArgument, fmt::format("segment '{}': host is empty", name)};
  if (local_path.empty() || local_path[0] != '/')
    return {Code::kInvalidArgument, fmt::format("segment '{}': local path '{}' for host '{}' is not absolute", name, local_path, host)};
  const std::string resolved = resolvedPath(file);
  size_t which = 0;
  s = impl_->store->updateFileSegment(name, [&](SegmentDesc& d) -> Status {
    for (size_t k = 0; k < d.files.size(); ++k) {
      const auto& f = d.files[k];
      bool hit = f.file_path == file || (!resolved.empty() && f.file_path == resolved) || std::to_string(k) == file;
      for (auto& [h, p] : f.local_path_map) hit = hit || p == file;
      if (hit) {
        which = k;
        d.files[k].local_path_map[host] = local_path;
        return Status::OK();
      }
    }
    std::string known;
    for (size_t k = 0; k < d.files.size(); ++k) known += fmt::format("{}[{}] {}", k ? ", " : "", k, d.files[k].file_path);
    return {Code::kInvalidArgument,
            fmt::format("FILE '{}' is not a file of segment '{}' (its files: {})", file, name, known)};
  });
  if (!s.ok()) return s;
  if (index) *index = which;
  return Status::OK();
}

Status MetadataAdmin::remove(const std::string& name, bool force) {
  Status s = checkName(name);
  if (!s.ok()) return s;
  return impl_->store->removeEntry(name, force);
}

Status MetadataAdmin::checkName(const std::string& name) {
  if (name.empty()) return {Code::kInvalidArgument, "segment NAME is empty"};
  if (name.size() > 255)
    return {Code::kInvalidArgument, fmt::format("segment NAME '{}...' is longer than 255 bytes", name.substr(0, 32))};
  for (unsigned char c : name) {
    if (c == '/' || std::isspace(c) || std::iscntrl(c))
      return {Code::kInvalidArgument,
              fmt::format("segment NAME '{}' contains '/', whitespace or a control character", name)};
  }
  if (name.rfind("file:", 0) == 0)
    return {Code::kInvalidArgument, fmt::format("segment NAME '{}' must not start with file:", name)};
  return Status::OK();
}

Status MetadataAdmin::inspectFile(const std::string& path, FileDesc& out) {
  int err = 0;
  const std::string abs = resolvedPath(path, &err);
  if (abs.empty()) return errnoStatus(err, fmt::format("FILE '{}'", path));
  uint64_t length = 0;
  Status s = fileSize(abs, length);
  if (s.code() == Code::kInvalidArgument)
    return {s.code(), fmt::format("FILE '{}' is not a regular file or block device", path)};
  if (!s.ok()) return {s.code(), fmt::format("FILE '{}': {}", path, s.message())};
  if (length == 0)
    return {Code::kInvalidArgument, fmt::format("FILE '{}' is empty (a segment file needs >= 1 byte)", path)};
  if (::access(abs.c_str(), R_OK) != 0)
    return {Code::kPermissionDenied, fmt::format("FILE '{}' is not readable: {}", path, std::strerror(errno))};
  out = FileDesc{};
  out.file_path = abs;
  out.length = length;
  return Status::OK();
}

}  // namespace hawser
