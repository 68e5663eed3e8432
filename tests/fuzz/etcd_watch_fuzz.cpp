// etcd watch streams (src/metadata/etcd_watch_stream.h): the body of a
// /v3/watch response arrives in chunks cut anywhere. The input is the body;
// its first byte sets the chunk size. Invariant: feeding it in chunks gives
// the same events, creation and outcome as feeding it whole.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "metadata/etcd_watch_stream.h"

using namespace hawser;
using namespace hawser::etcd;

namespace {

struct Seen {
  int created = 0;
  std::vector<std::string> events;  // "rev type key value"
  bool go_on = true, canceled = false, compacted = false, bad = false;
  std::string reason;
};

Seen run(std::string_view body, size_t chunk) {
  Seen seen;
  std::function<void()> on_created = [&] { ++seen.created; };
  std::function<void(int64_t, const std::vector<WatchEvent>&)> on_events = [&](int64_t rev,
                                                                               const std::vector<WatchEvent>& evs) {
    for (const auto& e : evs)
      seen.events.push_back(std::to_string(rev) + (e.is_delete ? " D " : " P ") + e.kv.key + " " + e.kv.value);
  };
  WatchStream ws;
  ws.on_created = &on_created;
  ws.on_events = &on_events;
  for (size_t off = 0; off < body.size() && seen.go_on; off += chunk)
    seen.go_on = ws.feed(body.substr(off, chunk));
  seen.canceled = ws.canceled;
  seen.compacted = ws.compacted;
  seen.bad = ws.bad;
  seen.reason = ws.reason;
  FUZZ_CHECK(seen.go_on || ws.bad || ws.canceled);
  FUZZ_CHECK(seen.created <= 1 && (seen.created == 1) == ws.created);
  return seen;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input in(data, size);
  const size_t chunk = 1 + in.take<uint8_t>() % 32;
  const std::string_view body = in.rest();
  const Seen whole = run(body, body.size() + 1);
  const Seen cut = run(body, chunk);
  FUZZ_CHECK(whole.created == cut.created && whole.events == cut.events && whole.go_on == cut.go_on &&
             whole.canceled == cut.canceled && whole.compacted == cut.compacted && whole.bad == cut.bad &&
             whole.reason == cut.reason);
  return 0;
}
