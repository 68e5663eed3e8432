// shm across pid and mount namespaces (what two containers of one host are):
// the peer is found through its socket and authenticated by the nonce and
// SO_PEERCRED, never by pid, so shm serves it where tcp served before; a
// killed peer still fails its tasks at once (its pidfd came over the socket).
// Namespaces come from unshare(1) and unshare(2); skipped, with the reason,
// where this machine does not allow them.
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "common/util.h"
#include "hawser/engine.h"

namespace hawser::test {
namespace {

constexpr uint64_t kSeed = 4711;

// Why this machine cannot run a process in new pid and mount namespaces ("" when it can).
std::string unshareUnavailable() {
  std::string out;
  if (sh("unshare --pid --mount --fork --kill-child true 2>&1", &out) != 0)
    return "unshare --pid --mount --fork is not allowed here (needs CAP_SYS_ADMIN or user namespaces): " + out;
  return "";
}

// `hawser serve` in pid (and mount) namespaces of its own.
struct NsServe {
  explicit NsServe(const std::vector<std::string>& extra, const std::vector<std::string>& env = {}) {
    std::vector<std::string> argv{"unshare", "--pid", "--mount", "--fork", "--kill-child", hawserBin(), "serve",
                                  "--listen", "127.0.0.1:0", "--memory", "32M", "--fill-seed", std::to_string(kSeed)};
    argv.insert(argv.end(), extra.begin(), extra.end());
    EXPECT_TRUE(child.exec(argv, env));
    segment = child.waitFor("segment: ", 20000);
    EXPECT_FALSE(segment.empty()) << "serve did not start";
    EXPECT_FALSE(child.waitFor("ready", 20000).empty());
    if (!segment.empty()) segment = segment.substr(9);
  }
  Child child;
  std::string segment;
};

// `hawser bench` against `segment` in pid and mount namespaces of its own
// (`env` before it): its data verified, carried by `transport` alone. `out`
// gets its output (the log lines too).
void benchInNamespaces(const std::string& segment, const std::string& env, const std::string& transport,
                       std::string& out) {
  const int rc = sh(env + " unshare --pid --mount --fork --kill-child " + hawserBin() + " bench --target " + segment +
                        " --op read --block-size 256K --batch-size 8 --threads 2 --total 32M --json 2>&1",
                    &out);
  ASSERT_EQ(rc, 0) << out;
  auto j = nlohmann::json::parse(lastLine(out), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << out;
  EXPECT_TRUE(j["verified"].get<bool>()) << out;
  EXPECT_EQ(j["transports"], nlohmann::json::array({transport})) << out;
}

class ShmNamespaces : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = unshareUnavailable();
    if (!why.empty()) GTEST_SKIP() << why;
  }
};

// The target in a pid namespace of its own, this process in the parent one:
// the target's pid is visible from here (SO_PEERCRED names it), its memory
// mapped; a SIGKILL fails the next task at once.
TEST_F(ShmNamespaces, a_target_in_a_child_pid_namespace_is_served_by_shm_and_its_death_is_seen) {
  NsServe s({});
  ASSERT_FALSE(s.segment.empty());
  TransferEngine e;
  ASSERT_TRUE(e.init("p2p", "client", "127.0.0.1", 0).ok());
  SegmentID seg;
  ASSERT_TRUE(e.openSegment(s.segment, seg).ok());
  std::vector<SegmentBuffer> bufs;
  ASSERT_TRUE(e.segmentBuffers(seg, bufs).ok());
  RouteExplanation r;
  ASSERT_TRUE(e.explainRoute(seg, "cpu:0", r).ok());
  EXPECT_EQ(r.transport, "shm") << r.why;
  EXPECT_NE(r.why.find("shared mappings for 1 of 1 buffers"), std::string::npos) << r.why;
  Buffer local(4u << 20);
  ASSERT_TRUE(e.registerLocalMemory(local.p, local.n, "cpu:0", false).ok());
  auto st = runBatch(e, seg, {{OpCode::kRead, local.p, seg, bufs[0].addr + 4096, local.n}});
  ASSERT_EQ(st[0].s, TransferState::kCompleted) << st[0].error.toString();
  EXPECT_EQ(checkPattern(local.p, local.n, kSeed, 4096), -1);
  EXPECT_EQ(counter(e, "tcp", "slices_completed"), 0u);
  s.child.kill(SIGKILL);  // unshare --kill-child: the serve dies with it
  s.child.wait();
  EXPECT_TRUE(eventually([&] { return counter(e, "shm", "peers_gone") == 1; }))
      << "the exit of the peer (in another pid namespace) was not seen";
  const auto t0 = std::chrono::steady_clock::now();
  st = runBatch(e, seg, {{OpCode::kWrite, local.p, seg, bufs[0].addr, local.n}}, 20000);
  EXPECT_EQ(st[0].s, TransferState::kFailed);
  EXPECT_EQ(st[0].error.code(), Code::kUnavailable) << st[0].error.toString();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

// Target and initiator each in pid and mount namespaces of their own
// (siblings: neither sees the other's pid): shareable memory goes over shm.
TEST_F(ShmNamespaces, sibling_pid_namespaces_get_shm_for_shareable_memory) {
  NsServe s({});
  ASSERT_FALSE(s.segment.empty());
  std::string out;
  benchInNamespaces(s.segment, "", "shm", out);
}

// Private memory in a sibling pid namespace: cross-memory attach needs a
// pid this side cannot see, so tcp serves, and the log says why.
TEST_F(ShmNamespaces, private_memory_in_a_sibling_pid_namespace_falls_back_to_tcp_saying_why) {
  NsServe s({"--host-memory", "private"});
  ASSERT_FALSE(s.segment.empty());
  std::string out;
  ASSERT_NO_FATAL_FAILURE(benchInNamespaces(s.segment, "", "tcp", out));
  EXPECT_NE(out.find("cannot be mapped"), std::string::npos) << out;
  EXPECT_NE(out.find("is not visible from this one"), std::string::npos) << out;
}

// The socket in a directory: both sides in mount namespaces of their own
// see it (a volume two containers mount) and get shm; a side that does not
// see it (the target's directory is a tmpfs of its own mount namespace) gets
// tcp, and doctor --peer says why.
TEST_F(ShmNamespaces, a_socket_directory_both_mount_namespaces_see_gives_shm_one_they_do_not_gives_tcp) {
  TempDir shared;
  NsServe s({}, {"HAWSER_SHM_SOCKET_DIR=" + shared.path});
  ASSERT_FALSE(s.segment.empty());
  std::string out;
  ASSERT_NO_FATAL_FAILURE(benchInNamespaces(s.segment, "HAWSER_SHM_SOCKET_DIR=" + shared.path, "shm", out));

  // The target's socket directory is hidden from everyone else by a tmpfs
  // mounted over it in the target's mount namespace only.
  TempDir hidden;
  Child c;
  ASSERT_TRUE(c.exec({"unshare", "--pid", "--mount", "--fork", "--kill-child", "sh", "-c",
                      "mount -t tmpfs hawser-test " + hidden.path + " && exec env HAWSER_SHM_SOCKET_DIR=" +
                          hidden.path + " " + hawserBin() + " serve --listen 127.0.0.1:0 --memory 16M"}));
  std::string seg = c.waitFor("segment: ", 20000);
  ASSERT_FALSE(seg.empty()) << "serve in a mount namespace of its own did not start";
  ASSERT_FALSE(c.waitFor("ready", 20000).empty());
  std::string doc;
  ASSERT_EQ(sh(hawserBin() + " doctor --peer " + seg.substr(9) + " --json 2>/dev/null", &doc), 0) << doc;
  auto d = nlohmann::json::parse(lastLine(doc), nullptr, false);
  ASSERT_FALSE(d.is_discarded()) << doc;
  const auto& route = d["peer"]["routes"]["cpu:0"];
  EXPECT_EQ(route["transport"], "tcp") << doc;
  EXPECT_NE(route["why"].get<std::string>().find("its shm.socket_dir is not a directory this process sees"),
            std::string::npos)
      << doc;
}

// The initiator is this test's grandchild, in a pid namespace of its own
// (unshare(2)); the target is serve in another: a SIGKILL of the target fails
// the initiator's next task at once, though neither sees the other's pid.
TEST_F(ShmNamespaces, a_killed_peer_in_a_sibling_pid_namespace_fails_the_next_task_at_once) {
  NsServe s({});
  ASSERT_FALSE(s.segment.empty());
  int up[2], down[2];  // grandchild -> test: progress; test -> grandchild: "killed"
  ASSERT_EQ(::pipe(up), 0);
  ASSERT_EQ(::pipe(down), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(up[0]);
    ::close(down[1]);
    auto say = [&](const std::string& m) { (void)!::write(up[1], m.data(), m.size()); };
    if (::unshare(CLONE_NEWPID) != 0) {
      say("unshare(CLONE_NEWPID) failed");
      ::_exit(1);
    }
    const pid_t g = ::fork();
    if (g < 0) ::_exit(1);
    if (g > 0) {
      int st = 0;
      ::waitpid(g, &st, 0);
      ::_exit(WIFEXITED(st) ? WEXITSTATUS(st) : 1);
    }
    std::ostringstream why;
    {
      TransferEngine e;
      SegmentID seg;
      std::vector<SegmentBuffer> bufs;
      Buffer local(1u << 20);
      RouteExplanation r;
      if (::getpid() != 1) why << "not in a new pid namespace; ";
      if (!e.init("p2p", "ns-client", "127.0.0.1", 0).ok() || !e.openSegment(s.segment, seg).ok() ||
          !e.segmentBuffers(seg, bufs).ok() || bufs.empty() ||
          !e.registerLocalMemory(local.p, local.n, "cpu:0", false).ok()) {
        why << "engine setup failed; ";
      } else {
        if (!e.explainRoute(seg, "cpu:0", r).ok() || r.transport != "shm") why << "route: " << r.why << "; ";
        auto st = runBatch(e, seg, {{OpCode::kRead, local.p, seg, bufs[0].addr, local.n}});
        if (st[0].s != TransferState::kCompleted) why << "read: " << st[0].error.toString() << "; ";
        else if (checkPattern(local.p, local.n, kSeed, 0) != -1) why << "read data differs; ";
        say("R");  // read done: kill the target now
        char k = 0;
        if (::read(down[0], &k, 1) != 1) why << "no word from the test; ";
        if (!eventually([&] { return counter(e, "shm", "peers_gone") == 1; }))
          why << "the peer's exit was not seen; ";
        const auto t0 = std::chrono::steady_clock::now();
        st = runBatch(e, seg, {{OpCode::kWrite, local.p, seg, bufs[0].addr, local.n}}, 20000);
        if (st[0].s != TransferState::kFailed || st[0].error.code() != Code::kUnavailable)
          why << "after the kill: " << st[0].error.toString() << "; ";
        if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(5)) why << "the failure took over 5 s; ";
      }
    }
    say("|" + why.str());
    ::_exit(0);
  }
  ::close(up[1]);
  ::close(down[0]);
  std::string msg;
  char buf[4096];
  ssize_t n;
  bool killed = false;
  while ((n = ::read(up[0], buf, sizeof buf)) > 0) {
    msg.append(buf, static_cast<size_t>(n));
    if (!killed && msg.find('R') != std::string::npos) {
      killed = true;
      s.child.kill(SIGKILL);
      s.child.wait();
      (void)!::write(down[1], "k", 1);
    }
  }
  ::close(up[0]);
  ::close(down[1]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status << ": " << msg;
  EXPECT_TRUE(killed) << msg;
  const size_t bar = msg.find('|');
  ASSERT_NE(bar, std::string::npos) << msg;
  EXPECT_EQ(msg.substr(bar + 1), "");
}

}  // namespace
}  // namespace hawser::test
