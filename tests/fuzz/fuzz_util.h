// Helpers shared by the libFuzzer targets (tests/fuzz/*_fuzz.cpp): a reader
// that takes typed values off the front of the input, and a check that
// aborts (a crash to the fuzzer) when an invariant of a decoder fails.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

namespace hawser::fuzz {

// Aborts with the failed condition: the fuzzer records the input as a crash.
#define FUZZ_CHECK(cond)                                                            \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                 \
    }                                                                               \
  } while (0)

class Input {
 public:
  Input(const uint8_t* data, size_t size) : p_(data), n_(size) {}
  size_t left() const { return n_; }
  // A value from the next sizeof(T) bytes (zeros past the end).
  template <typename T>
  T take() {
    T v{};
    const size_t k = n_ < sizeof(T) ? n_ : sizeof(T);
    std::memcpy(&v, p_, k);
    p_ += k;
    n_ -= k;
    return v;
  }
  // The next `len` bytes, or what is left.
  std::string_view bytes(size_t len) {
    if (len > n_) len = n_;
    std::string_view s(reinterpret_cast<const char*>(p_), len);
    p_ += len;
    n_ -= len;
    return s;
  }
  std::string_view rest() { return bytes(n_); }

 private:
  const uint8_t* p_;
  size_t n_;
};

}  // namespace hawser::fuzz
