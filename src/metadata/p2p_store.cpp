// P2pStore: descriptors served and fetched over the rpc listener, file
// segments of this process (persisted in the file segments JSON file,
// p2p_file_segments.h) and the admin verbs on them. Change notices to peers
// live in p2p_change_notices.cpp.
#include "metadata/p2p_store.h"

#include <fmt/format.h>

#include "base/config.h"
#include "base/log.h"
#include "rpc/rpc.h"

namespace hawser {

P2pStore::P2pStore(Config& config, rpc::Server* rpc) : config_(config), rpc_(rpc) { countChanges(); }

Status P2pStore::loadConfig() {
  Status s = config_.getString("file_segments", file_path_);
  if (s.ok()) s = config_.getDuration("rpc.timeout_ms", rpc_timeout_);
  return s;
}

Status P2pStore::start(const std::string& local_name, std::function<SegmentDesc()> local) {
  local_name_ = local_name;
  local_ = std::move(local);
  if (!file_path_.empty()) {
    std::lock_guard lk(mu_);
    Status s = loadFileSegments(file_path_, files_);
    if (!s.ok()) return s;
  }
  if (rpc_) {
    Status s = rpc_->onCall(kGetSegmentCall, [this](const std::string& requester, std::string& reply) {
      if (!local_) return Status(Code::kSegmentNotFound, "this engine exposes no memory segment");
      reply = encodeSegmentText(local_());
      std::string h;
      uint16_t p = 0;
      if (!requester.empty() && requester != local_name_ && net::splitHostPort(requester, h, p).ok()) {
        std::lock_guard lk(sub_mu_);
        subscribers_.insert(requester);
      }
      return Status::OK();
    });
    if (s.ok())
      s = rpc_->onCall(kSegmentChangedCall, [this](const std::string& owner, std::string&) {
        std::lock_guard lk(sub_mu_);
        changed_.insert(owner);
        noteChange();
        return Status::OK();
      });
    if (!s.ok()) return s;
    notifier_ = std::thread([this] { notifier(); });
  }
  return Status::OK();
}

void P2pStore::stop() {
  {
    std::lock_guard lk(sub_mu_);
    stopping_ = true;
  }
  sub_cv_.notify_all();
  if (notifier_.joinable()) notifier_.join();
}

std::string P2pStore::localSegmentName(const std::string&, const std::string& host, uint16_t port) const {
  return fmt::format("{}:{}", host, port);
}

Status P2pStore::getSegment(const std::string& name, SegmentDesc& out) {
  {
    std::lock_guard lk(mu_);
    auto it = files_.find(name);
    if (it != files_.end()) {
      out = it->second;
      return Status::OK();
    }
  }
  if (name == local_name_ && local_) {
    out = local_();
    return Status::OK();
  }
  std::string host;
  uint16_t port = 0;
  if (!net::splitHostPort(name, host, port).ok())
    return {Code::kSegmentNotFound,
            fmt::format("segment '{}' not found: not a registered file segment, and not HOST:PORT of a peer (p2p metadata)", name)};
  std::string reply;
  Status s = rpc::call(host, port, kGetSegmentCall.id, local_name_, reply,
                       rpc_timeout_);
  if (!s.ok()) {
    if (s.code() == Code::kUnavailable || s.code() == Code::kTimeout)
      return {Code::kSegmentNotFound, fmt::format("segment '{}' not found: {}", name, s.message())};
    return s;
  }
  SegmentDesc d;
  s = decodeSegmentText(reply, d);
  if (!s.ok()) return {s.code(), fmt::format("segment '{}': {}", name, s.message())};
  d.name = name;  // the name the caller knows it by
  out = std::move(d);
  return Status::OK();
}

Status P2pStore::save() {
  if (file_path_.empty()) return Status::OK();
  return saveFileSegments(file_path_, files_);
}

Status P2pStore::putFileSegment(const SegmentDesc& desc) {
  std::lock_guard lk(mu_);
  if (!file_path_.empty()) {  // another process (the segment tool) may have changed it
    Status s = loadFileSegments(file_path_, files_);
    if (!s.ok()) return s;
  }
  files_[desc.name] = desc;
  return save();
}

Status P2pStore::removeSegment(const std::string& name) {
  std::lock_guard lk(mu_);
  if (!file_path_.empty()) {
    Status s = loadFileSegments(file_path_, files_);
    if (!s.ok()) return s;
  }
  if (files_.erase(name) == 0) return {Code::kSegmentNotFound, fmt::format("no file segment named '{}'", name)};
  return save();
}

Status P2pStore::listSegments(std::vector<SegmentDesc>& out) {
  out.clear();
  if (local_) out.push_back(local_());
  std::lock_guard lk(mu_);
  for (auto& [n, d] : files_) out.push_back(d);
  return Status::OK();
}

// ---- administration -----------------------------------------------------------

std::string P2pStore::filePath() const {
  return file_path_;
}

std::string P2pStore::where() const {
  const std::string path = filePath();
  return path.empty() ? std::string("the file segments of this process") : "file segments '" + path + "'";
}

Status P2pStore::readFiles(FileSegmentMap& out) {
  const std::string path = filePath();
  if (path.empty()) {
    std::lock_guard lk(mu_);
    out = files_;
    return Status::OK();
  }
  return loadFileSegments(path, out);
}

Status P2pStore::editFiles(const std::function<Status(FileSegmentMap&, bool&)>& edit) {
  std::lock_guard lk(mu_);
  const std::string path = filePath();
  FileSegmentMap edited = files_;
  bool changed = false;
  auto run = [&](FileSegmentMap& segs, bool& dirty) {
    Status s = edit(segs, dirty);
    if (s.ok() && dirty) {
      edited = segs;
      changed = true;
    }
    return s;
  };
  Status s;
  if (path.empty()) {
    bool dirty = false;
    s = run(edited, dirty);
  } else {
    s = editFileSegments(path, run);
  }
  if (s.ok() && changed) files_ = std::move(edited);
  return s;
}

Status P2pStore::listEntries(std::vector<SegmentEntry>& out) {
  out.clear();
  FileSegmentMap segs;
  Status s = readFiles(segs);
  if (!s.ok()) return s;
  for (auto& [n, d] : segs) {
    SegmentEntry e;
    e.name = n;
    e.is_file = true;
    e.desc = d;
    out.push_back(std::move(e));
  }
  return Status::OK();
}

Status P2pStore::getEntry(const std::string& name, SegmentEntry& out) {
  FileSegmentMap segs;
  Status s = readFiles(segs);
  if (!s.ok()) return s;
  auto it = segs.find(name);
  if (it == segs.end()) return notFound(name);
  out = SegmentEntry{};
  out.name = name;
  out.is_file = true;
  out.desc = it->second;
  return Status::OK();
}

Status P2pStore::registerFileSegment(const SegmentDesc& desc, bool replace) {
  if (desc.kind != SegmentDesc::Kind::kFile)
    return {Code::kInvalidArgument, fmt::format("segment '{}' is not a file segment", desc.name)};
  return editFiles([&](FileSegmentMap& segs, bool& dirty) -> Status {
    if (!replace && segs.count(desc.name))
      return {Code::kInvalidArgument,
              fmt::format("segment '{}' already exists in {} (use --replace)", desc.name, location())};
    segs[desc.name] = desc;
    dirty = true;
    return Status::OK();
  });
}

Status P2pStore::updateFileSegment(const std::string& name, const std::function<Status(SegmentDesc&)>& edit) {
  return editFiles([&](FileSegmentMap& segs, bool& dirty) -> Status {
    auto it = segs.find(name);
    if (it == segs.end()) return notFound(name);
    Status s = edit(it->second);
    if (s.ok()) dirty = true;
    return s;
  });
}

Status P2pStore::removeEntry(const std::string& name, bool /*force: p2p stores no memory segments*/) {
  return editFiles([&](FileSegmentMap& segs, bool& dirty) -> Status {
    if (segs.erase(name) == 0) return notFound(name);
    dirty = true;
    return Status::OK();
  });
}

std::string P2pStore::location() const {
  const std::string path = filePath();
  return path.empty() ? std::string("this process") : path;
}

Status P2pStore::notFound(const std::string& name) const {
  return {Code::kSegmentNotFound, fmt::format("no file segment '{}' in {}", name, location())};
}

}  // namespace hawser
