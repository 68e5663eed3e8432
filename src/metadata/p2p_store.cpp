#include "metadata/p2p_store.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "base/config.h"
#include "base/log.h"
#include "rpc/rpc.h"

namespace hawser {

Status loadFileSegments(const std::string& path, std::map<std::string, SegmentDesc>& out) {
  std::ifstream in(path);
  if (!in) {
    if (errno == ENOENT) return Status::OK();  // nothing yet
    return {Code::kMetadataError, fmt::format("file segments '{}': {}", path, std::strerror(errno))};
  }
  std::stringstream ss;
  ss << in.rdbuf();
  auto j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return {Code::kMetadataError, fmt::format("file segments '{}': not a JSON object", path)};
  auto segs = j.find("segments");
  if (segs == j.end() || !segs->is_array())
    return {Code::kMetadataError, fmt::format("file segments '{}': field 'segments' must be an array", path)};
  std::map<std::string, SegmentDesc> got;
  for (auto& js : *segs) {
    SegmentDesc d;
    Status s = decodeSegment(js, d);
    if (!s.ok()) return {s.code(), fmt::format("file segments '{}': {}", path, s.message())};
    if (d.kind != SegmentDesc::Kind::kFile)
      return {Code::kMetadataError, fmt::format("file segments '{}': segment '{}' is not of kind file", path, d.name)};
    got[d.name] = std::move(d);
  }
  out = std::move(got);
  return Status::OK();
}

Status saveFileSegments(const std::string& path, const std::map<std::string, SegmentDesc>& segs) {
  nlohmann::json j;
  j["version"] = fmt::format("{}.{}", kDescriptorMajor, kDescriptorMinor);
  j["segments"] = nlohmann::json::array();
  for (auto& [n, d] : segs) j["segments"].push_back(encodeSegment(d));
  std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) return {Code::kMetadataError, fmt::format("cannot write '{}': {}", tmp, std::strerror(errno))};
    out << j.dump(2) << "\n";
    if (!out.flush()) return {Code::kMetadataError, fmt::format("cannot write '{}'", tmp)};
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    return {Code::kMetadataError, fmt::format("cannot rename '{}' to '{}': {}", tmp, path, std::strerror(errno))};
  return Status::OK();
}

P2pStore::P2pStore(Config& config, rpc::Server* rpc) : config_(config), rpc_(rpc) {}

Status P2pStore::start(const std::string& local_name, std::function<SegmentDesc()> local) {
  local_name_ = local_name;
  local_ = std::move(local);
  file_path_ = config_.getString("file_segments", "");
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

Status P2pStore::publishLocal() {
  {
    std::lock_guard lk(sub_mu_);
    if (subscribers_.empty()) return Status::OK();
    dirty_ = true;
  }
  sub_cv_.notify_all();
  return Status::OK();
}

void P2pStore::notifier() {
  std::unique_lock lk(sub_mu_);
  while (true) {
    sub_cv_.wait(lk, [&] { return stopping_ || dirty_; });
    if (stopping_) return;
    dirty_ = false;
    std::set<std::string> subs = subscribers_;
    lk.unlock();
    std::vector<std::string> gone;
    for (auto& peer : subs) {
      std::string host, reply;
      uint16_t port = 0;
      if (!net::splitHostPort(peer, host, port).ok()) continue;
      Status s = rpc::call(host, port, kSegmentChangedCall.id, local_name_, reply, std::chrono::milliseconds(1000));
      if (!s.ok()) {
        HLOG_DEBUG("p2p: change notice to {} failed ({}); dropping it", peer, s.toString());
        gone.push_back(peer);
      }
    }
    lk.lock();
    for (auto& g : gone) subscribers_.erase(g);
  }
}

bool P2pStore::mayHaveChanged(const std::string& name, uint64_t) {
  std::lock_guard lk(sub_mu_);
  return changed_.erase(name) > 0;
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
                       std::chrono::milliseconds(config_.getInt("rpc.timeout_ms", 5000)));
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

}  // namespace hawser
