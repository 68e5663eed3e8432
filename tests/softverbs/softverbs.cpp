// hawser software verbs provider: see softverbs.h for the model and knobs.
//
// Written for tests: it enforces what a ConnectX-class RC NIC enforces
// (QP state machine and modify masks, lkey/rkey validity, PD match, bounds,
// access flags, SQ depth, CQ capacity) so that the transport's verbs code is
// exercised as on hardware, and moves bytes between processes of one host
// with process_vm_readv/writev (no CPU of the target involved).
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "softverbs/softverbs.h"

// The header turns these into inline wrappers; this library provides the
// exported functions themselves.
#undef ibv_reg_mr
#undef ibv_reg_mr_iova
#undef ibv_query_port

#define SV_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

constexpr uint64_t kMagic = 0x3147455242565348ull;  // "HSVBREG1"
constexpr uint32_t kRegVersion = 5;
constexpr uint32_t kMaxDevs = 32;
constexpr uint32_t kMaxQps = 4096;   // qpn = gen << 12 | slot
constexpr uint32_t kMaxMrs = 16384;  // key = slot << 8 | gen
constexpr int kPinners = 4;         // copying processes tracked per MR
constexpr uint32_t kNoDev = 0xffffffffu;
constexpr int kGidTblLen = 8;
constexpr uint32_t kMaxQpWr = 16384;
constexpr uint32_t kMaxSge = 30;
constexpr uint32_t kMaxInline = 256;
constexpr int kMaxCqe = 4194303;
constexpr uint8_t kMaxRdAtom = 16;
constexpr uint32_t kPsnMask = 0xffffff;

// ---------------------------------------------------------------- registry
struct DevRec {
  char name[32];
  uint32_t used;
  uint32_t down;
  int32_t fail_count;
  int32_t fail_status;
  int32_t badkey_count;   // next WRs present a corrupted rkey
  int32_t postfail_count;  // next ibv_post_send calls fail (ENOMEM)
  uint32_t stalled;       // the NIC executes nothing
  uint32_t fatal;         // the NIC died without flushing anything
  uint32_t cqerr;         // bumped: its CQs overrun now
  uint32_t pad;
};
// A QP as the wire sees it: what each end programmed, for the pairwise
// checks an RC connection makes on every packet.
struct QpRec {
  uint32_t used, gen;
  int32_t pid;
  uint32_t dev, qpn, state;
  uint32_t dest_dev, dest_qpn;
  uint32_t access;
  uint32_t path_mtu;        // ibv_mtu, 0 before RTR
  uint64_t pd_id;
  uint32_t next_psn;        // requester: PSN of its next packet (sq_psn at RTS, then advancing)
  uint32_t expected_psn;    // responder: PSN it expects next (rq_psn at RTR, then advancing)
  uint32_t max_rd_atomic;   // READs it may have outstanding as requester
  uint32_t max_dest_rd_atomic;  // READs it serves at once as responder
  uint32_t ib;              // link layer of its port: 1 IB, 0 Ethernet
  uint32_t is_global;       // AV with a GRH
  uint32_t sgid_type;       // ibv_gid_type of the source GID entry
  uint16_t lid, dlid;       // IB: own port LID, destination LID
  uint8_t sgid[16];         // the GID its packets come from
  uint8_t dgid[16];         // the GID its packets go to
};
struct MrRec {
  uint32_t used, gen;
  int32_t pid;
  uint32_t dev, key, access;
  uint64_t pd_id, addr, length, iova;
  // Copies through this MR in progress (deregistration waits for them), per
  // copying process: a copier killed mid-copy never ends its copies, and a
  // dead pid's count is dropped. `busy` counts those of processes beyond
  // kPinners at once (no pid: waited for until the bound).
  int32_t busy;
  int32_t pad;
  struct {
    int32_t pid, count;
  } pinners[kPinners];
};
struct Registry {
  uint64_t magic;
  uint32_t version;
  uint32_t size;
  pthread_mutex_t mu;
  uint64_t next_pd;
  DevRec devs[kMaxDevs];
  QpRec qps[kMaxQps];
  MrRec mrs[kMaxMrs];
};

class RegLock {
 public:
  explicit RegLock(Registry* r) : r_(r) {
    if (pthread_mutex_lock(&r_->mu) == EOWNERDEAD) pthread_mutex_consistent(&r_->mu);
  }
  ~RegLock() { pthread_mutex_unlock(&r_->mu); }
  RegLock(const RegLock&) = delete;

 private:
  Registry* r_;
};

bool pidAlive(int32_t pid) { return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM); }

void mkdirs(const std::string& path) {
  std::string cur;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    cur = path.substr(0, pos);
    if (!cur.empty()) mkdir(cur.c_str(), 0755);
  }
}

void writeFile(const std::string& path, const std::string& text) {
  size_t slash = path.rfind('/');
  if (slash != std::string::npos) mkdirs(path.substr(0, slash));
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (!f) return;
  std::fputs(text.c_str(), f);
  std::fclose(f);
  std::rename(tmp.c_str(), path.c_str());
}

std::string registryDir() {
  const char* d = std::getenv("HAWSER_SOFTVERBS_DIR");
  return (d && *d) ? std::string(d) : std::string("/tmp/hawser-softverbs");
}

Registry* openRegistry(const std::string& dir) {
  static std::mutex mu;
  static auto* open = new std::map<std::string, Registry*>();
  std::lock_guard<std::mutex> lock(mu);
  auto it = open->find(dir);
  if (it != open->end()) return it->second;
  mkdirs(dir);
  std::string path = dir + "/registry";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return nullptr;
  flock(fd, LOCK_EX);
  struct stat st {};
  fstat(fd, &st);
  if (static_cast<size_t>(st.st_size) != sizeof(Registry)) {
    if (ftruncate(fd, 0) != 0 || ftruncate(fd, sizeof(Registry)) != 0) {
      flock(fd, LOCK_UN);
      ::close(fd);
      return nullptr;
    }
  }
  void* p = mmap(nullptr, sizeof(Registry), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    flock(fd, LOCK_UN);
    ::close(fd);
    return nullptr;
  }
  auto* r = static_cast<Registry*>(p);
  if (r->magic != kMagic || r->version != kRegVersion || r->size != sizeof(Registry)) {
    std::memset(r, 0, sizeof(Registry));
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&r->mu, &a);
    pthread_mutexattr_destroy(&a);
    r->next_pd = 1;
    r->version = kRegVersion;
    r->size = sizeof(Registry);
    __atomic_store_n(&r->magic, kMagic, __ATOMIC_RELEASE);
  }
  flock(fd, LOCK_UN);
  ::close(fd);
  (*open)[dir] = r;
  return r;
}

// Slot of device `name`, created when missing. kNoDev when full. Locked.
uint32_t ensureDevLocked(Registry* r, const std::string& name) {
  uint32_t free_slot = kNoDev;
  for (uint32_t i = 0; i < kMaxDevs; ++i) {
    if (r->devs[i].used && name == r->devs[i].name) return i;
    if (!r->devs[i].used && free_slot == kNoDev) free_slot = i;
  }
  if (free_slot == kNoDev) return kNoDev;
  DevRec& d = r->devs[free_slot];
  std::memset(&d, 0, sizeof(d));
  std::snprintf(d.name, sizeof(d.name), "%s", name.c_str());
  d.used = 1;
  return free_slot;
}

// ---------------------------------------------------------------- devices
struct DevSpec {
  std::string name;
  int numa = 0;
  int mtu = 4096;
  bool ib = false;
  bool v1only = false;
  bool v6only = false;   // RoCE with link-local and global IPv6 GIDs, no IPv4
  bool port_down = false;
  int rd_atom = kMaxRdAtom;       // max_qp_rd_atom: READs served at once per QP
  int init_rd_atom = kMaxRdAtom;  // max_qp_init_rd_atom: READs issued at once per QP
  int slowpost_us = 0;            // ibv_post_send takes this long (widens races)
  int slowpoll_us = 0;            // ibv_poll_cq takes this long (a poller that falls behind)

  std::string key() const {
    return name + "|" + std::to_string(numa) + "|" + std::to_string(mtu) + (ib ? "|ib" : "") + (v1only ? "|v1" : "") +
           (v6only ? "|v6" : "") + (port_down ? "|down" : "") + "|" + std::to_string(rd_atom) + "|" +
           std::to_string(init_rd_atom) + "|" + std::to_string(slowpost_us) + "|" + std::to_string(slowpoll_us);
  }
};

ibv_mtu mtuEnum(int bytes) {
  switch (bytes) {
    case 256: return IBV_MTU_256;
    case 512: return IBV_MTU_512;
    case 1024: return IBV_MTU_1024;
    case 2048: return IBV_MTU_2048;
    default: return IBV_MTU_4096;
  }
}

struct SvDevice {
  ibv_device dev;  // first: ibv_device* casts to SvDevice*
  DevSpec spec;
  std::string dir;
  Registry* reg = nullptr;
  uint32_t slot = kNoDev;
};

struct GidEnt {
  ibv_gid gid;
  uint32_t type;
};

ibv_gid linkLocalGid(uint32_t slot) {
  ibv_gid g{};
  g.raw[0] = 0xfe;
  g.raw[1] = 0x80;
  g.raw[8] = 0x02;
  g.raw[9] = 0x00;
  g.raw[10] = 0x5e;
  g.raw[11] = 0xff;
  g.raw[12] = 0xfe;
  g.raw[13] = 0x00;
  g.raw[14] = static_cast<uint8_t>(slot >> 8);
  g.raw[15] = static_cast<uint8_t>(slot);
  return g;
}

// 2001:db8::<slot>:1, a global IPv6 address.
ibv_gid ipv6Gid(uint32_t slot) {
  ibv_gid g{};
  g.raw[0] = 0x20;
  g.raw[1] = 0x01;
  g.raw[2] = 0x0d;
  g.raw[3] = 0xb8;
  g.raw[13] = static_cast<uint8_t>(slot);
  g.raw[15] = 1;
  return g;
}

ibv_gid ipv4Gid(uint32_t slot) {
  ibv_gid g{};
  g.raw[10] = 0xff;
  g.raw[11] = 0xff;
  g.raw[12] = 10;
  g.raw[13] = 200;
  g.raw[14] = static_cast<uint8_t>(slot);
  g.raw[15] = 1;
  return g;
}

void gidTable(const DevSpec& s, uint32_t slot, GidEnt out[kGidTblLen]) {
  std::memset(out, 0, sizeof(GidEnt) * kGidTblLen);
  if (s.ib) {
    out[0] = {linkLocalGid(slot), IBV_GID_TYPE_IB};
  } else if (s.v1only) {
    out[0] = {linkLocalGid(slot), IBV_GID_TYPE_ROCE_V1};
    out[1] = {ipv4Gid(slot), IBV_GID_TYPE_ROCE_V1};
  } else if (s.v6only) {
    out[0] = {linkLocalGid(slot), IBV_GID_TYPE_ROCE_V1};
    out[1] = {linkLocalGid(slot), IBV_GID_TYPE_ROCE_V2};
    out[2] = {ipv6Gid(slot), IBV_GID_TYPE_ROCE_V1};
    out[3] = {ipv6Gid(slot), IBV_GID_TYPE_ROCE_V2};
  } else {
    out[0] = {linkLocalGid(slot), IBV_GID_TYPE_ROCE_V1};
    out[1] = {linkLocalGid(slot), IBV_GID_TYPE_ROCE_V2};
    out[2] = {ipv4Gid(slot), IBV_GID_TYPE_ROCE_V1};
    out[3] = {ipv4Gid(slot), IBV_GID_TYPE_ROCE_V2};
  }
}

bool gidZero(const ibv_gid& g) {
  for (uint8_t b : g.raw)
    if (b) return false;
  return true;
}

// Which device owns this GID (both forms encode the slot).
uint32_t devOfGid(const ibv_gid& g) {
  ibv_gid ll = linkLocalGid(0);
  if (std::memcmp(g.raw, ll.raw, 14) == 0) return (uint32_t(g.raw[14]) << 8) | g.raw[15];
  ibv_gid v4 = ipv4Gid(0);
  if (std::memcmp(g.raw, v4.raw, 14) == 0 && g.raw[15] == 1) return g.raw[14];
  ibv_gid v6 = ipv6Gid(0);
  if (std::memcmp(g.raw, v6.raw, 13) == 0 && g.raw[14] == 0 && g.raw[15] == 1) return g.raw[13];
  return kNoDev;
}

bool gidIpv4(const uint8_t* g) {
  static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::memcmp(g, prefix, 12) == 0;
}

std::vector<DevSpec> parseDevices() {
  const char* env = std::getenv("HAWSER_SOFTVERBS_DEVICES");
  std::string text = env ? env : "sv0";
  std::vector<DevSpec> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    std::string item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? text.size() + 1 : comma + 1;
    if (item.empty()) continue;
    DevSpec s;
    size_t p = 0;
    bool first = true;
    while (p <= item.size()) {
      size_t colon = item.find(':', p);
      std::string tok = item.substr(p, colon == std::string::npos ? std::string::npos : colon - p);
      p = colon == std::string::npos ? item.size() + 1 : colon + 1;
      if (first) {
        s.name = tok;
        first = false;
      } else if (tok.rfind("numa=", 0) == 0) {
        s.numa = std::atoi(tok.c_str() + 5);
      } else if (tok.rfind("mtu=", 0) == 0) {
        s.mtu = std::atoi(tok.c_str() + 4);
      } else if (tok == "ib") {
        s.ib = true;
      } else if (tok == "v1") {
        s.v1only = true;
      } else if (tok == "v6") {
        s.v6only = true;
      } else if (tok == "down") {
        s.port_down = true;
      } else if (tok.rfind("rd_atom=", 0) == 0) {
        s.rd_atom = std::clamp(std::atoi(tok.c_str() + 8), 0, 255);
      } else if (tok.rfind("init_rd_atom=", 0) == 0) {
        s.init_rd_atom = std::clamp(std::atoi(tok.c_str() + 13), 0, 255);
      } else if (tok.rfind("slowpost=", 0) == 0) {
        s.slowpost_us = std::max(0, std::atoi(tok.c_str() + 9));
      } else if (tok.rfind("slowpoll=", 0) == 0) {
        s.slowpoll_us = std::max(0, std::atoi(tok.c_str() + 9));
      }
    }
    if (!s.name.empty() && s.name.size() < 32) out.push_back(s);
  }
  return out;
}

void writeSysfs(const SvDevice& d) {
  std::string base = d.dev.ibdev_path;
  writeFile(base + "/device/numa_node", std::to_string(d.spec.numa) + "\n");
  GidEnt t[kGidTblLen];
  gidTable(d.spec, d.slot, t);
  for (int i = 0; i < kGidTblLen; ++i) {
    if (gidZero(t[i].gid)) continue;
    writeFile(base + "/ports/1/gid_attrs/types/" + std::to_string(i),
              t[i].type == IBV_GID_TYPE_ROCE_V2 ? "RoCE v2\n" : "IB/RoCE v1\n");
  }
}

SvDevice* getDevice(const std::string& dir, const DevSpec& spec) {
  static std::mutex mu;
  static auto* devs = new std::map<std::string, std::unique_ptr<SvDevice>>();
  std::string key = dir + "|" + spec.key();
  std::lock_guard<std::mutex> lock(mu);
  auto it = devs->find(key);
  if (it != devs->end()) return it->second.get();
  Registry* reg = openRegistry(dir);
  if (!reg) return nullptr;
  uint32_t slot;
  {
    RegLock l(reg);
    slot = ensureDevLocked(reg, spec.name);
  }
  if (slot == kNoDev) return nullptr;
  auto d = std::make_unique<SvDevice>();
  std::memset(&d->dev, 0, sizeof(d->dev));
  d->dev.node_type = IBV_NODE_CA;
  d->dev.transport_type = IBV_TRANSPORT_IB;
  std::snprintf(d->dev.name, sizeof(d->dev.name), "%s", spec.name.c_str());
  std::snprintf(d->dev.dev_name, sizeof(d->dev.dev_name), "uverbs%u", slot);
  std::snprintf(d->dev.dev_path, sizeof(d->dev.dev_path), "%s/sys/uverbs%u", dir.c_str(), slot);
  std::snprintf(d->dev.ibdev_path, sizeof(d->dev.ibdev_path), "%s/sys/%s", dir.c_str(), spec.name.c_str());
  d->spec = spec;
  d->dir = dir;
  d->reg = reg;
  d->slot = slot;
  writeSysfs(*d);
  SvDevice* raw = d.get();
  (*devs)[key] = std::move(d);
  return raw;
}

// ---------------------------------------------------------------- objects
struct SvQp;
struct SvCq;

struct SvChannel {
  ibv_comp_channel ch;  // first
  int wfd = -1;
  std::mutex mu;
  std::deque<SvCq*> events;
  std::atomic<int> cq_refs{0};
};

struct CqEntry {
  ibv_wc wc;
  SvQp* qp;        // whose SQ slots this completion frees
  uint32_t slots;  // its own slot and those of the unsignaled WRs before it
};

struct SvCq {
  ibv_cq cq;  // first
  std::mutex mu;
  std::deque<CqEntry> q;
  uint32_t cap = 0;
  bool armed = false;
  bool err = false;  // overrun: the CQ is in error and every later completion is lost
  SvChannel* ch = nullptr;
  std::atomic<int> qp_refs{0};
};

struct SvPd {
  ibv_pd pd;  // first
  uint64_t id = 0;
  std::atomic<int> refs{0};
};

struct SvMr {
  ibv_mr mr;  // first
  uint32_t slot = 0;
  SvPd* pd = nullptr;
  void* dmabuf_map = nullptr;  // ibv_reg_dmabuf_mr: the fd's pages, mapped here
  size_t dmabuf_len = 0;
};

struct Wr {
  uint64_t wr_id = 0;
  ibv_wr_opcode op = IBV_WR_RDMA_WRITE;
  bool signaled = false;
  uint64_t raddr = 0;
  uint32_t rkey = 0;
  std::vector<ibv_sge> sge;
  std::vector<char> inl;  // IBV_SEND_INLINE payload
};

struct SvContext;

struct SvQp {
  ibv_qp qp;  // first
  SvContext* sc = nullptr;
  SvPd* pd = nullptr;
  SvCq* scq = nullptr;
  SvCq* rcq = nullptr;
  uint32_t slot = 0;
  uint32_t max_send_wr = 0, max_send_sge = 0, max_inline = 0;
  bool sig_all = false;
  ibv_mtu path_mtu = IBV_MTU_1024;
  std::deque<Wr> sq;                 // under sc->mu
  std::atomic<uint32_t> sq_used{0};  // slots taken: posted, and not yet freed by a polled completion
  uint32_t unsig_done = 0;           // under sc->exec_mu: executed unsignaled WRs, slots still taken
  bool in_ready = false;             // under sc->mu
};

struct SvContext {
  ibv_context ctx;  // first
  SvDevice* dev = nullptr;
  std::mutex mu;       // sq, ready, qps, cqs, async queue
  std::mutex exec_mu;  // held while the NIC thread executes WRs
  std::condition_variable cv;
  std::deque<SvQp*> ready;
  std::set<SvQp*> qps;
  std::set<SvCq*> cqs;
  bool stop = false;
  std::atomic<bool> dead{false};
  bool silent = false;  // dead without flushing: its WRs never complete ("fatal")
  uint32_t cqerr_seen = 0;
  int async_wfd = -1;
  std::deque<ibv_async_event> async_q;
  std::thread nic;
};

SvContext* sctx(ibv_context* c) { return reinterpret_cast<SvContext*>(c); }

void pushAsync(SvContext* sc, const ibv_async_event& ev) {
  std::lock_guard<std::mutex> lock(sc->mu);
  sc->async_q.push_back(ev);
  char b = 'a';
  ssize_t n = write(sc->async_wfd, &b, 1);
  (void)n;
}

// The CQ overran (or is made to): it goes to error, raises IBV_EVENT_CQ_ERR,
// and from now on loses every completion. Locked (cq->mu).
void overrunLocked(SvCq* cq) {
  if (cq->err) return;
  cq->err = true;
  ibv_async_event ev{};
  ev.element.cq = &cq->cq;
  ev.event_type = IBV_EVENT_CQ_ERR;
  pushAsync(sctx(cq->cq.context), ev);
}

// False when the completion was lost (the CQ is full or in error): its QP
// can no longer complete anything and goes to ERR (the caller does that).
bool pushCqe(SvCq* cq, const ibv_wc& wc, SvQp* qp, uint32_t slots) {
  SvChannel* notify = nullptr;
  {
    std::lock_guard<std::mutex> lock(cq->mu);
    if (cq->err) return false;
    if (cq->q.size() >= cq->cap) {
      overrunLocked(cq);
      return false;
    }
    cq->q.push_back(CqEntry{wc, qp, slots});
    if (cq->armed && cq->ch) {
      cq->armed = false;
      notify = cq->ch;
    }
  }
  if (notify) {
    std::lock_guard<std::mutex> lock(notify->mu);
    notify->events.push_back(cq);
    char b = 'c';
    ssize_t n = write(notify->wfd, &b, 1);
    (void)n;
  }
  return true;
}

// Is [addr, addr+len) mapped in this process? (ibv_reg_mr pins pages; a
// range that is not mapped fails with EFAULT.)
bool rangeMapped(uint64_t addr, uint64_t len) {
  long page = sysconf(_SC_PAGESIZE);
  uint64_t start = addr & ~uint64_t(page - 1);
  uint64_t end = addr + len;
  std::vector<unsigned char> vec;
  const uint64_t chunk = 1ull << 30;
  for (uint64_t p = start; p < end; p += chunk) {
    uint64_t n = std::min(chunk, end - p);
    vec.resize((n + page - 1) / page);
    if (mincore(reinterpret_cast<void*>(p), n, vec.data()) != 0) return false;
  }
  return true;
}

// Is every page of [addr, addr+len) mapped writable? (Pinning for a NIC that
// writes, LOCAL_WRITE or REMOTE_WRITE, takes the pages for writing: a
// read-only mapping fails with EFAULT.)
bool rangeWritable(uint64_t addr, uint64_t len) {
  FILE* f = std::fopen("/proc/self/maps", "r");
  if (!f) return false;
  uint64_t covered = addr;
  const uint64_t end = addr + len;
  char line[512];
  while (covered < end && std::fgets(line, sizeof(line), f)) {
    unsigned long lo = 0, hi = 0;
    char perms[8] = {0};
    if (std::sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3) continue;
    if (hi <= covered || lo > covered) continue;
    if (perms[1] != 'w') break;
    covered = hi;
  }
  std::fclose(f);
  return covered >= end;
}

// ---------------------------------------------------------------- NIC
// The MR `key` of device `dev`, process `pid`, PD `pd_id` covering
// [addr, +len) with `need` access: its host address of addr and its slot.
bool lookupMr(Registry* r, uint32_t key, uint32_t dev, int32_t pid, uint64_t pd_id, uint64_t addr,
              uint64_t len, uint32_t need, uint64_t& va, uint32_t& slot_out) {
  uint32_t slot = key >> 8;
  if (slot >= kMaxMrs) return false;
  const MrRec& m = r->mrs[slot];
  if (!m.used || m.key != key || m.dev != dev || m.pid != pid || m.pd_id != pd_id) return false;
  if (addr < m.iova || len > m.length || addr - m.iova > m.length - len) return false;
  if ((m.access & need) != need) return false;
  va = m.addr + (addr - m.iova);
  slot_out = slot;
  return true;
}

// Copies with process_vm_*; 0, or the errno.
int cmaCopy(bool read, int32_t pid, const std::vector<iovec>& local, uint64_t raddr) {
  uint64_t off = 0;
  for (const iovec& l : local) {
    size_t done = 0;
    while (done < l.iov_len) {
      iovec li{static_cast<char*>(l.iov_base) + done, l.iov_len - done};
      iovec ri{reinterpret_cast<void*>(raddr + off + done), l.iov_len - done};
      ssize_t n = read ? process_vm_readv(pid, &li, 1, &ri, 1, 0) : process_vm_writev(pid, &li, 1, &ri, 1, 0);
      if (n < 0) {
        if (errno == EINTR) continue;
        return errno;
      }
      if (n == 0) return EFAULT;
      done += static_cast<size_t>(n);
    }
    off += l.iov_len;
  }
  return 0;
}

void setQpStateLocked(Registry* r, uint32_t slot, uint32_t state) { r->qps[slot].state = state; }

int mtuBytesOf(uint32_t m) { return m >= IBV_MTU_256 && m <= IBV_MTU_4096 ? 128 << m : 4096; }

// What the wire makes of a WR of `total` bytes from `me` to the QP `rq` it
// is connected to (and that is connected back): IBV_WC_SUCCESS or the
// requester's error status, checked on every WR, so the first WR of a
// connection already meets every rule. `land` is set false for a WRITE the
// responder takes for a duplicate (it acknowledges it without executing it,
// as an RC responder does with a PSN it has already seen). Locked.
int wireCheck(QpRec& me, QpRec& rq, bool is_read, uint64_t total, bool& land) {
  land = true;
  // Addressing: each end must send to where the other one is, in the same
  // packet format, or nothing arrives (or no ACK comes back): the requester
  // retries until its retry count runs out.
  if (me.ib != rq.ib) return IBV_WC_RETRY_EXC_ERR;
  if (!me.ib) {
    if (me.sgid_type != rq.sgid_type) return IBV_WC_RETRY_EXC_ERR;  // RoCE v1 and v2 never meet
    if (std::memcmp(me.dgid, rq.sgid, 16) != 0 || std::memcmp(rq.dgid, me.sgid, 16) != 0)
      return IBV_WC_RETRY_EXC_ERR;
    if (me.sgid_type == IBV_GID_TYPE_ROCE_V2 &&
        (gidIpv4(me.sgid) != gidIpv4(me.dgid) || gidIpv4(rq.sgid) != gidIpv4(rq.dgid)))
      return IBV_WC_RETRY_EXC_ERR;  // an IPv4 source cannot reach an IPv6 destination
  } else if (me.dlid != rq.lid || rq.dlid != me.lid) {
    return IBV_WC_RETRY_EXC_ERR;
  }
  // Path MTU: both ends segment and check packets by their own path MTU.
  // A WRITE's packets are refused by the responder (invalid request); a
  // READ's responses are dropped by the requester until it gives up.
  if (me.path_mtu != rq.path_mtu) {
    if (is_read) return IBV_WC_RETRY_EXC_ERR;
    rq.state = IBV_QPS_ERR;
    return IBV_WC_REM_INV_REQ_ERR;
  }
  // Read resources: a requester may have max_rd_atomic READs outstanding; a
  // responder serves max_dest_rd_atomic. More than it serves is an invalid
  // request (the soft NIC runs one WR at a time, so the rule is checked on
  // the programmed depths, not on a count of READs in flight).
  if (is_read) {
    if (me.max_rd_atomic == 0) return IBV_WC_LOC_QP_OP_ERR;  // this QP may issue no READ
    if (me.max_rd_atomic > rq.max_dest_rd_atomic) {
      rq.state = IBV_QPS_ERR;
      return IBV_WC_REM_INV_REQ_ERR;
    }
  }
  // PSNs: the requester's next PSN must be the one the responder expects.
  const uint32_t mtu = static_cast<uint32_t>(mtuBytesOf(me.path_mtu));
  const uint32_t pkts = total == 0 ? 1 : static_cast<uint32_t>((total + mtu - 1) / mtu);
  const uint32_t ahead = (me.next_psn - rq.expected_psn) & kPsnMask;
  if (ahead != 0 && ahead < 0x800000) {
    // Later than expected: the responder NAKs every try (PSN sequence error).
    std::fprintf(stderr, "softverbs: QP %#x sends PSN %#x, responder QP %#x expects %#x: sequence error\n", me.qpn,
                 me.next_psn, rq.qpn, rq.expected_psn);
    return IBV_WC_RETRY_EXC_ERR;
  }
  if (ahead != 0) {
    // Earlier than expected: a duplicate. Acknowledged; a READ is served
    // again, a WRITE is not executed.
    std::fprintf(stderr, "softverbs: QP %#x sends PSN %#x, responder QP %#x expects %#x: duplicate, %s\n", me.qpn,
                 me.next_psn, rq.qpn, rq.expected_psn, is_read ? "served again" : "WRITE dropped");
    land = is_read;
  } else {
    rq.expected_psn = (rq.expected_psn + pkts) & kPsnMask;
  }
  me.next_psn = (me.next_psn + pkts) & kPsnMask;
  return IBV_WC_SUCCESS;
}

// Fields a completion with an error status leaves undefined: poisoned, so
// that reading them is visible.
void poisonErrorCqe(ibv_wc& wc) {
  wc.opcode = static_cast<ibv_wc_opcode>(0x5eb);
  wc.byte_len = 0xbadbad;
  wc.wc_flags = 0xbad;
  wc.imm_data = 0xbadbadba;
  wc.src_qp = 0xbad;
  wc.pkey_index = 0xbad;
  wc.slid = 0xbad;
  wc.sl = 0xb;
  wc.dlid_path_bits = 0xb;
}

// A copy of this process holds MR `slot` (under the registry lock).
void pinLocked(Registry* r, uint32_t slot) {
  MrRec& m = r->mrs[slot];
  const int32_t me = getpid();
  int free_at = -1;
  for (int i = 0; i < kPinners; ++i) {
    if (m.pinners[i].count > 0 && m.pinners[i].pid == me) {
      ++m.pinners[i].count;
      return;
    }
    if (m.pinners[i].count == 0 && free_at < 0) free_at = i;
  }
  if (free_at >= 0) {
    m.pinners[free_at] = {me, 1};
  } else {
    ++m.busy;
  }
}

void unpin(Registry* r, const std::vector<uint32_t>& slots) {
  if (slots.empty()) return;
  RegLock l(r);
  const int32_t me = getpid();
  for (uint32_t s : slots) {
    MrRec& m = r->mrs[s];
    bool found = false;
    for (auto& e : m.pinners)
      if (!found && e.count > 0 && e.pid == me) {
        --e.count;
        found = true;
      }
    if (!found) --m.busy;
  }
}

void execute(SvContext* sc, SvQp* qp, Wr& wr) {
  Registry* r = sc->dev->reg;
  const uint32_t me_dev = sc->dev->slot;
  const bool is_read = wr.op == IBV_WR_RDMA_READ;
  ibv_wc wc{};
  wc.wr_id = wr.wr_id;
  wc.qp_num = qp->qp.qp_num;
  int status = IBV_WC_SUCCESS;
  bool land = true;
  int32_t rpid = 0;
  uint64_t rva = 0;
  uint64_t total = 0;
  std::vector<iovec> local;
  std::vector<uint32_t> pinned;  // MRs whose pages this copy uses
  for (const ibv_sge& s : wr.sge) total += s.length;
  {
    RegLock l(r);
    QpRec& me = r->qps[qp->slot];
    if (me.state == IBV_QPS_ERR) {
      status = IBV_WC_WR_FLUSH_ERR;
    } else if (r->devs[me_dev].down || sc->dead.load()) {
      status = IBV_WC_WR_FLUSH_ERR;
    } else if (r->devs[me_dev].fail_count > 0) {
      r->devs[me_dev].fail_count--;
      status = r->devs[me_dev].fail_status;
    } else {
      if (r->devs[me_dev].badkey_count > 0) {
        r->devs[me_dev].badkey_count--;
        wr.rkey ^= 0x80000000u;  // names no MR anywhere
      }
      // Local SGEs: lkey of this device, this process, this QP's PD.
      std::vector<uint32_t> lslots;
      if (!wr.inl.empty()) {
        local.push_back(iovec{wr.inl.data(), wr.inl.size()});
        total = wr.inl.size();
      } else {
        for (const ibv_sge& s : wr.sge) {
          uint64_t va = 0;
          uint32_t slot = 0;
          if (!lookupMr(r, s.lkey, me_dev, getpid(), qp->pd->id, s.addr, s.length,
                        is_read ? IBV_ACCESS_LOCAL_WRITE : 0, va, slot)) {
            status = IBV_WC_LOC_PROT_ERR;
            break;
          }
          if (s.length) local.push_back(iovec{reinterpret_cast<void*>(va), s.length});
          lslots.push_back(slot);
        }
      }
      // The responder: a live QP connected back to this one, on a live NIC.
      uint32_t rslot = me.dest_qpn & (kMaxQps - 1);
      QpRec* rq = me.dest_dev == kNoDev ? nullptr : &r->qps[rslot];
      if (status == IBV_WC_SUCCESS) {
        if (!rq || !rq->used || rq->qpn != me.dest_qpn || rq->dev != me.dest_dev || r->devs[me.dest_dev].down ||
            r->devs[me.dest_dev].stalled || !pidAlive(rq->pid) ||
            (rq->state != IBV_QPS_RTR && rq->state != IBV_QPS_RTS) || rq->dest_qpn != me.qpn ||
            rq->dest_dev != me_dev) {
          status = IBV_WC_RETRY_EXC_ERR;
        } else {
          status = wireCheck(me, *rq, is_read, total, land);
        }
      }
      if (status == IBV_WC_SUCCESS && total > 0 && land) {
        uint32_t need = is_read ? IBV_ACCESS_REMOTE_READ : IBV_ACCESS_REMOTE_WRITE;
        uint32_t mslot = 0;
        if ((rq->access & need) != need ||
            !lookupMr(r, wr.rkey, rq->dev, rq->pid, rq->pd_id, wr.raddr, total, need, rva, mslot)) {
          status = IBV_WC_REM_ACCESS_ERR;
          // An RC responder that NAKs an access violation goes to ERR too.
          setQpStateLocked(r, rslot, IBV_QPS_ERR);
        } else {
          pinned = lslots;
          pinned.push_back(mslot);
        }
        rpid = rq->pid;
      }
    }
    // The copy holds its MRs: deregistration waits for it to end.
    for (uint32_t s : pinned) pinLocked(r, s);
    if (status != IBV_WC_SUCCESS) setQpStateLocked(r, qp->slot, IBV_QPS_ERR);
  }
  if (status == IBV_WC_SUCCESS && total > 0 && land) {
    int err = cmaCopy(is_read, rpid, local, rva);
    if (err != 0) {
      if (err == ESRCH) {
        status = IBV_WC_RETRY_EXC_ERR;  // responder vanished: no ACK ever comes
      } else if (err == EFAULT) {
        bool local_ok = true;
        for (const iovec& v : local) local_ok = local_ok && rangeMapped(reinterpret_cast<uint64_t>(v.iov_base), v.iov_len);
        status = local_ok ? IBV_WC_REM_ACCESS_ERR : IBV_WC_LOC_PROT_ERR;
      } else {
        std::fprintf(stderr, "softverbs: process_vm_%sv(pid %d): %s\n", is_read ? "read" : "write", rpid,
                     std::strerror(err));
        status = IBV_WC_GENERAL_ERR;
      }
      RegLock l(r);
      setQpStateLocked(r, qp->slot, IBV_QPS_ERR);
    }
  }
  unpin(r, pinned);
  wc.status = static_cast<ibv_wc_status>(status);
  wc.vendor_err = status == IBV_WC_SUCCESS ? 0 : 0x80 + status;
  if (status == IBV_WC_SUCCESS) {
    wc.opcode = is_read ? IBV_WC_RDMA_READ : IBV_WC_RDMA_WRITE;
    wc.byte_len = static_cast<uint32_t>(total);
  } else {
    poisonErrorCqe(wc);
  }
  if (qp->sig_all || wr.signaled || status != IBV_WC_SUCCESS) {
    // The completion frees this WR's SQ slot and those of the unsignaled
    // WRs executed before it, once polled.
    const uint32_t slots = 1 + qp->unsig_done;
    qp->unsig_done = 0;
    if (!pushCqe(qp->scq, wc, qp, slots)) {
      RegLock l(r);
      setQpStateLocked(r, qp->slot, IBV_QPS_ERR);
    }
  } else {
    qp->unsig_done++;  // its slot stays taken until a later completion is polled
  }
}

// The NIC disappeared ("down": its WRs flush; "fatal": they never complete),
// or its CQs are made to overrun ("cqerr"). Under exec_mu.
void checkDevice(SvContext* sc) {
  Registry* r = sc->dev->reg;
  uint32_t cqerr = 0;
  bool down = false, fatal = false;
  {
    RegLock l(r);
    const DevRec& d = r->devs[sc->dev->slot];
    cqerr = d.cqerr;
    down = d.down != 0;
    fatal = d.fatal != 0;
  }
  if (cqerr != sc->cqerr_seen) {
    sc->cqerr_seen = cqerr;
    std::vector<SvCq*> cqs;
    {
      std::lock_guard<std::mutex> lock(sc->mu);
      cqs.assign(sc->cqs.begin(), sc->cqs.end());
    }
    for (SvCq* cq : cqs) {
      std::lock_guard<std::mutex> lock(cq->mu);
      overrunLocked(cq);
    }
  }
  if (sc->dead.load() || (!down && !fatal)) return;
  std::vector<uint32_t> slots;
  {
    std::lock_guard<std::mutex> lock(sc->mu);
    for (SvQp* qp : sc->qps) slots.push_back(qp->slot);
    if (fatal) {
      // A dead device completes nothing: what was posted is simply gone.
      sc->silent = true;
      for (SvQp* qp : sc->qps) {
        qp->sq.clear();
        qp->in_ready = false;
      }
      sc->ready.clear();
    }
  }
  {
    RegLock l(r);
    for (uint32_t s : slots) setQpStateLocked(r, s, IBV_QPS_ERR);
  }
  sc->dead.store(true);
  ibv_async_event ev{};
  ev.element.port_num = 1;
  ev.event_type = IBV_EVENT_PORT_ERR;
  pushAsync(sc, ev);
  ev.event_type = IBV_EVENT_DEVICE_FATAL;
  pushAsync(sc, ev);
}

bool devStalled(SvContext* sc) {
  RegLock l(sc->dev->reg);
  return sc->dev->reg->devs[sc->dev->slot].stalled != 0;
}

void nicLoop(SvContext* sc) {
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(sc->mu);
      sc->cv.wait_for(lk, std::chrono::milliseconds(20), [&] { return sc->stop || !sc->ready.empty(); });
      if (sc->stop) return;
    }
    std::lock_guard<std::mutex> ex(sc->exec_mu);
    checkDevice(sc);
    if (devStalled(sc)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      continue;
    }
    for (int burst = 0; burst < 64; ++burst) {
      SvQp* qp = nullptr;
      Wr wr;
      {
        std::lock_guard<std::mutex> lk(sc->mu);
        if (sc->ready.empty() || sc->silent) break;
        qp = sc->ready.front();
        sc->ready.pop_front();
        if (qp->sq.empty()) {
          qp->in_ready = false;
          continue;
        }
        wr = std::move(qp->sq.front());
        qp->sq.pop_front();
        if (qp->sq.empty()) {
          qp->in_ready = false;
        } else {
          sc->ready.push_back(qp);
        }
      }
      execute(sc, qp, wr);
    }
  }
}

// ---------------------------------------------------------------- ops
uint32_t qpStateOf(SvQp* qp) {
  Registry* r = qp->sc->dev->reg;
  RegLock l(r);
  return r->qps[qp->slot].state;
}

int svPostSend(ibv_qp* q, ibv_send_wr* wr, ibv_send_wr** bad) {
  auto* qp = reinterpret_cast<SvQp*>(q);
  SvContext* sc = qp->sc;
  if (sc->dev->spec.slowpost_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(sc->dev->spec.slowpost_us));
  uint32_t state = qpStateOf(qp);
  if (state != IBV_QPS_RTS && state != IBV_QPS_ERR && state != IBV_QPS_SQD) {
    if (bad) *bad = wr;
    return EINVAL;
  }
  {
    Registry* r = sc->dev->reg;
    RegLock l(r);
    if (r->devs[sc->dev->slot].postfail_count > 0) {
      r->devs[sc->dev->slot].postfail_count--;
      if (bad) *bad = wr;
      return ENOMEM;
    }
  }
  std::lock_guard<std::mutex> lock(sc->mu);
  int rc = 0;
  for (ibv_send_wr* w = wr; w; w = w->next) {
    if (w->opcode != IBV_WR_RDMA_WRITE && w->opcode != IBV_WR_RDMA_READ) {
      rc = EINVAL;
    } else if (w->num_sge < 0 || static_cast<uint32_t>(w->num_sge) > qp->max_send_sge ||
               (w->num_sge > 0 && !w->sg_list)) {
      rc = EINVAL;
    } else if (qp->sq_used.load() >= qp->max_send_wr) {
      rc = ENOMEM;
    }
    Wr x;
    if (rc == 0) {
      x.wr_id = w->wr_id;
      x.op = w->opcode;
      x.signaled = (w->send_flags & IBV_SEND_SIGNALED) != 0;
      x.raddr = w->wr.rdma.remote_addr;
      x.rkey = w->wr.rdma.rkey;
      x.sge.assign(w->sg_list, w->sg_list + w->num_sge);
      if (w->send_flags & IBV_SEND_INLINE) {
        uint64_t total = 0;
        for (const ibv_sge& s : x.sge) total += s.length;
        if (w->opcode != IBV_WR_RDMA_WRITE || total > qp->max_inline) {
          rc = EINVAL;
        } else {
          for (const ibv_sge& s : x.sge) {
            const char* p = reinterpret_cast<const char*>(s.addr);
            x.inl.insert(x.inl.end(), p, p + s.length);
          }
        }
      }
    }
    if (rc != 0) {
      if (bad) *bad = w;
      break;
    }
    qp->sq_used.fetch_add(1);
    if (!sc->silent) qp->sq.push_back(std::move(x));  // a dead device never runs (or completes) it
  }
  if (!qp->sq.empty() && !qp->in_ready) {
    qp->in_ready = true;
    sc->ready.push_back(qp);
  }
  sc->cv.notify_one();
  return rc;
}

int svPostRecv(ibv_qp*, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  if (bad) *bad = wr;
  return EOPNOTSUPP;  // one-sided only
}

int svPostSrqRecv(ibv_srq*, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  if (bad) *bad = wr;
  return EOPNOTSUPP;
}

int svPollCq(ibv_cq* c, int n, ibv_wc* wc) {
  auto* cq = reinterpret_cast<SvCq*>(c);
  if (n < 0) return -1;
  const int slow = sctx(c->context)->dev->spec.slowpoll_us;
  if (slow > 0) std::this_thread::sleep_for(std::chrono::microseconds(slow));
  std::lock_guard<std::mutex> lock(cq->mu);
  int got = 0;
  while (got < n && !cq->q.empty()) {
    CqEntry& e = cq->q.front();
    wc[got++] = e.wc;
    e.qp->sq_used.fetch_sub(e.slots);
    cq->q.pop_front();
  }
  return got;
}

int svReqNotifyCq(ibv_cq* c, int) {
  auto* cq = reinterpret_cast<SvCq*>(c);
  std::lock_guard<std::mutex> lock(cq->mu);
  cq->armed = true;
  return 0;
}

uint32_t allocQpSlotLocked(Registry* r) {
  for (uint32_t i = 0; i < kMaxQps; ++i)
    if (!r->qps[i].used) return i;
  for (uint32_t i = 0; i < kMaxQps; ++i)
    if (!pidAlive(r->qps[i].pid)) return i;
  return kNoDev;
}

uint32_t allocMrSlotLocked(Registry* r) {
  for (uint32_t i = 0; i < kMaxMrs; ++i)
    if (!r->mrs[i].used) return i;
  for (uint32_t i = 0; i < kMaxMrs; ++i)
    if (!pidAlive(r->mrs[i].pid)) return i;
  return kNoDev;
}

bool devDown(SvDevice* d) {
  RegLock l(d->reg);
  return d->reg->devs[d->slot].down != 0;
}

int parseStatus(const std::string& s) {
  static const std::pair<const char*, int> names[] = {
      {"IBV_WC_LOC_LEN_ERR", IBV_WC_LOC_LEN_ERR},       {"IBV_WC_LOC_QP_OP_ERR", IBV_WC_LOC_QP_OP_ERR},
      {"IBV_WC_LOC_PROT_ERR", IBV_WC_LOC_PROT_ERR},     {"IBV_WC_WR_FLUSH_ERR", IBV_WC_WR_FLUSH_ERR},
      {"IBV_WC_BAD_RESP_ERR", IBV_WC_BAD_RESP_ERR},     {"IBV_WC_LOC_ACCESS_ERR", IBV_WC_LOC_ACCESS_ERR},
      {"IBV_WC_REM_INV_REQ_ERR", IBV_WC_REM_INV_REQ_ERR}, {"IBV_WC_REM_ACCESS_ERR", IBV_WC_REM_ACCESS_ERR},
      {"IBV_WC_REM_OP_ERR", IBV_WC_REM_OP_ERR},         {"IBV_WC_RETRY_EXC_ERR", IBV_WC_RETRY_EXC_ERR},
      {"IBV_WC_RNR_RETRY_EXC_ERR", IBV_WC_RNR_RETRY_EXC_ERR}, {"IBV_WC_FATAL_ERR", IBV_WC_FATAL_ERR},
      {"IBV_WC_GENERAL_ERR", IBV_WC_GENERAL_ERR},
  };
  for (const auto& [n, v] : names)
    if (s == n) return v;
  char* end = nullptr;
  long v = std::strtol(s.c_str(), &end, 10);
  if (end && *end == '\0' && v > 0 && v <= IBV_WC_GENERAL_ERR) return static_cast<int>(v);
  return -1;
}

// Copies holding MR `slot` now; those of dead copiers are dropped.
int32_t pinsOf(Registry* r, uint32_t slot) {
  RegLock l(r);
  MrRec& m = r->mrs[slot];
  int32_t n = m.busy;
  for (auto& e : m.pinners) {
    if (e.count > 0 && !pidAlive(e.pid)) e.count = 0;  // killed mid-copy: it never ends them
    n += e.count;
  }
  return n;
}

// Waits until no copy holds MR `slot` (bounded: copies of processes beyond
// kPinners, whose copiers are not known, are given up on after 30 s).
void waitUnpinned(Registry* r, uint32_t slot) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (pinsOf(r, slot) > 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "softverbs: MR slot %u still in use by a copy after 30 s\n", slot);
      return;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

}  // namespace

// ================================================================ exports
SV_EXPORT ibv_device** ibv_get_device_list(int* num) {
  std::string dir = registryDir();
  std::vector<ibv_device*> list;
  for (const DevSpec& s : parseDevices()) {
    SvDevice* d = getDevice(dir, s);
    if (!d || devDown(d)) continue;
    list.push_back(&d->dev);
  }
  auto** out = static_cast<ibv_device**>(std::calloc(list.size() + 1, sizeof(ibv_device*)));
  if (!out) {
    errno = ENOMEM;
    return nullptr;
  }
  for (size_t i = 0; i < list.size(); ++i) out[i] = list[i];
  if (num) *num = static_cast<int>(list.size());
  return out;
}

SV_EXPORT void ibv_free_device_list(ibv_device** list) { std::free(list); }

SV_EXPORT const char* ibv_get_device_name(ibv_device* d) { return d ? d->name : nullptr; }

SV_EXPORT ibv_context* ibv_open_device(ibv_device* d) {
  auto* sd = reinterpret_cast<SvDevice*>(d);
  if (!sd || devDown(sd)) {
    errno = ENODEV;
    return nullptr;
  }
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return nullptr;
  auto* sc = new SvContext();
  std::memset(&sc->ctx, 0, sizeof(sc->ctx));
  sc->ctx.device = d;
  sc->ctx.cmd_fd = -1;
  sc->ctx.async_fd = fds[0];
  sc->async_wfd = fds[1];
  sc->ctx.num_comp_vectors = 1;
  sc->ctx.abi_compat = nullptr;  // not an extended verbs_context
  pthread_mutex_init(&sc->ctx.mutex, nullptr);
  sc->ctx.ops.post_send = svPostSend;
  sc->ctx.ops.post_recv = svPostRecv;
  sc->ctx.ops.post_srq_recv = svPostSrqRecv;
  sc->ctx.ops.poll_cq = svPollCq;
  sc->ctx.ops.req_notify_cq = svReqNotifyCq;
  sc->dev = sd;
  sc->nic = std::thread(nicLoop, sc);
  return &sc->ctx;
}

SV_EXPORT int ibv_close_device(ibv_context* c) {
  SvContext* sc = sctx(c);
  {
    std::lock_guard<std::mutex> lock(sc->mu);
    sc->stop = true;
  }
  sc->cv.notify_all();
  sc->nic.join();
  {
    // Whatever the user left behind no longer exists on the "NIC".
    Registry* r = sc->dev->reg;
    RegLock l(r);
    for (SvQp* qp : sc->qps) r->qps[qp->slot].used = 0;
  }
  ::close(sc->ctx.async_fd);
  ::close(sc->async_wfd);
  pthread_mutex_destroy(&sc->ctx.mutex);
  delete sc;
  return 0;
}

SV_EXPORT int ibv_query_device(ibv_context* c, ibv_device_attr* a) {
  SvContext* sc = sctx(c);
  std::memset(a, 0, sizeof(*a));
  std::snprintf(a->fw_ver, sizeof(a->fw_ver), "softverbs-1.0");
  a->node_guid = htobe64(0x0200'5eff'fe00'0000ull | sc->dev->slot);
  a->sys_image_guid = a->node_guid;
  a->max_mr_size = ~0ull;
  a->page_size_cap = 0xfffff000;
  a->vendor_id = 0x4857;  // "HW"
  a->vendor_part_id = 1;
  a->hw_ver = 1;
  a->max_qp = kMaxQps;
  a->max_qp_wr = kMaxQpWr;
  a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN;
  a->max_sge = kMaxSge;
  a->max_sge_rd = kMaxSge;
  a->max_cq = 1024;
  a->max_cqe = kMaxCqe;
  a->max_mr = kMaxMrs;
  a->max_pd = 1 << 16;
  a->max_qp_rd_atom = sc->dev->spec.rd_atom;
  a->max_qp_init_rd_atom = sc->dev->spec.init_rd_atom;
  a->max_res_rd_atom = sc->dev->spec.rd_atom * kMaxQps;
  a->atomic_cap = IBV_ATOMIC_NONE;
  a->max_pkeys = 1;
  a->phys_port_cnt = 1;
  return 0;
}

SV_EXPORT int ibv_query_port(ibv_context* c, uint8_t port, struct _compat_ibv_port_attr* out) {
  SvContext* sc = sctx(c);
  if (port != 1) return EINVAL;
  // Only the prefix every libibverbs version's compat struct has.
  ibv_port_attr a;
  std::memset(&a, 0, sizeof(a));
  const DevSpec& s = sc->dev->spec;
  bool down = s.port_down || sc->dead.load() || devDown(sc->dev);
  a.state = down ? IBV_PORT_DOWN : IBV_PORT_ACTIVE;
  a.max_mtu = IBV_MTU_4096;
  a.active_mtu = mtuEnum(s.mtu);
  a.gid_tbl_len = kGidTblLen;
  a.port_cap_flags = 0;
  a.max_msg_sz = 1u << 31;
  a.pkey_tbl_len = 1;
  a.lid = s.ib ? static_cast<uint16_t>(sc->dev->slot + 1) : 0;
  a.sm_lid = s.ib ? 1 : 0;
  a.max_vl_num = 1;
  a.active_width = 2;   // 4x
  a.active_speed = 32;  // EDR
  a.phys_state = down ? 3 : 5;  // disabled / link up
  a.link_layer = s.ib ? IBV_LINK_LAYER_INFINIBAND : IBV_LINK_LAYER_ETHERNET;
  std::memcpy(out, &a, offsetof(ibv_port_attr, flags));
  return 0;
}

SV_EXPORT int ibv_query_gid(ibv_context* c, uint8_t port, int index, ibv_gid* gid) {
  SvContext* sc = sctx(c);
  if (port != 1 || index < 0 || index >= kGidTblLen) return -1;
  GidEnt t[kGidTblLen];
  gidTable(sc->dev->spec, sc->dev->slot, t);
  *gid = t[index].gid;
  return 0;
}

SV_EXPORT int _ibv_query_gid_ex(ibv_context* c, uint32_t port, uint32_t index, ibv_gid_entry* e,
                                uint32_t flags, size_t entry_size) {
  SvContext* sc = sctx(c);
  if (flags != 0 || entry_size < sizeof(ibv_gid_entry)) return EINVAL;
  if (port != 1 || index >= static_cast<uint32_t>(kGidTblLen)) return EINVAL;
  GidEnt t[kGidTblLen];
  gidTable(sc->dev->spec, sc->dev->slot, t);
  if (gidZero(t[index].gid)) return ENODATA;
  std::memset(e, 0, sizeof(*e));
  e->gid = t[index].gid;
  e->gid_index = index;
  e->port_num = port;
  e->gid_type = t[index].type;
  e->ndev_ifindex = sc->dev->spec.ib ? 0 : 100 + sc->dev->slot;
  return 0;
}

SV_EXPORT ibv_pd* ibv_alloc_pd(ibv_context* c) {
  SvContext* sc = sctx(c);
  if (sc->dead.load()) {
    errno = EIO;
    return nullptr;
  }
  auto* pd = new SvPd();
  pd->pd.context = c;
  {
    RegLock l(sc->dev->reg);
    pd->id = sc->dev->reg->next_pd++;
  }
  pd->pd.handle = static_cast<uint32_t>(pd->id);
  return &pd->pd;
}

SV_EXPORT int ibv_dealloc_pd(ibv_pd* p) {
  auto* pd = reinterpret_cast<SvPd*>(p);
  if (pd->refs.load() > 0) return EBUSY;
  delete pd;
  return 0;
}

SV_EXPORT ibv_mr* ibv_reg_mr_iova2(ibv_pd* p, void* addr, size_t length, uint64_t iova, unsigned int access) {
  auto* pd = reinterpret_cast<SvPd*>(p);
  SvContext* sc = sctx(p->context);
  const unsigned int known = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                             IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_OPTIONAL_RANGE;
  if (length == 0 || (access & ~known) != 0 ||
      ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(access & IBV_ACCESS_LOCAL_WRITE))) {
    errno = EINVAL;
    return nullptr;
  }
  if (sc->dead.load() || devDown(sc->dev)) {
    errno = EIO;
    return nullptr;
  }
  if (!addr || !rangeMapped(reinterpret_cast<uint64_t>(addr), length)) {
    errno = EFAULT;
    return nullptr;
  }
  // A NIC that may write there pins the pages for writing: read-only
  // memory cannot be.
  if ((access & (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)) &&
      !rangeWritable(reinterpret_cast<uint64_t>(addr), length)) {
    errno = EFAULT;
    return nullptr;
  }
  Registry* r = sc->dev->reg;
  auto* mr = new SvMr();
  {
    RegLock l(r);
    uint32_t slot = allocMrSlotLocked(r);
    if (slot == kNoDev) {
      delete mr;
      errno = ENOMEM;
      return nullptr;
    }
    MrRec& m = r->mrs[slot];
    uint32_t gen = ((m.gen + 1) & 0xff) ? ((m.gen + 1) & 0xff) : 1;
    m.used = 1;
    m.gen = gen;
    m.pid = getpid();
    m.dev = sc->dev->slot;
    m.key = (slot << 8) | gen;
    m.access = access & ~static_cast<unsigned int>(IBV_ACCESS_OPTIONAL_RANGE);
    m.pd_id = pd->id;
    m.addr = reinterpret_cast<uint64_t>(addr);
    m.length = length;
    m.iova = iova;
    m.busy = 0;
    for (auto& e : m.pinners) e = {0, 0};
    mr->slot = slot;
    mr->mr.lkey = m.key;
    mr->mr.rkey = m.key;
  }
  mr->pd = pd;
  pd->refs.fetch_add(1);
  mr->mr.context = p->context;
  mr->mr.pd = p;
  mr->mr.addr = addr;
  mr->mr.length = length;
  mr->mr.handle = mr->slot;
  return &mr->mr;
}

SV_EXPORT ibv_mr* ibv_reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
  return ibv_reg_mr_iova2(pd, addr, length, reinterpret_cast<uint64_t>(addr), static_cast<unsigned int>(access));
}

SV_EXPORT ibv_mr* ibv_reg_mr_iova(ibv_pd* pd, void* addr, size_t length, uint64_t iova, int access) {
  return ibv_reg_mr_iova2(pd, addr, length, iova, static_cast<unsigned int>(access));
}

// A dma-buf (device memory exported by its driver) is reached through a
// mapping of the fd: the soft NIC copies with process_vm_*, so the pages
// need a host address in this process. iova is what work requests use.
namespace {
std::mutex g_dmabuf_mu;
std::vector<hawser_softverbs_dmabuf_call> g_dmabuf_calls;

// What the fd is, at the call: open, its size (a dma-buf reports it through
// lseek), what /proc says it is.
void recordDmabufCall(uint64_t offset, size_t length, uint64_t iova, int fd, int access) {
  hawser_softverbs_dmabuf_call c{};
  c.fd = fd;
  c.offset = offset;
  c.length = length;
  c.iova = iova;
  c.access = access;
  c.fd_open = fd >= 0 && fcntl(fd, F_GETFD) != -1;
  c.fd_size = -1;
  if (c.fd_open) {
    off_t end = lseek(fd, 0, SEEK_END);
    c.fd_size = end;
    if (end >= 0) lseek(fd, 0, SEEK_SET);
    char path[64];
    std::snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, c.fd_target, sizeof(c.fd_target) - 1);
    if (n > 0) c.fd_target[n] = '\0';
  }
  std::lock_guard<std::mutex> lock(g_dmabuf_mu);
  g_dmabuf_calls.push_back(c);
}
}  // namespace

SV_EXPORT int hawser_softverbs_dmabuf_calls(hawser_softverbs_dmabuf_call* out, int max) {
  std::lock_guard<std::mutex> lock(g_dmabuf_mu);
  for (int i = 0; i < max && i < static_cast<int>(g_dmabuf_calls.size()); ++i) out[i] = g_dmabuf_calls[i];
  return static_cast<int>(g_dmabuf_calls.size());
}

SV_EXPORT ibv_mr* ibv_reg_dmabuf_mr(ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova, int fd, int access) {
  recordDmabufCall(offset, length, iova, fd, access);
  if (fd < 0 || length == 0) {
    errno = EINVAL;
    return nullptr;
  }
  size_t maplen = offset + length;
  void* map = mmap(nullptr, maplen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  {
    std::lock_guard<std::mutex> lock(g_dmabuf_mu);
    g_dmabuf_calls.back().mapped = map != MAP_FAILED;
  }
  if (map == MAP_FAILED) {
    errno = EOPNOTSUPP;  // not a mappable dma-buf
    return nullptr;
  }
  ibv_mr* m = ibv_reg_mr_iova2(pd, static_cast<char*>(map) + offset, length, iova, static_cast<unsigned int>(access));
  if (!m) {
    int e = errno;
    munmap(map, maplen);
    errno = e;
    return nullptr;
  }
  auto* mr = reinterpret_cast<SvMr*>(m);
  mr->dmabuf_map = map;
  mr->dmabuf_len = maplen;
  mr->mr.addr = reinterpret_cast<void*>(iova);
  return m;
}

SV_EXPORT int ibv_dereg_mr(ibv_mr* m) {
  auto* mr = reinterpret_cast<SvMr*>(m);
  SvContext* sc = sctx(m->context);
  {
    RegLock l(sc->dev->reg);
    MrRec& rec = sc->dev->reg->mrs[mr->slot];
    if (rec.used && rec.key == m->lkey && rec.pid == getpid()) rec.used = 0;
  }
  // As on a NIC, no access through the key once this returns: wait for the
  // copies that hold it.
  waitUnpinned(sc->dev->reg, mr->slot);
  mr->pd->refs.fetch_sub(1);
  if (mr->dmabuf_map) munmap(mr->dmabuf_map, mr->dmabuf_len);
  delete mr;
  return 0;
}

SV_EXPORT ibv_comp_channel* ibv_create_comp_channel(ibv_context* c) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return nullptr;
  auto* ch = new SvChannel();
  ch->ch.context = c;
  ch->ch.fd = fds[0];
  ch->ch.refcnt = 0;
  ch->wfd = fds[1];
  return &ch->ch;
}

SV_EXPORT int ibv_destroy_comp_channel(ibv_comp_channel* c) {
  auto* ch = reinterpret_cast<SvChannel*>(c);
  if (ch->cq_refs.load() > 0) return EBUSY;
  ::close(ch->ch.fd);
  ::close(ch->wfd);
  delete ch;
  return 0;
}

SV_EXPORT ibv_cq* ibv_create_cq(ibv_context* c, int cqe, void* cq_context, ibv_comp_channel* channel,
                                int comp_vector) {
  SvContext* sc = sctx(c);
  if (cqe <= 0 || cqe > kMaxCqe || comp_vector < 0 || comp_vector >= c->num_comp_vectors) {
    errno = EINVAL;
    return nullptr;
  }
  if (sc->dead.load()) {
    errno = EIO;
    return nullptr;
  }
  auto* cq = new SvCq();
  cq->cq.context = c;
  cq->cq.channel = channel;
  cq->cq.cq_context = cq_context;
  cq->cq.cqe = cqe;
  cq->cap = static_cast<uint32_t>(cqe);
  cq->ch = reinterpret_cast<SvChannel*>(channel);
  if (cq->ch) cq->ch->cq_refs.fetch_add(1);
  {
    std::lock_guard<std::mutex> lock(sc->mu);
    sc->cqs.insert(cq);
  }
  return &cq->cq;
}

SV_EXPORT int ibv_destroy_cq(ibv_cq* c) {
  auto* cq = reinterpret_cast<SvCq*>(c);
  if (cq->qp_refs.load() > 0) return EBUSY;
  {
    SvContext* sc = sctx(c->context);
    std::lock_guard<std::mutex> ex(sc->exec_mu);  // checkDevice() may be overrunning it
    std::lock_guard<std::mutex> lock(sc->mu);
    sc->cqs.erase(cq);
  }
  if (cq->ch) {
    std::lock_guard<std::mutex> lock(cq->ch->mu);
    for (auto& e : cq->ch->events)
      if (e == cq) e = nullptr;
    cq->ch->cq_refs.fetch_sub(1);
  }
  delete cq;
  return 0;
}

SV_EXPORT int ibv_get_cq_event(ibv_comp_channel* c, ibv_cq** cq, void** cq_context) {
  auto* ch = reinterpret_cast<SvChannel*>(c);
  for (;;) {
    char b;
    ssize_t n = read(ch->ch.fd, &b, 1);
    if (n != 1) return -1;  // errno from read (EAGAIN on a non-blocking fd)
    std::lock_guard<std::mutex> lock(ch->mu);
    if (ch->events.empty()) continue;
    SvCq* got = ch->events.front();
    ch->events.pop_front();
    if (!got) continue;  // its CQ was destroyed meanwhile
    *cq = &got->cq;
    *cq_context = got->cq.cq_context;
    return 0;
  }
}

SV_EXPORT void ibv_ack_cq_events(ibv_cq* c, unsigned int n) { c->comp_events_completed += n; }

SV_EXPORT ibv_qp* ibv_create_qp(ibv_pd* p, ibv_qp_init_attr* ia) {
  auto* pd = reinterpret_cast<SvPd*>(p);
  SvContext* sc = sctx(p->context);
  if (!ia || ia->qp_type != IBV_QPT_RC || !ia->send_cq || !ia->recv_cq || ia->srq ||
      ia->send_cq->context != p->context || ia->recv_cq->context != p->context ||  // CQs of this context only
      ia->cap.max_send_wr == 0 || ia->cap.max_send_wr > kMaxQpWr || ia->cap.max_recv_wr > kMaxQpWr ||
      ia->cap.max_send_sge > kMaxSge || ia->cap.max_recv_sge > kMaxSge || ia->cap.max_inline_data > kMaxInline) {
    errno = EINVAL;
    return nullptr;
  }
  if (sc->dead.load() || devDown(sc->dev)) {
    errno = EIO;
    return nullptr;
  }
  Registry* r = sc->dev->reg;
  auto* qp = new SvQp();
  {
    RegLock l(r);
    uint32_t slot = allocQpSlotLocked(r);
    if (slot == kNoDev) {
      delete qp;
      errno = ENOMEM;
      return nullptr;
    }
    QpRec& q = r->qps[slot];
    uint32_t gen = ((q.gen + 1) & 0xfff) ? ((q.gen + 1) & 0xfff) : 1;
    std::memset(&q, 0, sizeof(q));
    q.used = 1;
    q.gen = gen;
    q.pid = getpid();
    q.dev = sc->dev->slot;
    q.qpn = (gen << 12) | slot;
    q.state = IBV_QPS_RESET;
    q.dest_dev = kNoDev;
    q.pd_id = pd->id;
    qp->slot = slot;
    qp->qp.qp_num = q.qpn;
  }
  qp->sc = sc;
  qp->pd = pd;
  qp->scq = reinterpret_cast<SvCq*>(ia->send_cq);
  qp->rcq = reinterpret_cast<SvCq*>(ia->recv_cq);
  qp->max_send_wr = ia->cap.max_send_wr;
  qp->max_send_sge = std::max<uint32_t>(1, ia->cap.max_send_sge);
  qp->max_inline = ia->cap.max_inline_data;
  qp->sig_all = ia->sq_sig_all != 0;
  qp->qp.context = p->context;
  qp->qp.qp_context = ia->qp_context;
  qp->qp.pd = p;
  qp->qp.send_cq = ia->send_cq;
  qp->qp.recv_cq = ia->recv_cq;
  qp->qp.handle = qp->slot;
  qp->qp.state = IBV_QPS_RESET;
  qp->qp.qp_type = IBV_QPT_RC;
  pd->refs.fetch_add(1);
  qp->scq->qp_refs.fetch_add(1);
  qp->rcq->qp_refs.fetch_add(1);
  {
    std::lock_guard<std::mutex> lock(sc->mu);
    sc->qps.insert(qp);
  }
  return &qp->qp;
}

SV_EXPORT int ibv_modify_qp(ibv_qp* q, ibv_qp_attr* a, int mask) {
  auto* qp = reinterpret_cast<SvQp*>(q);
  SvContext* sc = qp->sc;
  Registry* r = sc->dev->reg;
  if (!(mask & IBV_QP_STATE)) return EINVAL;
  const ibv_qp_state target = a->qp_state;
  const int kAny = IBV_QP_STATE;
  int req = 0, opt = 0;
  uint32_t cur;
  {
    RegLock l(r);
    cur = r->qps[qp->slot].state;
  }
  if ((mask & IBV_QP_CUR_STATE) && a->cur_qp_state != static_cast<ibv_qp_state>(cur)) return EINVAL;
  if (target != IBV_QPS_RESET && target != IBV_QPS_ERR && (sc->dead.load() || devDown(sc->dev))) return EIO;
  if (target == IBV_QPS_RESET || target == IBV_QPS_ERR) {
    // no attributes
  } else if (cur == IBV_QPS_RESET && target == IBV_QPS_INIT) {
    req = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
  } else if (cur == IBV_QPS_INIT && target == IBV_QPS_INIT) {
    opt = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
  } else if (cur == IBV_QPS_INIT && target == IBV_QPS_RTR) {
    req = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
          IBV_QP_MIN_RNR_TIMER;
    opt = IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX;
  } else if (cur == IBV_QPS_RTR && target == IBV_QPS_RTS) {
    req = IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
    opt = IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE;
  } else if (cur == IBV_QPS_RTS && target == IBV_QPS_RTS) {
    opt = IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE | IBV_QP_MIN_RNR_TIMER;
  } else {
    return EINVAL;  // illegal transition (SQD/SQE are not modelled)
  }
  if ((mask & req) != req) return EINVAL;
  if ((mask & ~(req | opt | kAny | IBV_QP_CUR_STATE)) != 0) return EINVAL;

  const DevSpec& s = sc->dev->spec;
  if ((mask & IBV_QP_PORT) && a->port_num != 1) return EINVAL;
  if ((mask & IBV_QP_PKEY_INDEX) && a->pkey_index != 0) return EINVAL;
  const unsigned int acc_ok = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                              IBV_ACCESS_REMOTE_ATOMIC;
  if ((mask & IBV_QP_ACCESS_FLAGS) && (a->qp_access_flags & ~acc_ok)) return EINVAL;
  if ((mask & IBV_QP_PATH_MTU) && (a->path_mtu < IBV_MTU_256 || a->path_mtu > mtuEnum(s.mtu))) return EINVAL;
  if ((mask & IBV_QP_DEST_QPN) && a->dest_qp_num >= (1u << 24)) return EINVAL;
  if ((mask & IBV_QP_RQ_PSN) && a->rq_psn >= (1u << 24)) return EINVAL;
  if ((mask & IBV_QP_SQ_PSN) && a->sq_psn >= (1u << 24)) return EINVAL;
  // Read resources within what the device has: responder resources up to
  // max_qp_rd_atom, initiator depth up to max_qp_init_rd_atom.
  if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && a->max_dest_rd_atomic > s.rd_atom) return EINVAL;
  if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && a->max_rd_atomic > s.init_rd_atom) return EINVAL;
  if ((mask & IBV_QP_TIMEOUT) && a->timeout > 31) return EINVAL;
  if ((mask & IBV_QP_RETRY_CNT) && a->retry_cnt > 7) return EINVAL;
  if ((mask & IBV_QP_RNR_RETRY) && a->rnr_retry > 7) return EINVAL;
  if ((mask & IBV_QP_MIN_RNR_TIMER) && a->min_rnr_timer > 31) return EINVAL;
  uint32_t dest_dev = kNoDev;
  GidEnt sgid{};
  if (mask & IBV_QP_AV) {
    const ibv_ah_attr& ah = a->ah_attr;
    if (ah.port_num != 1) return EINVAL;
    if (!s.ib) {
      // RoCE: every packet carries a GRH; the source GID must exist.
      if (!ah.is_global) return EINVAL;
      GidEnt t[kGidTblLen];
      gidTable(s, sc->dev->slot, t);
      if (ah.grh.sgid_index >= kGidTblLen || gidZero(t[ah.grh.sgid_index].gid)) return EINVAL;
      sgid = t[ah.grh.sgid_index];
      dest_dev = devOfGid(ah.grh.dgid);
    } else {
      if (ah.dlid == 0 && !ah.is_global) return EINVAL;
      dest_dev = ah.is_global ? devOfGid(ah.grh.dgid) : static_cast<uint32_t>(ah.dlid) - 1;
    }
    if (dest_dev >= kMaxDevs) dest_dev = kNoDev;  // unreachable: WRs will time out
  }
  {
    RegLock l(r);
    QpRec& rec = r->qps[qp->slot];
    rec.state = target;
    if (mask & IBV_QP_ACCESS_FLAGS) rec.access = a->qp_access_flags;
    if (mask & IBV_QP_AV) {
      const ibv_ah_attr& ah = a->ah_attr;
      rec.dest_dev = dest_dev;
      rec.ib = s.ib ? 1 : 0;
      rec.is_global = ah.is_global;
      rec.sgid_type = sgid.type;
      std::memcpy(rec.sgid, sgid.gid.raw, 16);
      std::memcpy(rec.dgid, ah.is_global ? ah.grh.dgid.raw : sgid.gid.raw, 16);
      if (!ah.is_global) std::memset(rec.dgid, 0, 16);
      rec.lid = s.ib ? static_cast<uint16_t>(sc->dev->slot + 1) : 0;
      rec.dlid = ah.dlid;
    }
    if (mask & IBV_QP_DEST_QPN) rec.dest_qpn = a->dest_qp_num;
    if (mask & IBV_QP_PATH_MTU) rec.path_mtu = a->path_mtu;
    if (mask & IBV_QP_RQ_PSN) rec.expected_psn = a->rq_psn;
    if (mask & IBV_QP_SQ_PSN) rec.next_psn = a->sq_psn;
    if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) rec.max_dest_rd_atomic = a->max_dest_rd_atomic;
    if (mask & IBV_QP_MAX_QP_RD_ATOMIC) rec.max_rd_atomic = a->max_rd_atomic;
    if (target == IBV_QPS_RESET) {
      const uint32_t keep_used = rec.used, keep_gen = rec.gen, keep_dev = rec.dev, keep_qpn = rec.qpn;
      const int32_t keep_pid = rec.pid;
      const uint64_t keep_pd = rec.pd_id;
      std::memset(&rec, 0, sizeof(rec));
      rec.used = keep_used;
      rec.gen = keep_gen;
      rec.pid = keep_pid;
      rec.dev = keep_dev;
      rec.qpn = keep_qpn;
      rec.pd_id = keep_pd;
      rec.state = IBV_QPS_RESET;
      rec.dest_dev = kNoDev;
    }
  }
  if (mask & IBV_QP_PATH_MTU) qp->path_mtu = a->path_mtu;
  if (target == IBV_QPS_RESET) {
    std::lock_guard<std::mutex> ex(sc->exec_mu);
    std::lock_guard<std::mutex> lock(sc->mu);
    qp->sq.clear();  // RESET discards work requests without completions
    qp->sq_used.store(0);
    qp->unsig_done = 0;
  }
  q->state = target;
  return 0;
}

SV_EXPORT int ibv_query_qp(ibv_qp* q, ibv_qp_attr* a, int, ibv_qp_init_attr* ia) {
  auto* qp = reinterpret_cast<SvQp*>(q);
  Registry* r = qp->sc->dev->reg;
  std::memset(a, 0, sizeof(*a));
  {
    RegLock l(r);
    const QpRec& rec = r->qps[qp->slot];
    a->qp_state = static_cast<ibv_qp_state>(rec.state);
    a->cur_qp_state = a->qp_state;
    a->dest_qp_num = rec.dest_qpn;
    a->qp_access_flags = rec.access;
    a->sq_psn = rec.next_psn;
    a->rq_psn = rec.expected_psn;
    a->max_rd_atomic = static_cast<uint8_t>(rec.max_rd_atomic);
    a->max_dest_rd_atomic = static_cast<uint8_t>(rec.max_dest_rd_atomic);
  }
  a->path_mtu = qp->path_mtu;
  a->port_num = 1;
  a->cap.max_send_wr = qp->max_send_wr;
  a->cap.max_send_sge = qp->max_send_sge;
  a->cap.max_inline_data = qp->max_inline;
  if (ia) {
    std::memset(ia, 0, sizeof(*ia));
    ia->send_cq = q->send_cq;
    ia->recv_cq = q->recv_cq;
    ia->cap = a->cap;
    ia->qp_type = IBV_QPT_RC;
    ia->sq_sig_all = qp->sig_all;
  }
  return 0;
}

SV_EXPORT int ibv_destroy_qp(ibv_qp* q) {
  auto* qp = reinterpret_cast<SvQp*>(q);
  SvContext* sc = qp->sc;
  {
    std::lock_guard<std::mutex> ex(sc->exec_mu);
    std::lock_guard<std::mutex> lock(sc->mu);
    sc->qps.erase(qp);
    for (auto it = sc->ready.begin(); it != sc->ready.end();)
      it = (*it == qp) ? sc->ready.erase(it) : it + 1;
  }
  // Its completions not yet polled are removed from the CQs, as the
  // provider cleans the CQ of a destroyed QP.
  for (SvCq* cq : {qp->scq, qp->rcq}) {
    std::lock_guard<std::mutex> lock(cq->mu);
    for (auto it = cq->q.begin(); it != cq->q.end();) it = it->qp == qp ? cq->q.erase(it) : it + 1;
  }
  {
    Registry* r = sc->dev->reg;
    RegLock l(r);
    QpRec& rec = r->qps[qp->slot];
    if (rec.used && rec.qpn == q->qp_num && rec.pid == getpid()) rec.used = 0;
  }
  qp->scq->qp_refs.fetch_sub(1);
  qp->rcq->qp_refs.fetch_sub(1);
  qp->pd->refs.fetch_sub(1);
  delete qp;
  return 0;
}

SV_EXPORT int ibv_get_async_event(ibv_context* c, ibv_async_event* ev) {
  SvContext* sc = sctx(c);
  for (;;) {
    char b;
    ssize_t n = read(sc->ctx.async_fd, &b, 1);
    if (n != 1) return -1;
    std::lock_guard<std::mutex> lock(sc->mu);
    if (sc->async_q.empty()) continue;
    *ev = sc->async_q.front();
    sc->async_q.pop_front();
    return 0;
  }
}

SV_EXPORT void ibv_ack_async_event(ibv_async_event*) {}

SV_EXPORT const char* ibv_wc_status_str(ibv_wc_status status) {
  switch (status) {
    case IBV_WC_SUCCESS: return "success";
    case IBV_WC_LOC_PROT_ERR: return "local protection error";
    case IBV_WC_WR_FLUSH_ERR: return "Work Request Flushed Error";
    case IBV_WC_REM_ACCESS_ERR: return "remote access error";
    case IBV_WC_RETRY_EXC_ERR: return "transport retry counter exceeded";
    case IBV_WC_GENERAL_ERR: return "general error";
    default: return "unknown";
  }
}

SV_EXPORT const char* ibv_event_type_str(ibv_event_type ev) {
  switch (ev) {
    case IBV_EVENT_DEVICE_FATAL: return "local catastrophic error";
    case IBV_EVENT_PORT_ERR: return "port error";
    case IBV_EVENT_PORT_ACTIVE: return "port active";
    case IBV_EVENT_CQ_ERR: return "CQ error";
    default: return "unknown";
  }
}

SV_EXPORT int hawser_softverbs_control(const char* command) {
  if (!command) return EINVAL;
  std::vector<std::string> tok;
  {
    std::string cur;
    for (const char* p = command;; ++p) {
      if (*p == ' ' || *p == '\0') {
        if (!cur.empty()) tok.push_back(cur);
        cur.clear();
        if (*p == '\0') break;
      } else {
        cur += *p;
      }
    }
  }
  if (tok.size() < 2) return EINVAL;
  Registry* r = openRegistry(registryDir());
  if (!r) return EIO;
  RegLock l(r);
  uint32_t slot = ensureDevLocked(r, tok[1]);
  if (slot == kNoDev) return ENOSPC;
  DevRec& d = r->devs[slot];
  if (tok[0] == "down" && tok.size() == 2) {
    d.down = 1;
  } else if (tok[0] == "fatal" && tok.size() == 2) {
    d.down = 1;
    d.fatal = 1;
  } else if (tok[0] == "up" && tok.size() == 2) {
    d.down = 0;
    d.fatal = 0;
  } else if (tok[0] == "stall" && tok.size() == 2) {
    d.stalled = 1;
  } else if (tok[0] == "resume" && tok.size() == 2) {
    d.stalled = 0;
  } else if (tok[0] == "cqerr" && tok.size() == 2) {
    d.cqerr++;
  } else if (tok[0] == "postfail" && tok.size() == 3) {
    int n = std::atoi(tok[2].c_str());
    if (n <= 0) return EINVAL;
    d.postfail_count = n;
  } else if (tok[0] == "clear" && tok.size() == 2) {
    d.fail_count = 0;
    d.badkey_count = 0;
    d.postfail_count = 0;
  } else if (tok[0] == "badkey" && tok.size() == 3) {
    int n = std::atoi(tok[2].c_str());
    if (n <= 0) return EINVAL;
    d.badkey_count = n;
  } else if (tok[0] == "revoke" && tok.size() == 3) {
    char* end = nullptr;
    unsigned long key = std::strtoul(tok[2].c_str(), &end, 0);
    uint32_t mslot = static_cast<uint32_t>(key >> 8);
    if (!end || *end || mslot >= kMaxMrs) return EINVAL;
    MrRec& m = r->mrs[mslot];
    if (!m.used || m.key != key || m.dev != slot) return ENOENT;
    m.used = 0;  // the owner's ibv_dereg_mr later finds it gone and only frees its handle
  } else if (tok[0] == "fail" && tok.size() == 4) {
    int status = parseStatus(tok[3]);
    int n = std::atoi(tok[2].c_str());
    if (status < 0 || n <= 0) return EINVAL;
    d.fail_count = n;
    d.fail_status = status;
  } else {
    return EINVAL;
  }
  return 0;
}
