#include "metadata/etcd_watch_stream.h"

namespace hawser::etcd {

void WatchStream::handleLine(std::string_view line) {
  nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    bad = true;
    reason = "malformed watch message";
    return;
  }
  if (j.contains("error")) {
    canceled = true;
    const auto& e = j["error"];
    reason = e.is_object() ? e.value("message", std::string("watch error")) : std::string("watch error");
    return;
  }
  const auto& r = j.value("result", nlohmann::json::object());
  if (jsonInt(r, "compact_revision") > 0) {
    canceled = true;
    compacted = true;
    reason = "history compacted past the start revision";
    return;
  }
  if (r.value("canceled", false)) {
    canceled = true;
    reason = r.value("cancel_reason", std::string("watch canceled by etcd"));
    return;
  }
  if (r.value("created", false) && !created) {
    created = true;
    if (on_created && *on_created) (*on_created)();
  }
  auto evs = r.find("events");
  if (evs == r.end() || !evs->is_array() || evs->empty()) return;
  std::vector<WatchEvent> events;
  for (const auto& e : *evs) {
    WatchEvent ev;
    ev.is_delete = e.value("type", std::string()) == "DELETE";
    if (!parseKv(e.value("kv", nlohmann::json::object()), ev.kv)) {
      bad = true;
      reason = "malformed kv in a watch event";
      return;
    }
    events.push_back(std::move(ev));
  }
  int64_t rev = jsonInt(r.value("header", nlohmann::json::object()), "revision");
  if (on_events && *on_events) (*on_events)(rev, events);
}

bool WatchStream::feed(std::string_view data) {
  buffer.append(data);
  size_t pos;
  while ((pos = buffer.find('\n')) != std::string::npos) {
    std::string line = buffer.substr(0, pos);
    buffer.erase(0, pos + 1);
    if (line.find_first_not_of(" \r\t") == std::string::npos) continue;
    handleLine(line);
    if (bad || canceled) return false;  // stop the stream
  }
  // A complete object without a trailing newline (defensive).
  if (!buffer.empty() && buffer.size() > (64u << 20)) return false;
  return true;
}

}  // namespace hawser::etcd
