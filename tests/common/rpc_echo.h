// An rpc listener answering one method, "test.echo", with "pong:" + the
// request: the peer that must keep being served in the rpc fault tests.
#pragma once

#include <chrono>
#include <string>

#include "rpc/rpc.h"

namespace hawser::test {

inline const rpc::Channel kEcho = rpc::channel("test.echo");

struct EchoServer {
  rpc::Server server;

  Status start(const rpc::ServerLimits& limits = {}) {
    server.setLimits(limits);
    Status s = server.onCall(kEcho, [](const std::string& req, std::string& reply) {
      reply = "pong:" + req;
      return Status::OK();
    });
    return s.ok() ? server.start("127.0.0.1", 0) : s;
  }
  // A fresh connection's call is answered.
  bool echoWorks() {
    std::string reply;
    Status s = rpc::call("127.0.0.1", server.port(), kEcho.id, "x", reply, std::chrono::seconds(5));
    return s.ok() && reply == "pong:x";
  }
};

}  // namespace hawser::test
