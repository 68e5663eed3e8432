// Helpers for tests that run the rdma transport over the software verbs
// provider (tests/softverbs). Each SoftVerbsEnv gives the test its own
// registry directory (so fault injection stays private to the test) and
// points HAWSER_RDMA_VERBS_LIB at the provider.
#pragma once

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>
#include <vector>

#include "common/util.h"
#include "softverbs/softverbs.h"

namespace hawser::test {

// The provider: $HAWSER_TEST_SOFTVERBS_LIB where set (a bundle on another
// machine, scripts/gpu_test.sh), else the one this build made.
inline const char* softVerbsLib() {
  const char* e = getenv("HAWSER_TEST_SOFTVERBS_LIB");
  if (e && *e) return e;
#ifdef HAWSER_SOFTVERBS_LIB
  return HAWSER_SOFTVERBS_LIB;
#else
  return "";
#endif
}

// Sets the environment for the provider and the transport; restores it at
// destruction. `devices` is HAWSER_SOFTVERBS_DEVICES.
class SoftVerbsEnv {
 public:
  explicit SoftVerbsEnv(const std::string& devices, std::vector<std::pair<std::string, std::string>> extra = {})
      : dir_("/tmp") {
    set("HAWSER_SOFTVERBS_DIR", dir_.path);
    set("HAWSER_SOFTVERBS_DEVICES", devices);
    set("HAWSER_RDMA_VERBS_LIB", softVerbsLib());
    for (auto& [k, v] : extra) set(k, v);
  }
  ~SoftVerbsEnv() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      if (it->had) {
        ::setenv(it->key.c_str(), it->value.c_str(), 1);
      } else {
        ::unsetenv(it->key.c_str());
      }
    }
  }
  SoftVerbsEnv(const SoftVerbsEnv&) = delete;

  void set(const std::string& k, const std::string& v) {
    const char* old = ::getenv(k.c_str());
    saved_.push_back({k, old ? old : "", old != nullptr});
    ::setenv(k.c_str(), v.c_str(), 1);
  }
  const std::string& dir() const { return dir_.path; }
  // "KEY=VALUE" list of what this sets (for child processes).
  std::vector<std::string> childEnv() const {
    std::vector<std::string> out;
    for (auto& s : saved_) out.push_back(s.key + "=" + ::getenv(s.key.c_str()));
    return out;
  }

  // hawser_softverbs_control(); 0 or an errno.
  static int control(const std::string& cmd) {
    void* h = dlopen(softVerbsLib(), RTLD_NOW | RTLD_LOCAL);
    if (!h) return -1;
    auto fn = reinterpret_cast<hawser_softverbs_control_fn>(dlsym(h, "hawser_softverbs_control"));
    return fn ? fn(cmd.c_str()) : -1;
  }

 private:
  struct Saved {
    std::string key, value;
    bool had;
  };
  TempDir dir_;
  std::vector<Saved> saved_;
};

}  // namespace hawser::test
