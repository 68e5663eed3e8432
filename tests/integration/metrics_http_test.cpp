// The Prometheus endpoint: `hawser serve --metrics` and the in-process
// MetricsServer (tools/metrics_http.cpp) scraped over HTTP with a raw
// socket. Every scrape is checked by a parser of the text format (TYPE'd
// families, label syntax, counters ending in _total, histogram buckets
// cumulative and ending in +Inf with _count equal); the counters must move
// by exactly the bytes and requests the test moved.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <sstream>

#include "common/util.h"
#include "engine/access.h"
#include "hawser/engine.h"
#include "hawser/stats.h"
#include "metadata/store.h"
#include "tools/metrics_http.h"

namespace hawser::test {
namespace {

// ---- an HTTP client ---------------------------------------------------------------

int connectTo(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

struct Reply {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
};

// Reads until the server closes (every answer closes its connection), 10 s at most.
bool readReply(int fd, Reply& r) {
  std::string raw;
  char buf[65536];
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    raw.append(buf, static_cast<size_t>(n));
  }
  const size_t end = raw.find("\r\n\r\n");
  if (end == std::string::npos || raw.compare(0, 9, "HTTP/1.1 ") != 0) return false;
  r.status = std::atoi(raw.c_str() + 9);
  std::istringstream hs(raw.substr(0, end));
  std::string line;
  std::getline(hs, line);
  while (std::getline(hs, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string k = line.substr(0, colon);
    for (char& c : k) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    r.headers[k] = line.substr(line.find_first_not_of(' ', colon + 1));
  }
  r.body = raw.substr(end + 4);
  return true;
}

Reply request(uint16_t port, const std::string& text) {
  Reply r;
  int fd = connectTo(port);
  if (fd < 0) return r;
  ::send(fd, text.data(), text.size(), MSG_NOSIGNAL);
  if (!readReply(fd, r)) r.status = -1;
  ::close(fd);
  return r;
}

Reply get(uint16_t port, const std::string& path = "/metrics") {
  return request(port, "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/plain\r\n\r\n");
}

// ---- a checker of the text format (0.0.4) -------------------------------------------------

using Labels = std::map<std::string, std::string>;

struct Series {
  std::string name;  // as written (with _bucket/_sum/_count)
  Labels labels;
  double value = 0;
};

struct Scrape {
  std::map<std::string, std::string> types;  // family -> type
  std::vector<Series> series;
  std::string error;  // first format violation, "" if none

  // The value of `name` whose labels include `want`; NaN when there is none
  // or more than one.
  double value(const std::string& name, const Labels& want) const {
    double v = std::nan("");
    int hits = 0;
    for (const Series& s : series) {
      if (s.name != name) continue;
      bool ok = true;
      for (const auto& [k, x] : want) ok &= s.labels.count(k) && s.labels.at(k) == x;
      if (ok) {
        v = s.value;
        ++hits;
      }
    }
    return hits == 1 ? v : std::nan("");
  }
};

bool validName(const std::string& n, bool label) {
  if (n.empty()) return false;
  for (size_t i = 0; i < n.size(); ++i) {
    char c = n[i];
    bool ok = std::isalpha(static_cast<unsigned char>(c)) || c == '_' || (!label && c == ':') ||
              (i > 0 && std::isdigit(static_cast<unsigned char>(c)));
    if (!ok) return false;
  }
  return true;
}

// Parses `text` strictly; sets error at the first violation.
Scrape parse(const std::string& text) {
  Scrape out;
  auto fail = [&](const std::string& why, const std::string& line) {
    if (out.error.empty()) out.error = why + ": '" + line + "'";
  };
  std::set<std::string> helped;
  std::istringstream in(text);
  std::string line;
  if (!text.empty() && text.back() != '\n') fail("text does not end with a line feed", "");
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line[0] == '#') {
      std::istringstream ls(line);
      std::string hash, kind, name, rest;
      ls >> hash >> kind >> name;
      std::getline(ls, rest);
      if (kind == "HELP") {
        if (!validName(name, false)) fail("bad HELP name", line);
        helped.insert(name);
      } else if (kind == "TYPE") {
        rest.erase(0, rest.find_first_not_of(' '));
        if (rest != "counter" && rest != "gauge" && rest != "histogram") fail("unknown TYPE", line);
        if (out.types.count(name)) fail("second TYPE line", line);
        if (rest == "counter" && !name.ends_with("_total")) fail("counter without _total", line);
        out.types[name] = rest;
      }
      continue;
    }
    Series s;
    size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
    s.name = line.substr(0, i);
    if (!validName(s.name, false)) fail("bad metric name", line);
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        size_t eq = line.find('=', i);
        if (eq == std::string::npos || eq + 1 >= line.size() || line[eq + 1] != '"') {
          fail("bad label", line);
          break;
        }
        std::string k = line.substr(i, eq - i);
        if (!validName(k, true)) fail("bad label name", line);
        std::string v;
        size_t j = eq + 2;
        for (; j < line.size() && line[j] != '"'; ++j) {
          if (line[j] == '\\' && j + 1 < line.size()) {
            char e = line[++j];
            if (e == 'n') v += '\n';
            else if (e == '\\' || e == '"') v += e;
            else fail("bad escape", line);
          } else {
            v += line[j];
          }
        }
        if (j >= line.size()) {
          fail("unterminated label value", line);
          break;
        }
        if (s.labels.count(k)) fail("label twice", line);
        s.labels[k] = v;
        i = j + 1;
        if (i < line.size() && line[i] == ',') ++i;
      }
      if (i >= line.size()) {
        fail("unterminated label set", line);
        continue;
      }
      ++i;  // '}'
    }
    if (i >= line.size() || line[i] != ' ') {
      fail("no value", line);
      continue;
    }
    const std::string v = line.substr(i + 1);
    if (v == "+Inf") s.value = INFINITY;
    else if (v == "-Inf") s.value = -INFINITY;
    else if (v == "NaN") s.value = std::nan("");
    else {
      char* end = nullptr;
      s.value = std::strtod(v.c_str(), &end);
      if (end == v.c_str() || *end != '\0') fail("value is not a number", line);
    }
    // Its family must have been TYPE'd (and HELP'd) before it.
    std::string fam = s.name;
    std::string type = out.types.count(fam) ? out.types[fam] : "";
    if (type.empty())
      for (const char* suffix : {"_bucket", "_sum", "_count"})
        if (fam.ends_with(suffix)) {
          std::string base = fam.substr(0, fam.size() - std::strlen(suffix));
          if (out.types.count(base) && out.types[base] == "histogram") {
            fam = base;
            type = "histogram";
          }
        }
    if (type.empty()) fail("sample of a family without TYPE", line);
    if (!helped.count(fam)) fail("sample of a family without HELP", line);
    if (type == "histogram" && s.name.ends_with("_bucket") != s.labels.count("le"))
      fail("le label outside _bucket or missing in it", line);
    if (type == "counter" && !(s.value >= 0)) fail("negative counter", line);
    out.series.push_back(std::move(s));
  }
  // Histograms: per label set, buckets cumulative (le ascending), the last
  // one +Inf, equal to _count.
  for (const auto& [fam, type] : out.types) {
    if (type != "histogram") continue;
    std::map<Labels, std::vector<std::pair<double, double>>> buckets;
    std::map<Labels, double> counts;
    for (const Series& s : out.series) {
      if (s.name == fam + "_bucket") {
        Labels l = s.labels;
        const std::string le = l["le"];
        l.erase("le");
        buckets[l].emplace_back(le == "+Inf" ? INFINITY : std::strtod(le.c_str(), nullptr), s.value);
      } else if (s.name == fam + "_count") {
        counts[s.labels] = s.value;
      }
    }
    for (const auto& [l, bs] : buckets) {
      for (size_t k = 1; k < bs.size(); ++k) {
        if (!(bs[k].first > bs[k - 1].first)) fail("bucket bounds not ascending in " + fam, "");
        if (bs[k].second < bs[k - 1].second) fail("buckets not cumulative in " + fam, "");
      }
      if (bs.empty() || !std::isinf(bs.back().first)) fail("last bucket of " + fam + " is not +Inf", "");
      else if (!counts.count(l) || counts[l] != bs.back().second) fail(fam + "_count differs from the +Inf bucket", "");
    }
    if (buckets.size() != counts.size()) fail(fam + ": a _count without buckets", "");
  }
  return out;
}

Scrape scrape(uint16_t port) {
  Reply r = get(port);
  Scrape s;
  if (r.status != 200) {
    s.error = "HTTP status " + std::to_string(r.status);
    return s;
  }
  if (r.headers["content-type"].rfind("text/plain; version=0.0.4", 0) != 0) {
    s.error = "content type '" + r.headers["content-type"] + "'";
    return s;
  }
  if (r.headers["content-length"] != std::to_string(r.body.size())) {
    s.error = "content length " + r.headers["content-length"] + " for a body of " + std::to_string(r.body.size());
    return s;
  }
  return parse(r.body);
}

TEST(MetricsFormatChecker, rejects_what_prometheus_would) {
  EXPECT_EQ(parse("# HELP a_total h\n# TYPE a_total counter\na_total 1\n").error, "");
  EXPECT_NE(parse("a_total 1\n").error, "");                                             // no TYPE
  EXPECT_NE(parse("# HELP a h\n# TYPE a counter\na 1\n").error, "");                     // counter without _total
  EXPECT_NE(parse("# HELP a h\n# TYPE a gauge\na{x=\"1} 1\n").error, "");                // unterminated
  EXPECT_NE(parse("# HELP a h\n# TYPE a gauge\na{x=\"\\t\"} 1\n").error, "");            // bad escape
  const std::string h = "# HELP h h\n# TYPE h histogram\n";
  EXPECT_EQ(parse(h + "h_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 3\nh_count 2\n").error, "");
  EXPECT_NE(parse(h + "h_bucket{le=\"1\"} 3\nh_bucket{le=\"+Inf\"} 2\nh_sum 3\nh_count 2\n").error, "");  // not cumulative
  EXPECT_NE(parse(h + "h_bucket{le=\"1\"} 1\nh_sum 3\nh_count 1\n").error, "");                            // no +Inf
  EXPECT_NE(parse(h + "h_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 3\nh_count 3\n").error, "");  // count
}

// ---- the in-process server ------------------------------------------------------------

TEST(MetricsHttp, answers_metrics_404_others_405_other_methods_and_head_without_body) {
  tools::MetricsServer srv;
  std::atomic<int> renders{0};
  ASSERT_TRUE(srv.start("127.0.0.1", 0, [&] {
                   ++renders;
                   return std::string("# HELP x_total x\n# TYPE x_total counter\nx_total 42\n");
                 }).ok());
  ASSERT_NE(srv.port(), 0);
  Reply ok = get(srv.port(), "/metrics?name[]=x");
  EXPECT_EQ(ok.status, 200);
  EXPECT_EQ(ok.headers["content-type"], "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(ok.body, "# HELP x_total x\n# TYPE x_total counter\nx_total 42\n");
  EXPECT_EQ(ok.headers["connection"], "close");
  EXPECT_EQ(get(srv.port(), "/").status, 404);
  EXPECT_EQ(get(srv.port(), "/metricsx").status, 404);
  Reply post = request(srv.port(), "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
  EXPECT_EQ(post.status, 405);
  EXPECT_EQ(post.headers["allow"], "GET, HEAD");
  Reply head = request(srv.port(), "HEAD /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.body, "");
  EXPECT_EQ(head.headers["content-length"], ok.headers["content-length"]);
  EXPECT_EQ(request(srv.port(), "garbage\r\n\r\n").status, 400);
  EXPECT_EQ(renders.load(), 2);  // once per 200 answer (GET and HEAD), never for the others
}

TEST(MetricsHttp, serves_many_scrapers_at_once_while_one_stalls) {
  tools::MetricsServer srv;
  ASSERT_TRUE(srv.start("127.0.0.1", 0, [] { return std::string(100000, '#') + "\n"; }).ok());
  // A scraper that connects, sends half a request and stalls.
  int stalled = connectTo(srv.port());
  ASSERT_GE(stalled, 0);
  ASSERT_EQ(::send(stalled, "GET /met", 8, MSG_NOSIGNAL), 8);
  // Sixteen more, all connected before any reads its answer.
  std::vector<int> fds;
  for (int i = 0; i < 16; ++i) {
    int fd = connectTo(srv.port());
    ASSERT_GE(fd, 0);
    const std::string req = "GET /metrics HTTP/1.1\r\n\r\n";
    ASSERT_EQ(::send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
    fds.push_back(fd);
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (int fd : fds) {
    Reply r;
    ASSERT_TRUE(readReply(fd, r));
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.body.size(), 100001u);
    ::close(fd);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(4))
      << "the stalled scraper (dropped after 5 s) held the others up";
  // The stalled one is dropped at its deadline: the server closes it.
  Reply none;
  EXPECT_FALSE(readReply(stalled, none));
  ::close(stalled);
  EXPECT_EQ(get(srv.port()).status, 200);
}

TEST(MetricsHttp, a_bad_address_is_refused_with_the_reason) {
  tools::MetricsServer srv;
  Status s = srv.start("not-an-ip", 0, [] { return std::string(); });
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.toString();
  EXPECT_NE(s.message().find("not-an-ip"), std::string::npos) << s.message();
  tools::MetricsServer a, b;
  ASSERT_TRUE(a.start("127.0.0.1", 0, [] { return std::string(); }).ok());
  s = b.start("127.0.0.1", a.port(), [] { return std::string(); });
  EXPECT_EQ(s.code(), Code::kUnavailable) << s.toString();
}

// ---- `hawser serve --metrics` and an initiator, counters moving with traffic ------------------

TEST(MetricsHttp, serve_and_initiator_counters_move_by_exactly_what_was_moved) {
  Child serve;
  ASSERT_TRUE(serve.start({"serve", "--listen", "127.0.0.1:0", "--memory", "8M", "--metrics", "127.0.0.1:0"},
                          {"HAWSER_TRANSPORT=tcp"}));
  const std::string seg_line = serve.waitFor("segment: ");
  const std::string metrics_line = serve.waitFor("metrics: http://127.0.0.1:");
  const std::string mem_line = serve.waitFor("memory: ");
  ASSERT_FALSE(serve.waitFor("ready").empty()) << "hawser serve did not start";
  const std::string seg = seg_line.substr(seg_line.find(": ") + 2);
  const uint16_t serve_port =
      static_cast<uint16_t>(std::stoi(metrics_line.substr(metrics_line.rfind(':') + 1)));
  const uint64_t base = std::stoull(mem_line.substr(mem_line.find("0x")), nullptr, 16);

  Scrape s0 = scrape(serve_port);
  ASSERT_EQ(s0.error, "");
  const Labels tcp_w = {{"transport", "tcp"}, {"direction", "write"}};
  const Labels tcp_r = {{"transport", "tcp"}, {"direction", "read"}};
  EXPECT_EQ(s0.value("hawser_served_bytes_total", tcp_w), 0);
  EXPECT_EQ(s0.value("hawser_refused_requests_total", {{"transport", "tcp"}}), 0);
  EXPECT_EQ(s0.types["hawser_task_duration_seconds"], "histogram");

  // The initiator, in this process, with its own endpoint.
  TransferEngine e;
  EngineOptions opts;
  opts.config = {{"transport", "tcp"}, {"tcp.slice_size", "64K"}};
  ASSERT_TRUE(e.init("p2p", "initiator", "127.0.0.1", 0, opts).ok());
  tools::MetricsServer own;
  ASSERT_TRUE(own.start("127.0.0.1", 0, [&e] { return prometheusText(e.stats().metrics); }).ok());
  Buffer local(4 << 20);
  ASSERT_TRUE(e.registerLocalMemory(local.p, local.n, "cpu:0", false).ok());
  SegmentID sid;
  ASSERT_TRUE(e.openSegment(seg, sid).ok());

  const uint64_t w = (1 << 20) + 4097, r = 3 * 65536 + 100;  // 17 and 4 slices of 64K
  fillPattern(local.p, w, 11);
  ASSERT_TRUE(e.transferSync({{OpCode::kWrite, local.p, sid, base, w}}, std::chrono::seconds(20)).ok());
  ASSERT_TRUE(e.transferSync({{OpCode::kRead, local.p + (2 << 20), sid, base + 100, r},
                              {OpCode::kRead, local.p + (3 << 20), sid, base + 200000, r}},
                             std::chrono::seconds(20))
                  .ok());
  EXPECT_EQ(checkPattern(local.p + (2 << 20), r, 11, 100), -1);

  Scrape s1 = scrape(serve_port);
  ASSERT_EQ(s1.error, "");
  EXPECT_EQ(s1.value("hawser_served_bytes_total", tcp_w), double(w));
  EXPECT_EQ(s1.value("hawser_served_bytes_total", tcp_r), double(2 * r));
  EXPECT_EQ(s1.value("hawser_served_requests_total", tcp_w), 17);
  EXPECT_EQ(s1.value("hawser_served_requests_total", tcp_r), 8);
  EXPECT_GE(s1.value("hawser_accepted_connections_total", {{"transport", "tcp"}}), 1);
  EXPECT_GE(s1.value("hawser_served_connections", {{"transport", "tcp"}}), 1);

  Scrape i1 = scrape(own.port());
  ASSERT_EQ(i1.error, "");
  const Labels pw = {{"transport", "tcp"}, {"peer", seg}, {"direction", "write"}};
  const Labels pr = {{"transport", "tcp"}, {"peer", seg}, {"direction", "read"}};
  EXPECT_EQ(i1.value("hawser_transferred_bytes_total", pw), double(w));
  EXPECT_EQ(i1.value("hawser_transferred_bytes_total", pr), double(2 * r));
  EXPECT_EQ(i1.value("hawser_slices_total", pw), 17);
  EXPECT_EQ(i1.value("hawser_slices_total", pr), 8);
  EXPECT_EQ(i1.value("hawser_tasks_total", pw), 1);
  EXPECT_EQ(i1.value("hawser_tasks_total", pr), 2);
  EXPECT_EQ(i1.value("hawser_inflight_slices", {{"transport", "tcp"}, {"peer", seg}}), 0);
  EXPECT_EQ(i1.value("hawser_task_duration_seconds_count", {{"transport", "tcp"}, {"direction", "read"}}), 2);
  EXPECT_EQ(i1.value("hawser_slice_duration_seconds_count", {{"transport", "tcp"}, {"direction", "write"}}), 17);
  EXPECT_GT(i1.value("hawser_task_duration_seconds_sum", {{"transport", "tcp"}, {"direction", "write"}}), 0);
  EXPECT_GE(i1.value("hawser_connections", {{"transport", "tcp"}, {"peer", seg}}), 1);
  EXPECT_EQ(i1.value("hawser_connects_total", {{"transport", "tcp"}, {"peer", seg}}),
            i1.value("hawser_connections", {{"transport", "tcp"}, {"peer", seg}}));
  EXPECT_EQ(i1.value("hawser_tasks_submitted_total", {}), 3);

  // The target withdraws its memory; requests the initiator still sends are
  // refused by the target and fail with out_of_range: both sides count them.
  serve.kill(SIGUSR1);
  ASSERT_FALSE(serve.waitFor("withdrawn").empty());
  auto* store = detail::EngineAccess::of(e).store();
  ASSERT_TRUE(eventually([&] { return store->mayHaveChanged(seg, 0); }));
  Status submitted;
  auto st = runBatch(e, sid, {{OpCode::kWrite, local.p, sid, base + 4096, 1000}}, 20000, &submitted);
  ASSERT_TRUE(submitted.ok()) << submitted.toString();
  ASSERT_EQ(st.at(0).error.code(), Code::kOutOfRange) << st.at(0).error.toString();
  Scrape s2 = scrape(serve_port);
  ASSERT_EQ(s2.error, "");
  EXPECT_EQ(s2.value("hawser_refused_requests_total", {{"transport", "tcp"}}), 1);
  EXPECT_EQ(s2.value("hawser_served_bytes_total", tcp_w), double(w)) << "a refused write serves nothing";
  Scrape i2 = scrape(own.port());
  ASSERT_EQ(i2.error, "");
  Labels fail = pw;
  fail["code"] = "out_of_range";
  EXPECT_EQ(i2.value("hawser_slice_failures_total", fail), 1);
  EXPECT_EQ(i2.value("hawser_task_failures_total", fail), 1);
  EXPECT_EQ(i2.value("hawser_transferred_bytes_total", pw), double(w));
  serve.kill(SIGTERM);
  EXPECT_EQ(serve.wait(), 0);
}

TEST(MetricsHttp, serve_refuses_a_malformed_metrics_address) {
  Child serve;
  ASSERT_TRUE(serve.start({"serve", "--listen", "127.0.0.1:0", "--memory", "1M", "--metrics", "127.0.0.1"}));
  EXPECT_EQ(serve.wait(), 2);
}

}  // namespace
}  // namespace hawser::test
