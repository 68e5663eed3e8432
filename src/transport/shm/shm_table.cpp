// The registration table (shm_table.h): the target writes it, initiators map
// it read-only.
#include "transport/shm/shm_table.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <fmt/format.h>
#include <thread>

namespace hawser::shm {

namespace {

uint64_t load(const uint64_t& w, std::memory_order o = std::memory_order_relaxed) {
  return std::atomic_ref<uint64_t>(const_cast<uint64_t&>(w)).load(o);
}
void store(uint64_t& w, uint64_t v, std::memory_order o = std::memory_order_relaxed) {
  std::atomic_ref<uint64_t>(w).store(v, o);
}

TableHeader* header(void* m) { return static_cast<TableHeader*>(m); }
const TableHeader* header(const void* m) { return static_cast<const TableHeader*>(m); }
TableEntry* entries(void* m) { return reinterpret_cast<TableEntry*>(static_cast<char*>(m) + sizeof(TableHeader)); }
const TableEntry* entries(const void* m) {
  return reinterpret_cast<const TableEntry*>(static_cast<const char*>(m) + sizeof(TableHeader));
}

}  // namespace

// ---- writer ------------------------------------------------------------------

TableWriter::~TableWriter() {
  if (map_) ::munmap(map_, tableBytes(kTableCapacity));
  if (fd_ >= 0) ::close(fd_);
}

Status TableWriter::create(uint64_t nonce) {
  const std::string name = fmt::format("hawser-shm-{}", ::getpid());
  int fd = ::memfd_create(name.c_str(), MFD_CLOEXEC);
  if (fd < 0) return {Code::kNotSupported, fmt::format("memfd_create: {}", std::strerror(errno))};
  const size_t bytes = tableBytes(kTableCapacity);
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    Status s{Code::kNotSupported, fmt::format("ftruncate of the shm table: {}", std::strerror(errno))};
    ::close(fd);
    return s;
  }
  void* m = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) {
    Status s{Code::kNotSupported, fmt::format("mmap of the shm table: {}", std::strerror(errno))};
    ::close(fd);
    return s;
  }
  TableHeader* h = header(m);
  h->version = kTableVersion;
  h->capacity = kTableCapacity;
  h->nonce = nonce;
  store(h->seq, 0);
  store(h->count, 0);
  store(h->closed, 0);
  store(h->magic, kTableMagic, std::memory_order_release);  // last: the table is ready
  fd_ = fd;
  map_ = m;
  return Status::OK();
}

Status TableWriter::add(uint64_t addr, uint64_t length) {
  std::lock_guard lk(mu_);
  if (ranges_.size() >= kTableCapacity)
    return {Code::kCapacityExceeded,
            fmt::format("shm table holds at most {} remote-accessible regions per process", kTableCapacity)};
  ranges_[addr] = length;
  publishLocked();
  return Status::OK();
}

void TableWriter::remove(uint64_t addr) {
  std::lock_guard lk(mu_);
  if (ranges_.erase(addr)) publishLocked();
}

void TableWriter::close() {
  std::lock_guard lk(mu_);
  ranges_.clear();
  publishLocked();
  if (map_) store(header(map_)->closed, 1, std::memory_order_release);
}

size_t TableWriter::size() const {
  std::lock_guard lk(mu_);
  return ranges_.size();
}

void TableWriter::publishLocked() {
  if (!map_) return;
  TableHeader* h = header(map_);
  TableEntry* e = entries(map_);
  const uint64_t seq = load(h->seq);
  store(h->seq, seq + 1);  // odd: changing
  std::atomic_thread_fence(std::memory_order_release);
  size_t i = 0;
  for (auto& [a, l] : ranges_) {
    store(e[i].addr, a);
    store(e[i].length, l);
    ++i;
  }
  store(h->count, i);
  store(h->seq, seq + 2, std::memory_order_release);  // even: consistent
}

// ---- reader ------------------------------------------------------------------

TableView::~TableView() {
  if (map_) ::munmap(const_cast<void*>(map_), bytes_);
}

Status TableView::open(int64_t pid, int fd, uint64_t nonce, std::unique_ptr<TableView>& out) {
  const std::string path = fmt::format("/proc/{}/fd/{}", pid, fd);
  int f = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f < 0) return {Code::kNotSupported, fmt::format("cannot open the peer's shm table {}: {}", path, std::strerror(errno))};
  struct stat st {};
  const size_t bytes = tableBytes(kTableCapacity);
  if (::fstat(f, &st) != 0 || static_cast<size_t>(st.st_size) < bytes) {
    ::close(f);
    return {Code::kNotSupported, fmt::format("{} is not a hawser shm table (size)", path)};
  }
  void* m = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, f, 0);
  ::close(f);  // the mapping keeps the memfd alive
  if (m == MAP_FAILED) return {Code::kNotSupported, fmt::format("mmap of {}: {}", path, std::strerror(errno))};
  std::unique_ptr<TableView> v(new TableView());
  v->map_ = m;
  v->bytes_ = bytes;
  if (!tableHeaderMatches(m, nonce))
    return {Code::kNotSupported, fmt::format("{} is not the peer's shm table (magic, version or nonce differ)", path)};
  out = std::move(v);
  return Status::OK();
}

bool TableView::closed() const { return load(header(map_)->closed, std::memory_order_acquire) != 0; }

uint64_t TableView::seq() const { return load(header(map_)->seq, std::memory_order_acquire); }

bool tableHeaderMatches(const void* map, uint64_t nonce) {
  const TableHeader* h = header(map);
  // The writer fills the header before it stores the magic (release).
  return load(h->magic, std::memory_order_acquire) == kTableMagic && h->version == kTableVersion &&
         h->capacity == kTableCapacity && h->nonce == nonce;
}

bool lookupOnce(const void* map, uint64_t addr, uint64_t len, bool& in, uint64_t& seq) {
  const TableHeader* h = header(map);
  const TableEntry* e = entries(map);
  const uint64_t s1 = load(h->seq, std::memory_order_acquire);
  if (s1 & 1) return false;
  const uint64_t n = std::min<uint64_t>(load(h->count), kTableCapacity);
  // Last entry with entry.addr <= addr (a peer that broke the order gets a
  // wrong answer about its own ranges, never a read outside the table).
  uint64_t lo = 0, hi = n;
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo) / 2;
    if (load(e[mid].addr) <= addr) lo = mid + 1;
    else hi = mid;
  }
  in = false;
  if (lo > 0) {
    const uint64_t a = load(e[lo - 1].addr), l = load(e[lo - 1].length);
    in = addr >= a && len <= l && addr - a <= l - len;
  }
  std::atomic_thread_fence(std::memory_order_acquire);
  if (load(h->seq) != s1) return false;
  seq = s1;
  return true;
}

bool TableView::contains(uint64_t addr, uint64_t len, uint64_t* seq_out) const {
  // A writer killed mid-update leaves seq odd: give up after a bound (the
  // range then counts as not exposed).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
  for (unsigned spin = 0;; ++spin) {
    if (spin > 64) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::yield();
    }
    bool in = false;
    uint64_t seq = 0;
    if (lookupOnce(map_, addr, len, in, seq)) {
      if (seq_out) *seq_out = seq;
      return in;
    }
  }
}

}  // namespace hawser::shm
