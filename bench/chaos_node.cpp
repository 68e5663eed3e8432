// chaos_node: one engine of bench/chaos_soak.sh, moving verified data to
// and from its peers round after round until SIGTERM, while the script
// kills, stops and cuts it and them.
//
// Memory it exposes: a header page (magic, this process's incarnation: a
// random number, new at every start), then one slot of --slot bytes per
// node of the soak. A round, against a random peer, on this node's slot
// there:
//   1. read the peer's header           -> the incarnation before
//   2. write pattern(seed) at a random offset and length of the slot
//   3. read that range back, and the header again (one batch of two)
//   4. the header unchanged: every byte read must be the pattern (a
//      mismatch is a corrupted byte); changed: the peer restarted during
//      the round (its memory is new), the round counts as disturbed.
// A byte that matches instead what an earlier *failed* write of this node
// put there is counted apart ("late bytes": a failed write that landed after
// it was reported FAILED); any other mismatch is corruption.
//
// Signals (docs/signals.md): every write carries one, and its receiver waits
// on it. The header page holds, after the header, one ticket per node: the
// signal name ("t<ticket>") this node's waiter for that node waits on now.
// A writer reads its ticket with the header (step 1) and writes with that
// signal; it reports {"ev":"sig_sent"} once its batch ended. One waiter
// thread per peer waits (waitSignal, 2 s deadlines, again after a TIMEOUT)
// and reports {"ev":"sig_end"} when a wait ends COMPLETED or FAILED, then
// publishes the next ticket. chaos_summary.py matches the two: a signal sent
// whose receiver (still the same process) did not end its wait in time is a
// stuck waiter.
//
// Every batch is waited for at most --hang-ms (more than any timeout of the
// engine allows); one that is not terminal by then is a hang, unless this
// process was stopped meanwhile (SIGCONT seen), when it is waited for again.
//
// Output, one JSON object per line: {"ev":"ready"...} once serving,
// {"ev":"fail",...} per failed round (time, peer, step, code), and the
// counters {"ev":"stats",...} every second and at exit.
//
// Usage: chaos_node --name N --index I --nodes K --host IP --port P
//                   --metadata URI --peers NAME,NAME,... [--slot BYTES] [--hang-ms MS]
//                   [--rate ROUNDS_PER_S]
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "hawser/engine.h"
#include "tools/pattern.h"

using namespace hawser;
using Clock = std::chrono::steady_clock;

namespace {

constexpr uint64_t kMagic = 0x534f414b48575352ULL;  // "RSWHKAOS"
constexpr size_t kHeader = 4096;
constexpr size_t kTickets = 64;  // offset of the tickets (one u64 per node) in the header page

struct Header {
  uint64_t magic;
  uint64_t incarnation;
  uint64_t index;
};

std::atomic<bool> g_stop{false};
std::atomic<uint64_t> g_continued{0};  // SIGCONTs seen: this process was stopped
void onTerm(int) { g_stop = true; }
void onCont(int) { g_continued.fetch_add(1); }

int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string jsonEscape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o.push_back('\\');
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
    o.push_back(c);
  }
  return o;
}

std::mutex g_out_mu;
void emit(const std::string& line) {
  std::lock_guard lk(g_out_mu);
  std::fputs(line.c_str(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

struct Options {
  std::string name, host, metadata = "p2p";
  int index = 0, nodes = 0;
  uint16_t port = 0;
  std::vector<std::string> peers;
  size_t slot = 2u << 20;
  int hang_ms = 30000;
  double rate = 0;  // rounds per second at most (0: as fast as it goes)
};

// A write that did not complete: its bytes may be in the range, or land later.
struct FailedWrite {
  uint64_t seed, off, len;
};

struct PeerState {
  SegmentID seg = kInvalidSegment;
  uint64_t base = 0;        // address of the peer's exposed memory
  uint64_t incarnation = 0; // last seen
  std::deque<FailedWrite> failed;  // this node's failed writes into its slot there (this incarnation)
};

class Node {
 public:
  explicit Node(Options o) : o_(std::move(o)) {}

  int run() {
    std::random_device rd;
    incarnation_ = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(::getpid());
    rng_.seed(incarnation_);
    const size_t total = kHeader + o_.slot * static_cast<size_t>(o_.nodes);
    mem_ = static_cast<char*>(::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    local_ = static_cast<char*>(::mmap(nullptr, 2 * o_.slot + kHeader, PROT_READ | PROT_WRITE,
                                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (mem_ == MAP_FAILED || local_ == MAP_FAILED) return 1;
    Header h{kMagic, incarnation_, static_cast<uint64_t>(o_.index)};
    std::memcpy(mem_, &h, sizeof(h));
    // The metadata service may be down while this node (re)starts: retry.
    Status s;
    for (int attempt = 0; !g_stop; ++attempt) {
      engine_ = std::make_unique<TransferEngine>();
      s = engine_->init(o_.metadata, o_.name, o_.host, o_.port);
      if (s.ok()) break;
      init_failures_++;
      emit(fmt("{\"ev\":\"init_failed\",\"t\":%lld,\"node\":\"%s\",\"msg\":\"%s\"}", nowMs(), o_.name.c_str(),
               jsonEscape(s.toString()).c_str()));
      engine_.reset();
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    if (!engine_) return 0;
    if (!(s = engine_->registerLocalMemory(mem_, total, "cpu:0", true)).ok() ||
        !(s = engine_->registerLocalMemory(local_, 2 * o_.slot + kHeader, "cpu:0", false)).ok()) {
      std::fprintf(stderr, "chaos_node: register: %s\n", s.toString().c_str());
      return 1;
    }
    emit(fmt("{\"ev\":\"ready\",\"t\":%lld,\"node\":\"%s\",\"pid\":%d,\"inc\":\"%016llx\",\"segment\":\"%s\"}",
             nowMs(), o_.name.c_str(), static_cast<int>(::getpid()), static_cast<unsigned long long>(incarnation_),
             engine_->segmentName().c_str()));
    std::vector<std::thread> waiters;
    for (size_t k = 0; k < o_.peers.size(); ++k) waiters.emplace_back([this, k] { waitLoop(k); });
    std::thread reporter([this] {
      while (!g_stop) {
        for (int i = 0; i < 10 && !g_stop; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
        report();
      }
    });
    auto next = Clock::now();
    while (!g_stop) {
      round();
      if (o_.rate > 0) {  // a gentler load, for long runs on a shared machine
        next += std::chrono::microseconds(static_cast<int64_t>(1e6 / o_.rate));
        if (next < Clock::now()) next = Clock::now();
        std::this_thread::sleep_until(next);
      }
    }
    reporter.join();
    for (auto& w : waiters) w.join();
    report();
    engine_.reset();  // stops serving; bounded wait for in-flight work
    return 0;
  }

 private:
  template <class... A>
  static std::string fmt(const char* f, A... a) {
    char buf[1024];
    std::snprintf(buf, sizeof(buf), f, a...);
    return buf;
  }

  void report() {
    std::string codes;
    {
      std::lock_guard lk(mu_);
      for (auto& [c, n] : failed_by_code_)
        codes += fmt("%s\"%s\":%llu", codes.empty() ? "" : ",", c.c_str(), static_cast<unsigned long long>(n));
    }
    emit(fmt("{\"ev\":\"stats\",\"t\":%lld,\"node\":\"%s\",\"pid\":%d,\"rounds\":%llu,\"bytes_verified\":%llu,"
             "\"failed\":%llu,\"failed_by_code\":{%s},\"disturbed\":%llu,\"late_bytes\":%llu,\"corrupt_bytes\":%llu,"
             "\"hangs\":%llu,\"init_failures\":%llu,\"signals_completed\":%llu,\"signals_failed\":%llu}",
             nowMs(), o_.name.c_str(), static_cast<int>(::getpid()), ull(rounds_), ull(bytes_), ull(failed_),
             codes.c_str(), ull(disturbed_), ull(late_), ull(corrupt_), ull(hangs_), ull(init_failures_),
             ull(sig_completed_), ull(sig_failed_)));
  }
  static unsigned long long ull(const std::atomic<uint64_t>& v) { return v.load(); }

  void fail(const std::string& peer, const char* step, const Status& why) {
    failed_++;
    {
      std::lock_guard lk(mu_);
      failed_by_code_[std::string(codeName(why.code()))]++;
    }
    emit(fmt("{\"ev\":\"fail\",\"t\":%lld,\"node\":\"%s\",\"peer\":\"%s\",\"step\":\"%s\",\"code\":\"%s\",\"msg\":\"%s\"}",
             nowMs(), o_.name.c_str(), peer.c_str(), step, std::string(codeName(why.code())).c_str(),
             jsonEscape(why.message().substr(0, 300)).c_str()));
  }

  // Runs one batch; the first failed task's error (Ok when all completed).
  // A batch not terminal within hang_ms (this process not stopped meanwhile)
  // is a hang: counted, canceled, and reported as kTimeout.
  // signal: null, or the signal the requests carry (*submitted: whether
  // the submit was accepted, so the signal went).
  Status batch(const std::vector<TransferRequest>& reqs, const Signal* signal = nullptr, bool* submitted = nullptr) {
    BatchID b = 0;
    Status s = engine_->allocateBatchID(reqs.size(), b);
    if (!s.ok()) return s;
    s = signal ? engine_->submitTransfer(b, reqs, *signal) : engine_->submitTransfer(b, reqs);
    if (!s.ok()) {
      (void)engine_->freeBatchID(b);
      return s;
    }
    if (submitted) *submitted = true;
    while (true) {
      const uint64_t cont = g_continued.load();
      s = engine_->waitTransfer(b, std::chrono::milliseconds(o_.hang_ms));
      if (s.ok() || g_continued.load() == cont) break;  // terminal, or a real hang
    }
    Status result;
    if (!s.ok()) {
      hangs_++;
      emit(fmt("{\"ev\":\"hang\",\"t\":%lld,\"node\":\"%s\",\"msg\":\"a batch was not terminal after %d ms\"}",
               nowMs(), o_.name.c_str(), o_.hang_ms));
      (void)engine_->cancelTransfer(b);
      result = Status(Code::kTimeout, "hang: batch not terminal");
    } else {
      for (size_t i = 0; i < reqs.size() && result.ok(); ++i) {
        TransferStatus st;
        Status g = engine_->getTransferStatus(b, i, st);
        if (!g.ok()) result = g;
        else if (st.s != TransferState::kCompleted)
          result = st.error.ok() ? Status(Code::kInternal, "task ended without completing and without an error")
                                 : st.error;
      }
    }
    // Freed once its I/O ended; a batch that never lets go is a leak (counted as a hang).
    const auto deadline = Clock::now() + std::chrono::milliseconds(o_.hang_ms);
    while (engine_->freeBatchID(b).code() == Code::kBatchBusy) {
      if (Clock::now() > deadline) {
        hangs_++;
        emit(fmt("{\"ev\":\"hang\",\"t\":%lld,\"node\":\"%s\",\"msg\":\"a batch stayed busy after it ended\"}",
                 nowMs(), o_.name.c_str()));
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return result;
  }

  // Opens the peer's segment (once) and learns where its memory is. A
  // failure counts (as a failed round) unless `quiet` (a refresh after one).
  bool locate(const std::string& name, PeerState& p, bool quiet = false) {
    Status s;
    if (p.seg == kInvalidSegment) {
      s = engine_->openSegment(name, p.seg);
      if (!s.ok()) {
        p.seg = kInvalidSegment;
        if (!quiet) fail(name, "open", s);
        return false;
      }
    }
    std::vector<SegmentBuffer> bufs;
    s = engine_->segmentBuffers(p.seg, bufs);
    if (!s.ok() || bufs.empty()) {
      if (!quiet) fail(name, "locate", s.ok() ? Status(Code::kSegmentNotFound, "no buffers") : s);
      return false;
    }
    p.base = bufs[0].addr;  // the exposed memory is registered first
    return true;
  }

  void round() {
    const std::string& name = o_.peers[rng_() % o_.peers.size()];
    PeerState& p = peers_[name];
    if (p.base == 0 && !locate(name, p)) {
      pause();
      return;
    }
    char* hdr = local_ + 2 * o_.slot;
    char* src = local_;
    char* dst = local_ + o_.slot;
    auto lost = [&](const char* step, const Status& s) {
      fail(name, step, s);
      (void)locate(name, p, /*quiet=*/true);  // a restarted peer has new addresses
      pause();
    };
    // 1. the incarnation before, and this node's ticket there
    const size_t hdr_len = kTickets + 8 * static_cast<size_t>(o_.nodes);
    Status s = batch({{OpCode::kRead, hdr, p.seg, p.base, hdr_len}});
    if (!s.ok()) return lost("header", s);
    Header before;
    std::memcpy(&before, hdr, sizeof(before));
    if (before.magic != kMagic) return lost("header", Status(Code::kRemoteError, "header has no magic"));
    if (before.incarnation != p.incarnation) {
      p.incarnation = before.incarnation;
      p.failed.clear();  // new memory: earlier writes are gone
    }
    // 2. write
    const uint64_t slot = kHeader + static_cast<uint64_t>(o_.index) * o_.slot;
    const uint64_t len = 1024 + rng_() % (o_.slot - 1024);
    const uint64_t off = rng_() % (o_.slot - len + 1);
    const uint64_t seed = incarnation_ ^ (++seq_ * 0x9e3779b97f4a7c15ULL);
    tools::fillPattern(src, len, seed, off);
    uint64_t ticket = 0;
    std::memcpy(&ticket, hdr + kTickets + 8 * static_cast<size_t>(o_.index), sizeof(ticket));
    const Signal signal{"t" + std::to_string(ticket)};
    bool submitted = false;
    const int64_t t_submit = nowMs();
    s = batch({{OpCode::kWrite, src, p.seg, p.base + slot + off, len}}, ticket ? &signal : nullptr, &submitted);
    if (ticket && submitted)
      emit(fmt("{\"ev\":\"sig_sent\",\"t\":%lld,\"node\":\"%s\",\"peer\":\"%s\",\"peer_inc\":\"%016llx\","
               "\"ticket\":%llu,\"t_submit\":%lld,\"ok\":%d}",
               nowMs(), o_.name.c_str(), name.c_str(), static_cast<unsigned long long>(before.incarnation),
               static_cast<unsigned long long>(ticket), t_submit, s.ok() ? 1 : 0));
    if (!s.ok()) {
      p.failed.push_back({seed, off, len});
      if (p.failed.size() > 64) p.failed.pop_front();
      return lost("write", s);
    }
    // 3. read back, and the incarnation after
    std::memset(dst, 0, len);
    s = batch({{OpCode::kRead, dst, p.seg, p.base + slot + off, len},
               {OpCode::kRead, hdr + 64, p.seg, p.base, sizeof(Header)}});
    if (!s.ok()) return lost("read", s);
    Header after;
    std::memcpy(&after, hdr + 64, sizeof(after));
    if (after.incarnation != before.incarnation) {
      disturbed_++;
      return;
    }
    // 4. verify
    if (tools::checkPattern(dst, len, seed, off) == -1) {
      bytes_ += len;
      rounds_++;
      return;
    }
    uint64_t late = 0, corrupt = 0;
    std::vector<unsigned char> want(len), alt(len);
    tools::fillPattern(want.data(), len, seed, off);
    for (uint64_t i = 0; i < len; ++i) {
      const unsigned char got = static_cast<unsigned char>(dst[i]);
      if (got == want[i]) continue;
      bool explained = false;
      for (auto& f : p.failed) {
        const uint64_t at = off + i;
        if (at < f.off || at >= f.off + f.len) continue;
        unsigned char b;
        tools::fillPattern(&b, 1, f.seed, at);
        if (b == got) {
          explained = true;
          break;
        }
      }
      (explained ? late : corrupt)++;
    }
    late_ += late;
    corrupt_ += corrupt;
    bytes_ += len - late - corrupt;
    rounds_++;
    emit(fmt("{\"ev\":\"mismatch\",\"t\":%lld,\"node\":\"%s\",\"peer\":\"%s\",\"off\":%llu,\"len\":%llu,"
             "\"late_bytes\":%llu,\"corrupt_bytes\":%llu}",
             nowMs(), o_.name.c_str(), name.c_str(), static_cast<unsigned long long>(off),
             static_cast<unsigned long long>(len), static_cast<unsigned long long>(late),
             static_cast<unsigned long long>(corrupt)));
  }

  // The waiter for peer k (the soak lists peers in index order, this node
  // left out): waits on the signal named by the ticket it published for
  // that peer in its header, reports how the wait ended, publishes the next.
  void waitLoop(size_t k) {
    const std::string& peer = o_.peers[k];
    const size_t idx = k < static_cast<size_t>(o_.index) ? k : k + 1;
    auto* slot = reinterpret_cast<std::atomic<uint64_t>*>(mem_ + kTickets + 8 * idx);
    uint64_t ticket = 1;
    slot->store(ticket);
    while (!g_stop) {
      const int64_t start = nowMs();
      SignalResult r;
      Status s = engine_->waitSignal(peer, "t" + std::to_string(ticket), 1, std::chrono::seconds(2), r);
      if (!s.ok()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        continue;
      }
      if (r.s == SignalState::kTimeout) continue;  // nothing sent yet: wait again
      (r.s == SignalState::kCompleted ? sig_completed_ : sig_failed_)++;
      emit(fmt("{\"ev\":\"sig_end\",\"t\":%lld,\"node\":\"%s\",\"inc\":\"%016llx\",\"peer\":\"%s\","
               "\"ticket\":%llu,\"state\":\"%s\",\"reason\":\"%s\",\"start\":%lld,\"msg\":\"%s\"}",
               nowMs(), o_.name.c_str(), static_cast<unsigned long long>(incarnation_), peer.c_str(),
               static_cast<unsigned long long>(ticket), std::string(signalStateName(r.s)).c_str(),
               std::string(signalReasonName(r.reason)).c_str(), start,
               jsonEscape(r.error.message().substr(0, 200)).c_str()));
      slot->store(++ticket);
      // A lost peer fails every wait at once until it is back: not so fast.
      if (r.reason == SignalReason::kPeerLost) std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
  }

  // After a failure: a short pause, so a dead peer is not hammered.
  void pause() { std::this_thread::sleep_for(std::chrono::milliseconds(100 + rng_() % 200)); }

  Options o_;
  uint64_t incarnation_ = 0;
  std::mt19937_64 rng_;
  char* mem_ = nullptr;
  char* local_ = nullptr;
  std::unique_ptr<TransferEngine> engine_;
  std::map<std::string, PeerState> peers_;
  uint64_t seq_ = 0;
  std::atomic<uint64_t> rounds_{0}, bytes_{0}, failed_{0}, disturbed_{0}, late_{0}, corrupt_{0}, hangs_{0},
      init_failures_{0}, sig_completed_{0}, sig_failed_{0};
  std::mutex mu_;
  std::map<std::string, uint64_t> failed_by_code_;
};

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--name") o.name = v;
    else if (k == "--index") o.index = std::stoi(v);
    else if (k == "--nodes") o.nodes = std::stoi(v);
    else if (k == "--host") o.host = v;
    else if (k == "--port") o.port = static_cast<uint16_t>(std::stoi(v));
    else if (k == "--metadata") o.metadata = v;
    else if (k == "--slot") o.slot = std::stoull(v);
    else if (k == "--hang-ms") o.hang_ms = std::stoi(v);
    else if (k == "--rate") o.rate = std::stod(v);
    else if (k == "--peers") {
      size_t a = 0;
      while (a <= v.size()) {
        size_t b = v.find(',', a);
        if (b == std::string::npos) b = v.size();
        if (b > a) o.peers.push_back(v.substr(a, b - a));
        a = b + 1;
      }
    } else return false;
  }
  return !o.name.empty() && !o.host.empty() && o.nodes > 0 && o.index >= 0 && o.index < o.nodes &&
         !o.peers.empty() && o.slot >= 4096;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  try {
    if (!parse(argc, argv, o)) throw std::invalid_argument("arguments");
  } catch (const std::exception&) {
    std::fprintf(stderr,
                 "usage: %s --name N --index I --nodes K --host IP --port P --metadata URI --peers A,B "
                 "[--slot BYTES] [--hang-ms MS] [--rate ROUNDS_PER_S]\n",
                 argv[0]);
    return 2;
  }
  ::signal(SIGTERM, onTerm);
  ::signal(SIGINT, onTerm);
  struct sigaction sa {};
  sa.sa_handler = onCont;
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGCONT, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  return Node(std::move(o)).run();
}
