// The registration table (shm_table.h): the target writes it, initiators map
// it read-only.
#include "transport/shm/shm_table.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <fmt/format.h>
#include <thread>

#include "base/log.h"

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
ReadersHeader* readersHeader(void* r) { return static_cast<ReadersHeader*>(r); }
ReaderSlot* slots(void* r) { return reinterpret_cast<ReaderSlot*>(static_cast<char*>(r) + sizeof(ReadersHeader)); }

}  // namespace

// ---- writer ------------------------------------------------------------------

TableWriter::~TableWriter() {
  if (map_) ::munmap(map_, fileBytes(kTableCapacity));
  if (fd_ >= 0) ::close(fd_);
}

Status TableWriter::create(uint64_t nonce) {
  const std::string name = fmt::format("hawser-shm-{}", ::getpid());
  int fd = ::memfd_create(name.c_str(), MFD_CLOEXEC);
  if (fd < 0) return {Code::kNotSupported, fmt::format("memfd_create: {}", std::strerror(errno))};
  const size_t bytes = fileBytes(kTableCapacity);
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

Status TableWriter::add(uint64_t addr, uint64_t length, uint64_t& gen) {
  std::lock_guard lk(mu_);
  if (ranges_.size() >= kTableCapacity)
    return {Code::kCapacityExceeded,
            fmt::format("shm table holds at most {} remote-accessible regions per process", kTableCapacity)};
  gen = next_gen_++;
  ranges_[addr] = Range{length, gen};
  publishLocked();
  return Status::OK();
}

uint64_t TableWriter::remove(uint64_t addr) {
  uint64_t gen = 0;
  {
    std::lock_guard lk(mu_);
    auto it = ranges_.find(addr);
    if (it == ranges_.end()) return 0;
    gen = it->second.gen;
    ranges_.erase(it);
    publishLocked();
  }
  waitForReaders(gen);
  return gen;
}

void TableWriter::close() {
  {
    std::lock_guard lk(mu_);
    ranges_.clear();
    publishLocked();
    if (map_) store(header(map_)->closed, 1, std::memory_order_release);
  }
  waitForReaders(0);
}

void TableWriter::waitForReaders(uint64_t gen) {
  if (!map_) return;
  // Pairs with the fence in TableView::enter (see the header).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  void* r = static_cast<char*>(map_) + readersOffset(kTableCapacity);
  const uint64_t used = std::min<uint64_t>(load(readersHeader(r)->used, std::memory_order_acquire), kReaderSlots);
  ReaderSlot* sl = slots(r);
  bool waited = false;
  for (uint64_t i = 0; i < used; ++i) {
    const auto start = std::chrono::steady_clock::now();
    auto next_log = start + std::chrono::seconds(1);
    for (unsigned spin = 0;; ++spin) {
      const uint64_t h = load(sl[i].hazard, std::memory_order_acquire);
      if (h == 0 || (gen != 0 && h != gen)) break;
      const uint64_t owner = load(sl[i].owner, std::memory_order_acquire);
      if (!live(owner)) break;  // its copies ended with it
      if (!waited) waits_.fetch_add(1, std::memory_order_relaxed);  // counted as it starts waiting
      waited = true;
      const auto now = std::chrono::steady_clock::now();
      if (now >= next_log) {
        HLOG_WARN("shm: withdrawing registration {} has waited {} ms for a copy of reader {} (a stopped process?)",
                  gen, std::chrono::duration_cast<std::chrono::milliseconds>(now - start).count(), owner);
        next_log = now + std::chrono::seconds(5);
      }
      if (spin < 64) std::this_thread::yield();
      else std::this_thread::sleep_for(std::chrono::microseconds(spin < 1000 ? 20 : 1000));
    }
  }
}

bool TableWriter::live(uint64_t token) const {
  std::lock_guard lk(readers_mu_);
  return token != 0 && readers_.count(token) != 0;
}

void TableWriter::readerJoined(uint64_t token) {
  std::lock_guard lk(readers_mu_);
  readers_.insert(token);
}

void TableWriter::readerLeft(uint64_t token) {
  {
    std::lock_guard lk(readers_mu_);
    readers_.erase(token);
  }
  if (!map_) return;
  void* r = static_cast<char*>(map_) + readersOffset(kTableCapacity);
  const uint64_t used = std::min<uint64_t>(load(readersHeader(r)->used, std::memory_order_acquire), kReaderSlots);
  ReaderSlot* sl = slots(r);
  for (uint64_t i = 0; i < used; ++i) {
    std::atomic_ref<uint64_t> owner(sl[i].owner);
    uint64_t cur = token;
    if (owner.load(std::memory_order_acquire) != token) continue;
    store(sl[i].hazard, 0, std::memory_order_release);
    owner.compare_exchange_strong(cur, 0, std::memory_order_acq_rel);
  }
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
  for (auto& [a, r] : ranges_) {
    store(e[i].addr, a);
    store(e[i].length, r.length);
    store(e[i].gen, r.gen);
    ++i;
  }
  store(h->count, i);
  store(h->seq, seq + 2, std::memory_order_release);  // even: consistent
}

// ---- reader ------------------------------------------------------------------

TableView::~TableView() {
  if (map_) ::munmap(const_cast<void*>(map_), readersOffset(kTableCapacity));
  if (readers_) ::munmap(readers_, readersBytes());
}

Status TableView::open(int f, uint64_t nonce, std::unique_ptr<TableView>& out) {
  const std::string path = "the table the peer passed";
  struct stat st {};
  if (::fstat(f, &st) != 0 || static_cast<size_t>(st.st_size) < fileBytes(kTableCapacity))
    return {Code::kNotSupported, fmt::format("{} is not a hawser shm table of version {} (size)", path, kTableVersion)};
  const size_t head = readersOffset(kTableCapacity);
  void* m = ::mmap(nullptr, head, PROT_READ, MAP_SHARED, f, 0);
  void* r = m == MAP_FAILED ? MAP_FAILED
                            : ::mmap(nullptr, readersBytes(), PROT_READ | PROT_WRITE, MAP_SHARED, f,
                                     static_cast<off_t>(head));
  const int err = errno;
  if (m == MAP_FAILED || r == MAP_FAILED) {
    if (m != MAP_FAILED) ::munmap(m, head);
    return {Code::kNotSupported, fmt::format("mmap of {}: {}", path, std::strerror(err))};
  }
  std::unique_ptr<TableView> v(new TableView());
  v->map_ = m;
  v->readers_ = r;
  if (!tableHeaderMatches(m, nonce))
    return {Code::kNotSupported, fmt::format("{} is not the peer's shm table (magic, version or nonce differ)", path)};
  out = std::move(v);
  return Status::OK();
}

bool TableView::closed() const { return load(header(map_)->closed, std::memory_order_acquire) != 0; }

ReaderSlot* TableView::slot(int i) const { return &slots(readers_)[i]; }

int TableView::claimSlot(uint64_t token) const {
  ReadersHeader* rh = readersHeader(readers_);
  for (uint32_t i = 0; i < kReaderSlots; ++i) {
    std::atomic_ref<uint64_t> owner(slot(static_cast<int>(i))->owner);
    uint64_t cur = 0;
    if (owner.load(std::memory_order_acquire) != 0) continue;
    if (!owner.compare_exchange_strong(cur, token, std::memory_order_acq_rel)) continue;
    store(slot(static_cast<int>(i))->hazard, 0, std::memory_order_release);
    std::atomic_ref<uint64_t> used(rh->used);
    uint64_t u = used.load(std::memory_order_acquire);
    while (u < i + 1 && !used.compare_exchange_weak(u, i + 1, std::memory_order_acq_rel)) {
    }
    return static_cast<int>(i);
  }
  return -1;
}

void TableView::releaseSlot(int i) const {
  if (i < 0) return;
  store(slot(i)->hazard, 0, std::memory_order_release);
  store(slot(i)->owner, 0, std::memory_order_release);
}

bool TableView::enter(int i, uint64_t entry_addr, uint64_t gen) const {
  store(slot(i)->hazard, gen);
  // Pairs with the fence in TableWriter::waitForReaders (see the header).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  TableEntry e{};
  if (find(entry_addr, 1, e) && e.addr == entry_addr && e.gen == gen) return true;
  leave(i);
  return false;
}

void TableView::leave(int i) const { store(slot(i)->hazard, 0, std::memory_order_release); }

bool tableHeaderMatches(const void* map, uint64_t nonce) {
  const TableHeader* h = header(map);
  // The writer fills the header before it stores the magic (release).
  return load(h->magic, std::memory_order_acquire) == kTableMagic && h->version == kTableVersion &&
         h->capacity == kTableCapacity && h->nonce == nonce;
}

bool lookupOnce(const void* map, uint64_t addr, uint64_t len, bool& in, TableEntry& entry, uint64_t& seq) {
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
    const uint64_t a = load(e[lo - 1].addr), l = load(e[lo - 1].length), g = load(e[lo - 1].gen);
    in = addr >= a && len <= l && addr - a <= l - len;
    if (in) entry = TableEntry{a, l, g, 0};
  }
  std::atomic_thread_fence(std::memory_order_acquire);
  if (load(h->seq) != s1) return false;
  seq = s1;
  return true;
}

bool TableView::find(uint64_t addr, uint64_t len, TableEntry& entry) const {
  // A writer killed mid-update leaves seq odd: give up after a bound (the
  // range then counts as not exposed).
  // The clock is read only once the writer was seen busy 64 times (a
  // lookup mostly succeeds at once: no clock read on the copy path).
  std::chrono::steady_clock::time_point deadline{};
  for (unsigned spin = 0;; ++spin) {
    if (spin > 64) {
      const auto now = std::chrono::steady_clock::now();
      if (spin == 65) deadline = now + std::chrono::milliseconds(100);
      else if (now > deadline) return false;
      std::this_thread::yield();
    }
    bool in = false;
    uint64_t seq = 0;
    if (lookupOnce(map_, addr, len, in, entry, seq)) return in;
  }
}

}  // namespace hawser::shm
