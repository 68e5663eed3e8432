#include "metadata/etcd_watch_stream.h"

#include "metadata/etcd_replies.h"

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
    reason = memberString(member(j, "error"), "message", "watch error");
    return;
  }
  const auto& r = member(j, "result");
  if (jsonInt(r, "compact_revision") > 0) {
    canceled = true;
    compacted = true;
    reason = "history compacted past the start revision";
    return;
  }
  if (memberBool(r, "canceled")) {
    canceled = true;
    reason = memberString(r, "cancel_reason", "watch canceled by etcd");
    return;
  }
  if (memberBool(r, "created") && !created) {
    created = true;
    if (on_created && *on_created) (*on_created)();
  }
  const auto& evs = member(r, "events");
  if (!evs.is_array() || evs.empty()) return;
  std::vector<WatchEvent> events;
  for (const auto& e : evs) {
    WatchEvent ev;
    ev.is_delete = memberString(e, "type") == "DELETE";
    if (!parseKv(member(e, "kv"), ev.kv)) {
      bad = true;
      reason = "malformed kv in a watch event";
      return;
    }
    events.push_back(std::move(ev));
  }
  int64_t rev = jsonInt(member(r, "header"), "revision");
  if (on_events && *on_events) (*on_events)(rev, events);
}

bool WatchStream::feed(std::string_view data) {
  buffer.append(data);
  size_t begin = 0, pos;
  bool go_on = true;
  while ((pos = buffer.find('\n', begin)) != std::string::npos) {
    std::string_view line(buffer.data() + begin, pos - begin);
    begin = pos + 1;
    if (line.find_first_not_of(" \r\t") == std::string_view::npos) continue;
    handleLine(line);
    if (bad || canceled) {  // stop the stream
      go_on = false;
      break;
    }
  }
  buffer.erase(0, begin);
  // A message without its newline keeps growing: bounded.
  if (go_on && buffer.size() > kMaxMessage) {
    bad = true;
    reason = "watch message larger than " + std::to_string(kMaxMessage) + " bytes";
    go_on = false;
  }
  return go_on;
}

}  // namespace hawser::etcd
