// A small HTTP/1.1 client on libcurl, shared by the metadata stores that
// speak HTTP: etcd's JSON gateway (etcd_client.h) and Mooncake's HTTP
// metadata server (http_store.h). Thread-safe: curl handles come from a
// pool, one per concurrent request, and keep their connections alive.
#pragma once

#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "hawser/status.h"

namespace hawser::http {

struct Request {
  std::string method = "GET";  // GET, PUT, POST, DELETE
  std::string url;             // "http://host:port/path?query"
  const std::string* body = nullptr;  // sent for PUT/POST (nullptr: empty)
  std::string content_type;           // "" = none
  std::vector<std::string> headers;   // more header lines, "Name: value" (Authorization)
  std::chrono::milliseconds timeout{3000};          // whole request
  std::chrono::milliseconds connect_timeout{1000};  // TCP connect
  // Extra curl options for this request (TLS): called with the CURL*
  // handle after the standard ones are set. The handle is reset before the
  // next request, so what `tune` sets lasts for this request only.
  std::function<void(void* curl)> tune;
};

struct Response {
  long status = 0;   // HTTP status
  std::string body;  // at most max_reply bytes
  // When send() fails: curl's code (a CURLcode) and the text curl put in its
  // error buffer ("" if none), for callers that tell failures apart (a TLS
  // setting at fault, etcd_security.h). 0 and "" when an answer came back.
  int curl_code = 0;
  std::string curl_error;
};

class Client {
 public:
  explicit Client(size_t max_reply = 256u << 20);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // One request. Ok when an HTTP answer came back, whatever its status.
  // kUnavailable when the server could not be reached or the connection
  // broke, kTimeout when the deadline passed; the message names the URL
  // and curl's reason (its error buffer when it wrote one, which says more
  // than the code: "SSL certificate problem: ..."). `maybe_sent` (optional) is false when the request
  // surely did not reach the server (connect or resolve failed).
  Status send(const Request& req, Response& out, bool* maybe_sent = nullptr);

  // libcurl's URL escaping of one query value.
  static std::string escape(const std::string& s);

 private:
  struct Handle;
  Handle* acquire();
  void release(Handle* h);

  const size_t max_reply_;
  std::mutex pool_mu_;
  std::vector<Handle*> pool_;
};

}  // namespace hawser::http
