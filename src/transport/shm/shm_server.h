// The target's side of the local socket (shm_socket.h): accepts initiators of
// this host, checks each one's nonce and credentials, gives it a reader
// token, the registration table and a pidfd of this process, and the file of
// each shareable registration it asks for. One thread; an initiator's
// connection closing frees its reader slots in the table.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

#include "hawser/status.h"
#include "local/local_listener.h"
#include "transport/shm/shm_backing.h"
#include "transport/shm/shm_table.h"

namespace hawser::shm {

class Server {
 public:
  Server(TableWriter& table, uint64_t nonce) : table_(table), nonce_(nonce) {}
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Listens (shm.socket_dir `dir`, "" for the abstract namespace) and starts
  // the thread.
  Status start(const std::string& dir);
  // Closes every connection and the listener; joins the thread.
  void stop();
  // The name initiators connect to ("@..." or a path).
  const std::string& name() const { return listener_.name(); }

  // Registration `gen` ([addr, +length)) may be mapped by peers: `b` (its fd
  // is the server's from here).
  void share(uint64_t gen, uint64_t addr, uint64_t length, const Backing& b);
  // It is withdrawn: no peer gets its file any more.
  void unshare(uint64_t gen);

  uint64_t readers() const { return connected_.load(std::memory_order_relaxed); }
  uint64_t refused() const { return refused_.load(std::memory_order_relaxed); }
  uint64_t filesPassed() const { return passed_.load(std::memory_order_relaxed); }

 private:
  struct Shared {
    uint64_t addr = 0, length = 0;
    Backing b;
  };
  struct Conn {
    uint64_t token = 0;  // 0 until its hello was accepted
  };
  // Handles one message on `fd`; false: close the connection.
  bool handle(int fd, Conn& c);
  // Connection `fd` closes: its reader slots are free again.
  void closed(int fd);

  TableWriter& table_;
  const uint64_t nonce_;
  int pidfd_ = -1;
  local::Listener listener_;
  std::unordered_map<int, Conn> conns_;  // the listener thread's own
  uint64_t next_token_ = 1;

  std::mutex mu_;
  std::map<uint64_t, Shared> shared_;  // by generation

  std::atomic<uint64_t> connected_{0}, refused_{0}, passed_{0};
};

}  // namespace hawser::shm
