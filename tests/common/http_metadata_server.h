// An in-process HTTP server on loopback that speaks the protocol of
// Mooncake's HTTP metadata server, for tests of the http:// metadata store:
//   GET    /metadata?key=K          200 + value | 404 "metadata not found"
//   PUT    /metadata?key=K  (body)  200 "metadata updated"
//   DELETE /metadata?key=K          200 "metadata deleted" | 404 (absent;
//                                   200 when constructed like Mooncake's Go server)
//   anything else                   404 (another path) | 405 (another method)
// One thread per connection, HTTP/1.1 keep-alive, Content-Length bodies.
//
//   HttpMetadataServer server;
//   ASSERT_TRUE(server.start()) << server.error();
//   engine.init(server.url(), "node-a");   // "http://127.0.0.1:PORT/metadata"
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace hawser::test {

class HttpMetadataServer {
 public:
  // delete_absent_is_404: the Python example's answer to DELETE of an absent
  // key (the Go example answers 200).
  explicit HttpMetadataServer(bool delete_absent_is_404 = true) : delete_absent_404_(delete_absent_is_404) {}
  ~HttpMetadataServer();
  HttpMetadataServer(const HttpMetadataServer&) = delete;
  HttpMetadataServer& operator=(const HttpMetadataServer&) = delete;

  // Listens on 127.0.0.1 (port 0: a free one; else that port, e.g. to come
  // back where it was). False with error() set otherwise.
  bool start(uint16_t port = 0);
  // Closes the listener and every connection; the stored values are kept.
  void stop();
  uint16_t port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/metadata"; }
  const std::string& error() const { return error_; }

  // The store, as the server sees it.
  std::map<std::string, std::string> values();
  void set(const std::string& key, const std::string& value);
  bool has(const std::string& key);
  // Requests served, by method ("GET", "PUT", "DELETE").
  uint64_t count(const std::string& method);

 private:
  void acceptLoop();
  void serve(int fd);

  const bool delete_absent_404_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::string error_;
  std::atomic<bool> stopping_{false};
  std::thread accept_thread_;
  std::mutex mu_;
  std::vector<int> conns_;
  std::vector<std::thread> threads_;
  std::map<std::string, std::string> store_;
  std::map<std::string, uint64_t> counts_;
};

}  // namespace hawser::test
