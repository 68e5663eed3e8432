// A stand-in for libcufile.so.0 with the entry points the file transport
// resolves (src/transport/file/cufile_api.h), for CI, which has neither a
// GPU nor cuFile. It behaves like cuFile in compat mode on the H200 test
// machine (/work/shared/research/storage_metadata.md section 0):
//
// - I/O is POSIX on a page-cache descriptor of the registered file, and the
//   bytes reach "device memory" only through the stand-in CUDA driver's
//   cuMemcpy (this library is linked to it), never by a host access.
// - Batches hold at most 128 entries: cuFileBatchIOSetUp with more, or a
//   submit beyond the set-up size or onto a batch with entries still
//   running, is 5022 (CU_FILE_INVALID_VALUE).
// - Entries run on a worker thread newest first, so cuFileBatchIOGetStatus
//   returns completions OUT OF ORDER; callers must match them by cookie.
// - cuFileBatchIOCancel cancels the entries of the batch not yet run.
//
// Hooks (environment, read at each call): HAWSER_FAKE_CUFILE_REFUSE=TEXT
// makes cuFileHandleRegister refuse (5027, as without a udev record) files
// whose path contains TEXT; HAWSER_FAKE_CUFILE_FAIL=TEXT fails entries on
// such files (EIO); HAWSER_FAKE_CUFILE_DELAY_MS=N delays each entry.
// hawserFakeCufileStats() reports counts for tests; hawserFakeCufileGate(mask)
// holds cuFileDriverOpen (mask bit 1) and cuFileBufRegister (bit 2) at a gate
// until the test opens it (the real calls take 0.5 s and ~30 ms).
#include <fcntl.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

extern "C" int cuMemcpy(unsigned long long dst, unsigned long long src, size_t n);  // the stand-in driver
extern "C" int cuStreamSynchronize(void* stream);

namespace {

struct Error {
  int err;
  int cu_err;
};
struct Descr {
  int type;
  union {
    int fd;
    void* handle;
  } handle;
  const void* fs_ops;
};
struct IoParams {
  int mode;
  union {
    struct {
      void* devPtr_base;
      off_t file_offset;
      off_t devPtr_offset;
      size_t size;
    } batch;
  } u;
  void* fh;
  int opcode;
  void* cookie;
};
struct IoEvents {
  void* cookie;
  int status;
  size_t ret;
};
struct DrvProps {
  struct {
    unsigned major_version, minor_version;
    size_t poll_thresh_size, max_direct_io_size;
    unsigned dstatusflags, dcontrolflags;
  } nvfs;
  unsigned fflags, max_device_cache_size, per_buffer_cache_size, max_device_pinned_mem_size, max_batch_io_size,
      max_batch_io_timeout_msecs;
};

constexpr int kOk = 0, kInvalidValue = 5022, kAlreadyRegistered = 5023, kNotRegistered = 5024,
              kHandleNotRegistered = 5027, kDriverNotInitialized = 5001;
constexpr int kInvalid = 0x04, kCanceled = 0x08, kComplete = 0x10, kFailed = 0x40;
constexpr unsigned kMaxBatch = 128;

struct File {
  int fd;      // the caller's
  int shadow;  // ours, through the page cache
  std::string path;
};

struct Batch;
struct Job {
  Batch* batch;
  IoParams p;
  bool canceled = false;
};

struct Batch {
  unsigned max = 0;
  unsigned running = 0;  // submitted, not yet completed
  std::deque<IoEvents> done;
  bool destroyed = false;
};

// Never destroyed: the worker thread waits on them for the life of the
// process (destroying a condition variable it waits on would hang exit).
std::mutex& g_mu = *new std::mutex;
std::condition_variable& g_cv = *new std::condition_variable;       // work for the worker
std::condition_variable& g_done_cv = *new std::condition_variable;  // completions for GetStatus
bool g_open = false;
std::set<File*>& g_files = *new std::set<File*>;
std::map<uint64_t, size_t>& g_bufs = *new std::map<uint64_t, size_t>;
std::set<Batch*>& g_batches = *new std::set<Batch*>;
std::deque<Job>& g_work = *new std::deque<Job>;  // the worker takes from the back: newest first
std::thread* g_worker = nullptr;
// The gate (its own lock: other calls go on while one waits there).
std::mutex& g_gate_mu = *new std::mutex;
std::condition_variable& g_gate_cv = *new std::condition_variable;
int g_gate = 0;
long g_gate_waiting = 0, g_buf_register_calls = 0;
constexpr int kGateDriverOpen = 1, kGateBufRegister = 2;

void gate(int bit) {
  std::unique_lock lk(g_gate_mu);
  if (bit == kGateBufRegister) g_buf_register_calls++;
  if (!(g_gate & bit)) return;
  g_gate_waiting++;
  g_gate_cv.wait(lk, [&] { return !(g_gate & bit); });
  g_gate_waiting--;
}

long g_setups = 0, g_submits = 0, g_entries = 0, g_max_entries = 0, g_opens = 0, g_canceled = 0, g_buf_entries = 0;

Error ok() { return {kOk, 0}; }
Error err(int e) { return {e, 0}; }

long envLong(const char* name) {
  const char* v = getenv(name);
  return v && *v ? atol(v) : 0;
}

size_t runJob(const IoParams& p, int shadow, int& status) {
  const auto dev = reinterpret_cast<unsigned long long>(p.u.batch.devPtr_base) +
                   static_cast<unsigned long long>(p.u.batch.devPtr_offset);
  std::vector<char> host(p.u.batch.size);
  if (p.opcode == 0) {  // read
    size_t got = 0;
    while (got < host.size()) {
      ssize_t n = pread(shadow, host.data() + got, host.size() - got, p.u.batch.file_offset + static_cast<off_t>(got));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        status = kFailed;
        return static_cast<size_t>(-static_cast<ssize_t>(errno));
      }
      if (n == 0) break;
      got += static_cast<size_t>(n);
    }
    // From pageable memory the driver's cuMemcpy returns before the bytes
    // land (fake_cuda.cpp): a read is complete once they did.
    if (got && (cuMemcpy(dev, reinterpret_cast<unsigned long long>(host.data()), got) != 0 ||
                cuStreamSynchronize(nullptr) != 0)) {
      status = kFailed;
      return static_cast<size_t>(-static_cast<ssize_t>(EFAULT));
    }
    status = kComplete;
    return got;
  }
  if (cuMemcpy(reinterpret_cast<unsigned long long>(host.data()), dev, host.size()) != 0) {
    status = kFailed;
    return static_cast<size_t>(-static_cast<ssize_t>(EFAULT));
  }
  size_t put = 0;
  while (put < host.size()) {
    ssize_t n = pwrite(shadow, host.data() + put, host.size() - put, p.u.batch.file_offset + static_cast<off_t>(put));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      status = kFailed;
      return static_cast<size_t>(-static_cast<ssize_t>(n < 0 ? errno : EIO));
    }
    put += static_cast<size_t>(n);
  }
  status = kComplete;
  return put;
}

void worker() {
  std::unique_lock lk(g_mu);
  for (;;) {
    g_done_cv.notify_all();
    g_cv.wait(lk, [] { return !g_work.empty(); });
    Job j = g_work.back();
    g_work.pop_back();
    auto* f = static_cast<File*>(j.p.fh);
    const bool known = g_files.count(f) != 0;
    const int shadow = known ? f->shadow : -1;
    const char* fail = getenv("HAWSER_FAKE_CUFILE_FAIL");
    const bool failing = known && fail && *fail && f->path.find(fail) != std::string::npos;
    lk.unlock();
    int status = kInvalid;
    size_t ret = 0;
    if (failing) {
      status = kFailed;
      ret = static_cast<size_t>(-static_cast<ssize_t>(EIO));
    } else if (known) {
      if (long d = envLong("HAWSER_FAKE_CUFILE_DELAY_MS")) std::this_thread::sleep_for(std::chrono::milliseconds(d));
      ret = runJob(j.p, shadow, status);
    }
    lk.lock();
    j.batch->done.push_back(IoEvents{j.p.cookie, status, ret});
    j.batch->running--;
  }
}

}  // namespace

extern "C" {

Error cuFileDriverOpen() {
  gate(kGateDriverOpen);
  std::lock_guard lk(g_mu);
  g_open = true;
  g_opens++;
  if (!g_worker) g_worker = new std::thread(worker);  // lives as long as the process
  return ok();
}

Error cuFileDriverClose_v2() {
  std::lock_guard lk(g_mu);
  g_open = false;
  return ok();
}

Error cuFileDriverGetProperties(DrvProps* p) {
  std::memset(p, 0, sizeof(*p));
  p->nvfs.major_version = 0;  // no nvidia-fs: compat mode
  p->nvfs.max_direct_io_size = 16384;
  p->max_batch_io_size = kMaxBatch;
  p->max_batch_io_timeout_msecs = 5;
  return ok();
}

Error cuFileGetVersion(int* v) {
  *v = 1150;
  return ok();
}

Error cuFileHandleRegister(void** fh, Descr* d) {
  if (!g_open) return err(kDriverNotInitialized);
  if (!d || d->type != 1) return err(kInvalidValue);
  const int fd = d->handle.fd;
  char link[64], path[4096] = {0};
  snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
  if (readlink(link, path, sizeof(path) - 1) < 0) return err(kInvalidValue);
  const char* refuse = getenv("HAWSER_FAKE_CUFILE_REFUSE");
  if (refuse && *refuse && std::strstr(path, refuse)) {
    fprintf(stderr, "fake cufile: udev property not found: ID_FS_USAGE for %s\n", path);
    return err(kHandleNotRegistered);
  }
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0) return err(kInvalidValue);
  int shadow = open(link, (fl & O_ACCMODE) | O_CLOEXEC);
  if (shadow < 0) return err(kHandleNotRegistered);
  std::lock_guard lk(g_mu);
  for (File* f : g_files)
    if (f->fd == fd) {
      close(shadow);
      return err(5028);
    }
  auto* f = new File{fd, shadow, path};
  g_files.insert(f);
  *fh = f;
  return ok();
}

void cuFileHandleDeregister(void* fh) {
  std::lock_guard lk(g_mu);
  auto* f = static_cast<File*>(fh);
  if (!g_files.erase(f)) return;
  close(f->shadow);
  delete f;
}

Error cuFileBufRegister(const void* p, size_t n, int) {
  gate(kGateBufRegister);
  std::lock_guard lk(g_mu);
  if (!p || n == 0) return err(kInvalidValue);
  if (!g_bufs.emplace(reinterpret_cast<uint64_t>(p), n).second) return err(kAlreadyRegistered);
  return ok();
}

Error cuFileBufDeregister(const void* p) {
  std::lock_guard lk(g_mu);
  if (!g_bufs.erase(reinterpret_cast<uint64_t>(p))) return err(kNotRegistered);
  return ok();
}

Error cuFileBatchIOSetUp(void** b, unsigned nr) {
  if (nr == 0 || nr > kMaxBatch) {
    fprintf(stderr, "fake cufile: Invalid max number of ios for Batch setup: %u max allowed: %u\n", nr, kMaxBatch);
    return err(kInvalidValue);
  }
  std::lock_guard lk(g_mu);
  auto* batch = new Batch();
  batch->max = nr;
  g_batches.insert(batch);
  g_setups++;
  *b = batch;
  return ok();
}

Error cuFileBatchIOSubmit(void* b, unsigned nr, IoParams* ps, unsigned) {
  std::lock_guard lk(g_mu);
  auto* batch = static_cast<Batch*>(b);
  if (!g_batches.count(batch) || nr == 0 || nr > batch->max || batch->running > 0 || !batch->done.empty())
    return err(kInvalidValue);
  long named = 0;  // entries naming a registered buffer (its base), which must hold them
  for (unsigned i = 0; i < nr; ++i) {
    if (ps[i].mode != 1 || (ps[i].opcode != 0 && ps[i].opcode != 1)) return err(kInvalidValue);
    auto b = g_bufs.find(reinterpret_cast<uint64_t>(ps[i].u.batch.devPtr_base));
    if (b == g_bufs.end()) continue;
    if (ps[i].u.batch.devPtr_offset < 0 ||
        static_cast<size_t>(ps[i].u.batch.devPtr_offset) + ps[i].u.batch.size > b->second)
      return err(kInvalidValue);
    named++;
  }
  g_buf_entries += named;
  for (unsigned i = 0; i < nr; ++i) g_work.push_back(Job{batch, ps[i], false});
  batch->running = nr;
  g_submits++;
  g_entries += nr;
  g_max_entries = std::max<long>(g_max_entries, nr);
  g_cv.notify_all();
  return ok();
}

Error cuFileBatchIOGetStatus(void* b, unsigned min_nr, unsigned* nr, IoEvents* evs, timespec* timeout) {
  std::unique_lock lk(g_mu);
  auto* batch = static_cast<Batch*>(b);
  if (!g_batches.count(batch) || !nr || min_nr > *nr) return err(kInvalidValue);
  auto enough = [&] { return batch->done.size() >= min_nr; };
  if (!timeout) {
    g_done_cv.wait(lk, enough);
  } else {
    auto d = std::chrono::seconds(timeout->tv_sec) + std::chrono::nanoseconds(timeout->tv_nsec);
    g_done_cv.wait_for(lk, d, enough);
  }
  unsigned n = 0;
  while (n < *nr && !batch->done.empty()) {
    evs[n++] = batch->done.front();
    batch->done.pop_front();
  }
  *nr = n;
  return ok();
}

Error cuFileBatchIOCancel(void* b) {
  std::lock_guard lk(g_mu);
  auto* batch = static_cast<Batch*>(b);
  if (!g_batches.count(batch)) return err(kInvalidValue);
  for (auto it = g_work.begin(); it != g_work.end();) {
    if (it->batch == batch) {
      batch->done.push_back(IoEvents{it->p.cookie, kCanceled, 0});
      batch->running--;
      g_canceled++;
      it = g_work.erase(it);
    } else {
      ++it;
    }
  }
  g_done_cv.notify_all();
  return ok();
}

void cuFileBatchIODestroy(void* b) {
  std::lock_guard lk(g_mu);
  auto* batch = static_cast<Batch*>(b);
  if (g_batches.erase(batch)) delete batch;
}

// Test hook (not cuFile): [driver opens, batch set-ups, live batches, submits,
// entries, largest submit, registered files, registered buffers, entries canceled,
// calls waiting at the gate, cuFileBufRegister calls, entries that named a
// registered buffer (its base, and the offset in it)].
int hawserFakeCufileStats(long* out, int n) {
  long waiting, buf_calls;
  {
    std::lock_guard gl(g_gate_mu);
    waiting = g_gate_waiting;
    buf_calls = g_buf_register_calls;
  }
  std::lock_guard lk(g_mu);
  const long v[] = {g_opens,       g_setups,
                    static_cast<long>(g_batches.size()), g_submits,
                    g_entries,     g_max_entries,
                    static_cast<long>(g_files.size()),   static_cast<long>(g_bufs.size()),
                    g_canceled,    waiting,
                    buf_calls,     g_buf_entries};
  int k = std::min<int>(n, static_cast<int>(sizeof(v) / sizeof(v[0])));
  for (int i = 0; i < k; ++i) out[i] = v[i];
  return k;
}

// Test hook (not cuFile): calls whose bit is set in `mask` (1:
// cuFileDriverOpen, 2: cuFileBufRegister) wait until a later call clears it.
void hawserFakeCufileGate(int mask) {
  {
    std::lock_guard lk(g_gate_mu);
    g_gate = mask;
  }
  g_gate_cv.notify_all();
}

}  // extern "C"
