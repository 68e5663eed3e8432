// A transport's end of the local socket (local_socket.h): listens at a name,
// accepts connections and hands each readable connection to the transport,
// on one thread of its own. The transport reads and answers the message
// (its protocol) and says whether the connection stays open; it hears of
// each connection that closes (its peer hung up, or stop()) before the fd is
// closed, so it can let go of what that peer held.
#pragma once

#include <functional>
#include <set>
#include <string>
#include <thread>

#include "hawser/status.h"
#include "local/local_socket.h"

namespace hawser::local {

class Listener {
 public:
  // A message is readable on connection `fd`: read and answer it; false closes it.
  using OnMessage = std::function<bool(int fd)>;
  // Connection `fd` closes (on the listener's thread, or in stop()).
  using OnClose = std::function<void(int fd)>;

  Listener() = default;
  ~Listener();
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  // Listens at a new name of `place` and starts the thread.
  Status start(const Place& place, OnMessage on_message, OnClose on_close);
  // Closes every connection (each reported to on_close) and the listener,
  // removes a directory socket's file; joins the thread.
  void stop();
  // The name peers connect to ("@..." or a path); "" before start.
  const std::string& name() const { return name_; }

 private:
  void run();
  void drop(int fd);
  OnMessage on_message_;
  OnClose on_close_;
  std::string name_;
  int listen_ = -1, epfd_ = -1, evfd_ = -1;
  std::thread thread_;
  std::set<int> conns_;  // the thread's own (stop() after joining it)
};

}  // namespace hawser::local
