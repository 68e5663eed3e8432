// HttpStore (http_store.h): Mooncake's HTTP metadata protocol.
#include "metadata/http_store.h"

#include <cctype>

#include "base/config.h"
#include "base/log.h"
#include "metadata/etcd_store_options.h"
#include "metadata/name_claim.h"

namespace hawser {

namespace {

using std::chrono::milliseconds;

// Descriptors are small; a server answering more is not a metadata server.
constexpr size_t kMaxValueBytes = 64u << 20;

std::string bodyExcerpt(const std::string& body) {
  std::string s = body.substr(0, 120);
  for (char& c : s)
    if (!std::isprint(static_cast<unsigned char>(c))) c = '?';
  return s;
}

}  // namespace

HttpStore::HttpStore(std::string url, HttpStoreOptions options)
    : url_(std::move(url)), options_(std::move(options)), http_(kMaxValueBytes) {
  countChanges();
}

HttpStore::~HttpStore() { stop(); }

std::string HttpStore::where() const { return "HTTP metadata server " + url_ + " (prefix '" + options_.prefix + "')"; }

Status HttpStore::call(const std::string& method, const std::string& key, const std::string* body,
                       http::Response& res) {
  http::Request req;
  req.method = method;
  req.url = url_ + "?key=" + http::Client::escape(key);
  req.body = body;
  if (body) req.content_type = "application/json";
  req.timeout = options_.timeout;
  req.connect_timeout = options_.connect_timeout;
  Status st = http_.send(req, res);
  if (!st.ok())
    return Status(st.code(), "HTTP metadata server " + url_ + " " +
                                 (st.code() == Code::kTimeout ? "did not answer in time" : "is unreachable") +
                                 " (" + st.message() + ")");
  return st;
}

Status HttpStore::get(const std::string& key, std::string& value, bool& found) {
  http::Response res;
  Status st = call("GET", key, nullptr, res);
  if (!st.ok()) return st;
  found = res.status == 200;
  if (res.status != 200 && res.status != 404)
    return Status(Code::kMetadataError, "HTTP metadata server " + url_ + ": GET key '" + key + "' answered HTTP " +
                                            std::to_string(res.status) + ": " + bodyExcerpt(res.body));
  value = found ? std::move(res.body) : std::string();
  return Status::OK();
}

Status HttpStore::put(const std::string& key, const std::string& value) {
  http::Response res;
  Status st = call("PUT", key, &value, res);
  if (!st.ok()) return st;
  if (res.status != 200)
    return Status(Code::kMetadataError, "HTTP metadata server " + url_ + ": PUT key '" + key + "' answered HTTP " +
                                            std::to_string(res.status) + ": " + bodyExcerpt(res.body));
  return Status::OK();
}

Status HttpStore::del(const std::string& key, bool& found) {
  http::Response res;
  Status st = call("DELETE", key, nullptr, res);
  if (!st.ok()) return st;
  if (res.status != 200 && res.status != 404)
    return Status(Code::kMetadataError, "HTTP metadata server " + url_ + ": DELETE key '" + key +
                                            "' answered HTTP " + std::to_string(res.status) + ": " +
                                            bodyExcerpt(res.body));
  found = res.status == 200;
  return Status::OK();
}

Status HttpStore::connect() {
  std::string value;
  bool found = false;
  return get(options_.prefix + "/probe", value, found);
}

// ---- the local segment ---------------------------------------------------------

Status HttpStore::start(const std::string& local_name, std::function<SegmentDesc()> local) {
  Status st = checkSegmentName(local_name);
  if (!st.ok()) return Status(Code::kInvalidArgument, "local_server_name: " + st.message());
  if (!local) return Status(Code::kInvalidArgument, "HTTP store start: no local descriptor function");
  if (started_.load()) return Status(Code::kInternal, "HTTP store started twice");
  local_name_ = local_name;
  local_ = std::move(local);
  st = publish(/*claim=*/true);
  if (!st.ok()) return st;
  {
    std::lock_guard lk(poll_mu_);
    stopping_ = false;
  }
  started_.store(true);
  poller_ = std::thread([this] { pollLoop(); });
  return Status::OK();
}

void HttpStore::stop() {
  if (!started_.exchange(false)) return;
  {
    std::lock_guard lk(poll_mu_);
    stopping_ = true;
  }
  poll_cv_.notify_all();
  if (poller_.joinable()) poller_.join();
  // No lease: the entry is removed here, on a clean stop.
  bool found = false;
  Status st = del(segmentKey(local_name_), found);
  if (!st.ok())
    HLOG_WARN("HTTP metadata: could not remove segment '{}' at shutdown: {}; it stays until the name is reused",
              local_name_, st.message());
}

Status HttpStore::publishLocal() {
  if (!started_.load()) return Status::OK();  // start() publishes the first version
  return publish(/*claim=*/false);
}

Status HttpStore::publish(bool claim) {
  std::lock_guard lk(publish_mu_);
  SegmentDesc d = local_();
  d.kind = SegmentDesc::Kind::kMemory;
  d.name = local_name_;
  if (d.server_name.empty()) d.server_name = local_name_;
  const std::string key = segmentKey(local_name_);
  if (claim) {
    // A name held by a live engine elsewhere is refused (its owner answers
    // a ping); a stale one, left by a crash, is taken over.
    std::string value;
    bool found = false;
    Status st = get(key, value, found);
    if (!st.ok()) return st;
    SegmentDesc old;
    if (found && decodeSegmentText(value, old).ok()) {
      st = checkNameOwner(local_name_, old, d, url_);
      if (!st.ok()) return st;
      if (!(old.host == d.host && old.rpc_port == d.rpc_port))
        HLOG_INFO("HTTP metadata: taking over stale key {} (owner {}:{} unreachable)", key, old.host, old.rpc_port);
    }
  }
  return put(key, encodeSegmentText(d));
}

// ---- reads -------------------------------------------------------------------

Status HttpStore::getEntry(const std::string& name, SegmentEntry& out) {
  Status st = checkSegmentName(name);
  if (!st.ok()) return st;
  out = SegmentEntry{};
  out.name = name;
  std::string value;
  bool found = false;
  for (bool is_file : {false, true}) {
    const std::string key = is_file ? fileKey(name) : segmentKey(name);
    st = get(key, value, found);
    if (!st.ok()) return st;
    if (!found) continue;
    out.key = key;
    out.is_file = is_file;
    out.decode = decodeSegmentText(value, out.desc);
    if (out.decode.ok() && is_file != (out.desc.kind == SegmentDesc::Kind::kFile))
      out.decode = Status(Code::kMetadataError, "key '" + key + "' holds a " + (is_file ? "memory" : "file") +
                                                    " segment descriptor");
    std::lock_guard lk(state_mu_);
    fetched_[name] = Fetched{key, value, false};
    noteChange();
    return Status::OK();
  }
  return Status(Code::kSegmentNotFound, "segment '" + name + "' not found on " + where() + " (no key " +
                                            segmentKey(name) + " or " + fileKey(name) + ")");
}

Status HttpStore::getSegment(const std::string& name, SegmentDesc& out) {
  SegmentEntry e;
  Status st = getEntry(name, e);
  if (st.code() == Code::kSegmentNotFound) {
    // A cached copy of a deleted segment is as fresh as it gets until the
    // key comes back: stop flagging it.
    std::lock_guard lk(state_mu_);
    auto f = fetched_.find(name);
    if (f != fetched_.end()) f->second = Fetched{f->second.key, std::string(), false};
  }
  if (!st.ok()) return st;
  if (!e.decode.ok()) return Status(Code::kMetadataError, "key '" + e.key + "' on " + url_ + ": " + e.decode.message());
  out = std::move(e.desc);
  return Status::OK();
}

bool HttpStore::mayHaveChanged(const std::string& name, uint64_t) {
  std::lock_guard lk(state_mu_);
  auto f = fetched_.find(name);
  return f == fetched_.end() || f->second.changed;  // never fetched here: unknown
}

void HttpStore::pollLoop() {
  std::unique_lock lk(poll_mu_);
  while (!poll_cv_.wait_for(lk, options_.poll, [&] { return stopping_; })) {
    lk.unlock();
    std::map<std::string, Fetched> seen;
    {
      std::lock_guard sl(state_mu_);
      for (auto& [name, f] : fetched_)
        if (!f.changed) seen[name] = f;
    }
    for (auto& [name, f] : seen) {
      std::string value;
      bool found = false;
      if (!get(f.key, value, found).ok()) break;  // unreachable: cached descriptors keep serving
      if (found && value == f.value) continue;
      if (!found && f.value.empty()) continue;  // still gone
      std::lock_guard sl(state_mu_);
      auto it = fetched_.find(name);
      if (it != fetched_.end() && it->second.value == f.value) {
        it->second.changed = true;
        noteChange();
      }
    }
    lk.lock();
  }
}

Status HttpStore::listSegments(std::vector<SegmentDesc>& out) {
  out.clear();
  return Status(Code::kNotSupported,
                where() + ": Mooncake's HTTP metadata protocol has no listing (GET/PUT/DELETE of one key)");
}

// ---- file segments -------------------------------------------------------------

Status HttpStore::putFileSegment(const SegmentDesc& desc) {
  Status st = checkSegmentName(desc.name);
  if (!st.ok()) return st;
  if (desc.kind != SegmentDesc::Kind::kFile)
    return Status(Code::kInvalidArgument, "segment '" + desc.name + "' is not a file segment");
  return put(fileKey(desc.name), encodeSegmentText(desc));
}

Status HttpStore::removeSegment(const std::string& name) {
  Status st = checkSegmentName(name);
  if (!st.ok()) return st;
  bool found = false;
  st = del(fileKey(name), found);
  if (!st.ok()) return st;
  // The Go server answers 200 for an absent key too: found == true then.
  if (!found) return Status(Code::kSegmentNotFound, "file segment '" + name + "' not found on " + where());
  return Status::OK();
}

Status HttpStore::registerFileSegment(const SegmentDesc& desc, bool replace) {
  SegmentEntry e;
  Status st = getEntry(desc.name, e);
  if (st.ok() && !e.is_file)
    return Status(Code::kInvalidArgument,
                  "'" + desc.name + "' is a memory segment on " + url_ + "; a file segment cannot take its name");
  if (st.ok() && !replace)
    return Status(Code::kInvalidArgument, "file segment '" + desc.name + "' already exists on " + url_);
  if (!st.ok() && st.code() != Code::kSegmentNotFound) return st;
  return putFileSegment(desc);
}

Status HttpStore::updateFileSegment(const std::string& name, const std::function<Status(SegmentDesc&)>& edit) {
  // The protocol has no compare-and-swap: a concurrent edit of the same
  // segment by another process can be lost (documented in docs/metadata.md).
  SegmentEntry e;
  Status st = getEntry(name, e);
  if (!st.ok()) return st;
  if (!e.is_file) return Status(Code::kInvalidArgument, "'" + name + "' is a memory segment, not a file segment");
  if (!e.decode.ok()) return e.decode;
  st = edit(e.desc);
  if (!st.ok()) return st;
  return putFileSegment(e.desc);
}

Status HttpStore::removeEntry(const std::string& name, bool force) {
  SegmentEntry e;
  Status st = getEntry(name, e);
  if (!st.ok()) return st;
  if (!e.is_file && !force)
    return Status(Code::kInvalidArgument, "'" + name + "' is the memory segment of the engine at " + e.desc.host +
                                              ":" + std::to_string(e.desc.rpc_port) +
                                              " (pid " + std::to_string(e.desc.pid) + "); --force removes it");
  bool found = false;
  return del(e.key, found);
}

// ---- factory -------------------------------------------------------------------

Status makeHttpStore(const std::string& uri, Config& config, std::unique_ptr<MetadataStore>& out) {
  // "http://host:port/path": a host, an optional port, a path (Mooncake's servers use /metadata).
  const std::string rest = uri.substr(7);
  const size_t slash = rest.find('/');
  const std::string authority = rest.substr(0, slash);
  bool ok = !authority.empty() && slash != std::string::npos && slash + 1 < rest.size() &&
            rest.find_first_of("?# ") == std::string::npos;
  if (ok) {
    const size_t colon = authority.rfind(':');
    if (colon != std::string::npos && authority.back() != ']') {
      const std::string port = authority.substr(colon + 1);
      ok = colon > 0 && !port.empty() && port.size() <= 5 &&
           port.find_first_not_of("0123456789") == std::string::npos && std::stoul(port) <= 65535;
    }
  }
  if (!ok)
    return Status(Code::kInvalidArgument, "metadata_uri '" + uri +
                                              "': expected http://host:port/path (Mooncake's HTTP metadata server, "
                                              "e.g. http://10.0.0.1:8080/metadata)");
  HttpStoreOptions opt;
  Status st = config.getString("metadata.prefix", opt.prefix);
  if (st.ok() && (opt.prefix.empty() || opt.prefix.back() == '/'))
    st = Status(Code::kInvalidArgument,
                "metadata.prefix '" + opt.prefix + "' must be non-empty without a trailing '/'");
  if (st.ok()) st = config.getDuration("metadata.http_timeout_ms", opt.timeout);
  if (st.ok()) st = config.getDuration("metadata.http_poll_ms", opt.poll);
  if (!st.ok()) return st;
  opt.connect_timeout = std::min(milliseconds(1000), std::max(milliseconds(1), opt.timeout / 3));
  auto store = std::make_unique<HttpStore>(uri, opt);
  st = store->connect();
  if (!st.ok()) return st;
  out = std::move(store);
  return Status::OK();
}

}  // namespace hawser
