// rdma_child: the target process of the rdma multi-process tests
// (tests/integration/rdma_multiprocess_test.cpp), a program of its own so
// that a test can stop, kill and fault it. It runs an engine on the rdma
// transport (over the software verbs provider the environment names),
// registers BYTES of memory seeded with pattern SEED, prints
// "segment NAME BASE" on OUT_FD and then only answers commands read from
// CMD_FD, one line each (its CPU takes no part in the RDMA READs and WRITEs):
//
//   sum OFF LEN          the checksum of [OFF, OFF+LEN) of its memory
//   check SEED OFF LEN   "ok" if that range holds pattern SEED, else "bad INDEX"
//   unreg                unregisters the memory: "ok" or "error"
//   revoke               deregisters the memory's MRs on every NIC behind the
//                        engine's back (peers keep dead keys): "ok" or "error"
//   exit                 says "bye" and ends
//
// Usage: rdma_child CMD_FD OUT_FD BYTES SEED. A setup failure is one line
// "error WHAT" on OUT_FD and exit status 1.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

#include "common/util.h"
#include "engine/access.h"
#include "hawser/engine.h"
#include "softverbs/soft_env.h"

using namespace hawser;

namespace {

int g_out = -1;

void say(const std::string& line) {
  const std::string l = line + "\n";
  if (::write(g_out, l.data(), l.size()) != static_cast<ssize_t>(l.size())) std::_Exit(2);
}

int fail(const std::string& what) {
  say("error " + what);
  return 1;
}

// Deregisters the MRs of the engine's first buffer on every NIC.
bool revoke(TransferEngine& e) {
  SegmentDesc d = detail::EngineAccess::of(e).localDescriptor();
  const auto& nics = d.transports.at("rdma").at("nics");
  const auto& rk = d.buffers.at(0).attrs.at("rdma").at("rkey");
  bool ok = true;
  for (size_t i = 0; i < nics.size(); ++i)
    ok &= test::SoftVerbsEnv::control("revoke " + nics[i].at("name").get<std::string>() + " " +
                                      std::to_string(rk[i].get<uint32_t>())) == 0;
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: rdma_child CMD_FD OUT_FD BYTES SEED\n");
    return 2;
  }
  const int cmd_fd = std::atoi(argv[1]);
  g_out = std::atoi(argv[2]);
  const size_t bytes = std::strtoull(argv[3], nullptr, 10);
  const uint64_t seed = std::strtoull(argv[4], nullptr, 10);
  TransferEngine e;
  EngineOptions o;
  o.config["transport"] = "rdma";
  Status s = e.init("p2p", "child", "127.0.0.1", 0, o);
  if (!s.ok()) return fail("init: " + s.toString());
  test::Buffer mem(bytes);
  test::fillPattern(mem.p, bytes, seed);
  s = e.registerLocalMemory(mem.p, bytes, "cpu:0", true);
  if (!s.ok()) return fail("registerLocalMemory: " + s.toString());
  say("segment " + e.segmentName() + " " + std::to_string(reinterpret_cast<uint64_t>(mem.p)));
  std::string buf;
  char c;
  while (::read(cmd_fd, &c, 1) == 1) {
    if (c != '\n') {
      buf += c;
      continue;
    }
    std::istringstream in(buf);
    buf.clear();
    std::string op;
    in >> op;
    if (op == "sum") {
      uint64_t off = 0, len = 0;
      in >> off >> len;
      say(std::to_string(test::checksum(mem.p + off, len)));
    } else if (op == "check") {
      uint64_t sd = 0, off = 0, len = 0;
      in >> sd >> off >> len;
      const int64_t bad = test::checkPattern(mem.p + off, len, sd);
      say(bad < 0 ? "ok" : "bad " + std::to_string(bad));
    } else if (op == "unreg") {
      say(e.unregisterLocalMemory(mem.p).ok() ? "ok" : "error");
    } else if (op == "revoke") {
      say(revoke(e) ? "ok" : "error");
    } else if (op == "exit") {
      say("bye");
      break;
    } else {
      say("error unknown command '" + op + "'");
    }
  }
  return 0;
}
