// Helpers shared by the C API's translation units (c_api.cpp: engine,
// memory, segments, batches; c_api_info.cpp: introspection and names):
// error returns, the exception barrier, library-owned string storage and the
// caller-array convention of hawser/c_api.h.
#pragma once

#include <deque>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "hawser/c_api.h"
#include "hawser/engine.h"

struct hawser_engine {
  hawser::TransferEngine engine;
  // Notifications drained from the engine and not yet taken by
  // hawser_get_notifies (a call whose array is too small takes none).
  std::mutex notify_mu;
  std::vector<hawser::ReceivedNotification> notify_pending;
  // The same for hawser_get_notify_outcomes (failures included).
  std::vector<hawser::ReceivedNotification> outcome_pending;
};

namespace hawser::capi {

// This thread's last failure, returned by hawser_last_error().
std::string& lastError();

// 0 for Ok; else records the message and returns the negative code.
int ret(const Status& s);
int fail(Code code, const std::string& message);
int nullArg(const char* what);

// Runs f (returning int) so that no exception crosses into C.
template <class F>
int guarded(F&& f) noexcept {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return fail(Code::kInternal, "out of memory");
  } catch (const std::exception& e) {
    return fail(Code::kInternal, std::string("unexpected exception: ") + e.what());
  } catch (...) {
    return fail(Code::kInternal, "unexpected exception");
  }
}

// Strings handed back to C: each C function that returns strings owns one
// thread_local Strings, replaced on the function's next successful call on
// that thread. A deque keeps earlier elements in place while it grows.
class Strings {
 public:
  const char* keep(std::string s) {
    items_.push_back(std::move(s));
    return items_.back().c_str();
  }
  void clear() { items_.clear(); }

 private:
  std::deque<std::string> items_;
};

// The caller-array convention: `needed` entries are about to be written to
// `out` (capacity *count). True when the caller should write them; false
// with *rc set otherwise: 0 for a size query (out NULL, *count = needed), or
// HAWSER_E_CAPACITY_EXCEEDED when the array is too small (*count = needed).
inline bool fitsOrReport(const void* out, size_t* count, size_t needed, const char* what, int* rc) {
  if (out == nullptr) {
    *count = needed;
    *rc = 0;
    return false;
  }
  if (*count < needed) {
    size_t have = *count;
    *count = needed;
    *rc = fail(Code::kCapacityExceeded, std::string(what) + ": the output array holds " + std::to_string(have) +
                                            " entries; " + std::to_string(needed) + " are needed");
    return false;
  }
  return true;
}

// Engine options from C (NULL: none; checks for NULL keys and values); 0 or
// the error return.
int toCpp(const hawser_engine_options_t* options, EngineOptions& out);
// Requests from C (checks the opcodes); 0 or the error return.
int toCpp(const hawser_request_t* requests, size_t count, std::vector<TransferRequest>& out);
// A task's status for C; the message is kept in `strings`.
void toC(const TransferStatus& st, hawser_status_t* out, Strings& strings);

}  // namespace hawser::capi
