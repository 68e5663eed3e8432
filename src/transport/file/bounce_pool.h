// Bounce buffers: page-aligned memory for O_DIRECT I/O whose user address
// (or, for reads, offset or length) is not aligned. A pool of at most N
// buffers of one size, grown on demand; a request larger than a pooled
// buffer gets a one-off mapping. Not thread-safe: the in-flight table
// (file_inflight.h) uses it under its lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace hawser::file {

struct Bounce {
  char* p = nullptr;
  size_t size = 0;
  bool pooled = false;
};

class BouncePool {
 public:
  BouncePool() = default;
  BouncePool(const BouncePool&) = delete;
  ~BouncePool() { releaseAll(); }

  // Buffers of `buf_size` (rounded up to a page), at most `max_bufs` of them.
  void configure(size_t buf_size, size_t max_bufs);

  // A buffer of at least `need` bytes; nullptr .p: every pooled buffer is in
  // use (wait for one) or mapping failed.
  Bounce acquire(size_t need);
  void release(Bounce& b);

  void releaseAll();
  // Forgets the buffers without unmapping (I/O may still write into them).
  void leak();

 private:
  size_t buf_size_ = 0;
  size_t max_ = 0;
  std::vector<char*> all_;
  std::vector<char*> free_;
};

}  // namespace hawser::file
