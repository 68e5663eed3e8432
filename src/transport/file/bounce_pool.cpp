// Bounce buffers for O_DIRECT I/O of unaligned memory (see bounce_pool.h).
#include "transport/file/bounce_pool.h"

#include <sys/mman.h>

#include "transport/file/file_plan.h"

namespace hawser::file {

namespace {
char* mapAnonymous(size_t n) {
  void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : static_cast<char*>(p);
}
}  // namespace

void BouncePool::configure(size_t buf_size, size_t max_bufs) {
  buf_size_ = alignUp(buf_size, kPage);
  max_ = max_bufs;
}

Bounce BouncePool::acquire(size_t need) {
  if (need > buf_size_) {  // larger than a pooled buffer (huge O_DIRECT alignment): a one-off
    size_t n = alignUp(need, kPage);
    char* p = mapAnonymous(n);
    return p ? Bounce{p, n, false} : Bounce{};
  }
  if (!free_.empty()) {
    char* p = free_.back();
    free_.pop_back();
    return Bounce{p, buf_size_, true};
  }
  if (all_.size() >= max_) return {};
  char* p = mapAnonymous(buf_size_);
  if (!p) return {};
  all_.push_back(p);
  return Bounce{p, buf_size_, true};
}

void BouncePool::release(Bounce& b) {
  if (!b.p) return;
  if (b.pooled)
    free_.push_back(b.p);
  else
    ::munmap(b.p, b.size);
  b = Bounce{};
}

void BouncePool::releaseAll() {
  for (char* p : all_) ::munmap(p, buf_size_);
  all_.clear();
  free_.clear();
}

void BouncePool::leak() {
  all_.clear();
  free_.clear();
}

}  // namespace hawser::file
