#include "gpu/copy_stream.h"

#include <algorithm>

#include <fmt/format.h>

#include "base/log.h"
#include "gpu/copy_kernel.h"
#include "gpu/cuda_driver.h"

namespace hawser::gpu {

Status CopyStream::open(int device, std::unique_ptr<CopyStream>& out, const CopySettings& settings) {
  const CudaDriver* d = CudaDriver::get();
  if (!d) return Status(Code::kNotSupported, "no CUDA driver: " + CudaDriver::reason());
  std::unique_ptr<CopyStream> s(new CopyStream(d, device, settings));
  Status st = s->bind();
  if (!st.ok()) return st;
  st = d->check(d->api().StreamCreate(&s->stream_, cu::kStreamNonBlocking),
                fmt::format("cuStreamCreate(GPU {})", device));
  if (!st.ok()) return st;
  out = std::move(s);
  return Status::OK();
}

CopyStream::~CopyStream() {
  if (!stream_) return;
  (void)bind();
  d_->api().StreamSynchronize(stream_);
  if (slot_dev_) d_->api().MemFree(slot_dev_);
  if (slot_host_) d_->api().MemFreeHost(slot_host_);
  for (auto& m : marks_) d_->api().EventDestroy(m.event);
  for (auto e : spare_) d_->api().EventDestroy(e);
  d_->api().StreamDestroy(stream_);
}

Status CopyStream::bind() const { return d_->bindDevice(device_); }

void CopyStream::recycle(cu::Event e) { spare_.push_back(e); }

Status CopyStream::copy(void* dst, const void* src, size_t len, uint64_t& ticket) {
  Status st = bind();
  if (!st.ok()) return st;
  const cu::Api& a = d_->api();
  st = d_->checkLazy(
      a.MemcpyAsync(reinterpret_cast<cu::DevicePtr>(dst), reinterpret_cast<cu::DevicePtr>(src), len, stream_),
      [&] { return fmt::format("cuMemcpyAsync({:p} <- {:p}, {} bytes, GPU {})", dst, src, len, device_); });
  if (!st.ok()) return st;
  return mark(ticket);
}

Status CopyStream::mark(uint64_t& ticket) {
  const cu::Api& a = d_->api();
  Status st;
  cu::Event e = nullptr;
  if (!spare_.empty()) {
    e = spare_.back();
    spare_.pop_back();
  } else {
    st = d_->check(a.EventCreate(&e, cu::kEventDisableTiming | (settings_.blocking_sync ? cu::kEventBlockingSync : 0)),
                   "cuEventCreate");
    if (!st.ok()) return st;
  }
  st = d_->check(a.EventRecord(e, stream_), "cuEventRecord");
  if (!st.ok()) {
    recycle(e);
    return st;
  }
  ticket = next_++;
  marks_.push_back({ticket, e});
  return Status::OK();
}

CopyMechanism CopyStream::choose(std::span<const CopyRun> runs, int peer, const char*& fallback) {
  CopyMechanism m = settings_.mechanism;
  if (m == CopyMechanism::kAuto) {
    uint64_t bytes = 0;
    for (const CopyRun& r : runs) bytes += r.len;
    m = runs.empty() || bytes / runs.size() < settings_.kernel_below ? CopyMechanism::kKernel
                                                                      : CopyMechanism::kPerRun;
  }
  if (m == CopyMechanism::kKernel) {
    if (!kernelReady()) {
      fallback = "the copy kernel cannot be loaded on this GPU";
      return CopyMechanism::kPerRun;
    }
    if (peer >= 0 && peer != device_) {
      if (static_cast<size_t>(peer) >= peer_access_.size()) peer_access_.resize(size_t(peer) + 1, 0);
      int8_t& ok = peer_access_[size_t(peer)];
      if (ok == 0) {
        const cu::Result rc = d_->api().CtxEnablePeerAccess ? d_->api().CtxEnablePeerAccess(d_->context(peer), 0)
                                                            : cu::kErrorNotSupported;
        ok = rc == cu::kSuccess || rc == cu::kErrorPeerAccessAlreadyEnabled ? 1 : -1;
        if (ok < 0)
          HLOG_INFO("gpu: GPU {} cannot reach GPU {}'s memory (cuCtxEnablePeerAccess: CUresult {}): copies between "
                    "them go to the copy engines",
                    device_, peer, rc);
      }
      if (ok < 0) {
        fallback = "no peer access to the other GPU";
        return CopyMechanism::kPerRun;
      }
    }
  }
  if (m == CopyMechanism::kCopyEngine && !d_->api().MemcpyBatchAsync) {
    fallback = "the CUDA driver has no cuMemcpyBatchAsync (CUDA 13)";
    return CopyMechanism::kPerRun;
  }
  return m;
}

Status CopyStream::copyRuns(std::span<const CopyRun> runs, uint64_t& ticket, CopyReport* report, int peer) {
  Status st = bind();
  if (!st.ok()) return st;
  CopyReport rep;
  rep.used = choose(runs, peer, rep.fallback);
  switch (rep.used) {
    case CopyMechanism::kKernel: st = viaKernel(runs, rep); break;
    case CopyMechanism::kCopyEngine: st = viaBatch(runs, rep); break;
    default: st = perRun(runs, rep); break;
  }
  if (st.ok()) st = mark(ticket);
  if (st.ok() && report) *report = rep;
  return st;
}

Status CopyStream::perRun(std::span<const CopyRun> runs, CopyReport& rep) {
  const cu::Api& a = d_->api();
  for (const CopyRun& r : runs) {
    // The message is made only for a copy that failed (one call per run here).
    const cu::Result rc = a.MemcpyAsync(r.dst, r.src, r.len, stream_);
    if (rc != cu::kSuccess)
      return d_->check(rc, fmt::format("cuMemcpyAsync({:#x} <- {:#x}, {} bytes, GPU {})", r.dst, r.src, r.len, device_));
    ++rep.launches;
    ++rep.runs;
    rep.bytes += r.len;
  }
  return Status::OK();
}

Status CopyStream::viaBatch(std::span<const CopyRun> runs, CopyReport& rep) {
  if (runs.empty()) return Status::OK();
  batch_dst_.resize(runs.size());
  batch_src_.resize(runs.size());
  batch_len_.resize(runs.size());
  for (size_t i = 0; i < runs.size(); ++i) {
    batch_dst_[i] = runs[i].dst;
    batch_src_[i] = runs[i].src;
    batch_len_[i] = runs[i].len;
    rep.bytes += runs[i].len;
  }
  cu::MemcpyAttributes attr{};
  attr.srcAccessOrder = cu::kMemcpySrcAccessOrderStream;
  size_t first = 0;
  Status st = d_->checkLazy(d_->api().MemcpyBatchAsync(batch_dst_.data(), batch_src_.data(), batch_len_.data(),
                                                       runs.size(), &attr, &first, 1, stream_),
                            [&] { return fmt::format("cuMemcpyBatchAsync({} copies, GPU {})", runs.size(), device_); });
  if (!st.ok()) return st;
  rep.launches = 1;
  rep.runs = runs.size();
  return Status::OK();
}

Status CopyStream::slots() {
  if (!slots_.empty()) return Status::OK();
  const size_t bytes = kSlots * kSlotPieces * sizeof(CopyRun);
  const cu::Api& a = d_->api();
  Status st = d_->check(a.MemHostAlloc(&slot_host_, bytes, 0), fmt::format("cuMemHostAlloc({} bytes)", bytes));
  if (!st.ok()) return st;
  st = d_->check(a.MemAlloc(&slot_dev_, bytes), fmt::format("cuMemAlloc({} bytes, GPU {})", bytes, device_));
  if (!st.ok()) {
    a.MemFreeHost(slot_host_);
    slot_host_ = nullptr;
    return st;
  }
  for (size_t i = 0; i < kSlots; ++i)
    slots_.push_back(PieceSlot{static_cast<CopyRun*>(slot_host_) + i * kSlotPieces,
                               slot_dev_ + i * kSlotPieces * sizeof(CopyRun), 0});
  return Status::OK();
}

Status CopyStream::launch(PieceSlot& s, uint64_t count, CopyReport& rep) {
  const cu::Api& a = d_->api();
  Status st =
      d_->checkLazy(a.MemcpyAsync(s.dev, reinterpret_cast<cu::DevicePtr>(s.host), count * sizeof(CopyRun), stream_),
                    [&] { return fmt::format("copying the run list of the copy kernel to GPU {}", device_); });
  if (!st.ok()) return st;
  if (!(st = launchList(s.dev, count, rep)).ok()) return st;
  // The slot is free again once this launch is done.
  return mark(s.ticket);
}

Status CopyStream::launchList(cu::DevicePtr list_at, uint64_t count, CopyReport& rep) {
  const cu::Api& a = d_->api();
  Status st;
  const unsigned threads = std::clamp<unsigned>(settings_.threads_per_cta / 32 * 32, 32, kCopyMaxThreadsPerCta);
  const unsigned warps = threads / 32;
  uint64_t grid = (count + warps - 1) / warps;
  if (settings_.max_ctas > 0) grid = std::min<uint64_t>(grid, settings_.max_ctas);
  grid = std::min<uint64_t>(grid, 65535);
  cu::DevicePtr list = list_at;
  unsigned long long n = count;
  void* args[] = {&list, &n};
  st = d_->checkLazy(
      a.LaunchKernel(kernel_, static_cast<unsigned>(grid), 1, 1, threads, 1, 1, 0, stream_, args, nullptr), [&] {
        return fmt::format("launching the copy kernel on GPU {} ({} pieces, {} CTAs)", device_, count, grid);
      });
  if (!st.ok()) return st;
  ++rep.launches;
  rep.ctas = std::max<uint32_t>(rep.ctas, static_cast<uint32_t>(grid));
  return Status::OK();
}

bool CopyStream::kernelReady() {
  if (!kernel_tried_) {
    kernel_tried_ = true;
    if (bind().ok()) kernel_status_ = copyKernel(d_, device_, kernel_);
    else kernel_status_ = Status(Code::kNotSupported, "cannot bind the GPU");
  }
  return kernel_status_.ok();
}

Status CopyStream::makePieces(std::span<const CopyRun> runs, DevicePieces& out) {
  Status st = bind();
  if (!st.ok()) return st;
  if (!(st = slots()).ok()) return st;
  const uint64_t piece = std::max<uint64_t>(settings_.piece_bytes, 512);
  DevicePieces p;
  for (const CopyRun& r : runs) {
    p.count += (r.len + piece - 1) / piece;
    p.bytes += r.len;
  }
  p.runs = runs.size();
  p.device = device_;
  p.alloc = std::max<uint64_t>(p.count, 1) * sizeof(CopyRun);
  const cu::Api& a = d_->api();
  if (!(st = d_->check(a.MemAlloc(&p.list, p.alloc), fmt::format("cuMemAlloc({} bytes, GPU {})", p.alloc, device_)))
           .ok())
    return st;
  // Through the page-locked slots, a slot at a time, queued on the stream.
  uint64_t at = 0, count = 0;
  PieceSlot* s = nullptr;
  auto flush = [&]() -> Status {
    Status f = d_->checkLazy(a.MemcpyAsync(p.list + at * sizeof(CopyRun), reinterpret_cast<cu::DevicePtr>(s->host),
                                           count * sizeof(CopyRun), stream_),
                             [&] { return fmt::format("copying a run list to GPU {}", device_); });
    if (f.ok()) f = mark(s->ticket);
    at += count;
    count = 0;
    s = nullptr;
    return f;
  };
  for (const CopyRun& r : runs) {
    for (uint64_t off = 0; off < r.len; off += piece) {
      if (!s) {
        s = &slots_[slot_next_];
        slot_next_ = (slot_next_ + 1) % slots_.size();
        if (s->ticket && !(st = wait(s->ticket)).ok()) break;
      }
      s->host[count++] = CopyRun{r.dst + off, r.src + off, std::min(piece, r.len - off)};
      if (count == kSlotPieces && !(st = flush()).ok()) break;
    }
    if (!st.ok()) break;
  }
  if (st.ok() && s && count > 0) st = flush();
  if (!st.ok()) {
    (void)waitAll();
    freePieces(p);
    return st;
  }
  out = p;
  return Status::OK();
}

Status CopyStream::copyPieces(const DevicePieces& p, uint64_t& ticket, CopyReport* report) {
  Status st = bind();
  if (!st.ok()) return st;
  if (!kernelReady()) return kernel_status_;
  CopyReport rep;
  rep.used = CopyMechanism::kKernel;
  rep.runs = p.runs;
  rep.bytes = p.bytes;
  if (!(st = launchList(p.list, p.count, rep)).ok()) return st;
  if (!(st = mark(ticket)).ok()) return st;
  if (report) *report = rep;
  return Status::OK();
}

void CopyStream::freePieces(DevicePieces& p) {
  const CudaDriver* d = CudaDriver::get();
  if (p.list && d) {
    ContextScope scope(d, p.device);
    d->api().MemFree(p.list);
  }
  p = DevicePieces{};
}

CopyMechanism CopyStream::wouldUse(uint64_t runs, uint64_t bytes) {
  CopyMechanism m = settings_.mechanism;
  if (m == CopyMechanism::kAuto)
    m = runs == 0 || bytes / runs < settings_.kernel_below ? CopyMechanism::kKernel : CopyMechanism::kPerRun;
  if (m == CopyMechanism::kKernel && !kernelReady()) return CopyMechanism::kPerRun;
  if (m == CopyMechanism::kCopyEngine && !d_->api().MemcpyBatchAsync) return CopyMechanism::kPerRun;
  return m;
}

Status CopyStream::viaKernel(std::span<const CopyRun> runs, CopyReport& rep) {
  Status st = slots();
  if (!st.ok()) return st;
  PieceSlot* s = nullptr;
  uint64_t count = 0;
  const uint64_t piece = std::max<uint64_t>(settings_.piece_bytes, 512);
  for (const CopyRun& r : runs) {
    rep.bytes += r.len;
    ++rep.runs;
    for (uint64_t off = 0; off < r.len; off += piece) {
      if (!s) {
        s = &slots_[slot_next_];
        slot_next_ = (slot_next_ + 1) % slots_.size();
        if (s->ticket && !(st = wait(s->ticket)).ok()) return st;
        count = 0;
      }
      s->host[count++] = CopyRun{r.dst + off, r.src + off, std::min(piece, r.len - off)};
      if (count == kSlotPieces) {
        if (!(st = launch(*s, count, rep)).ok()) return st;
        s = nullptr;
      }
    }
  }
  if (s && count > 0) st = launch(*s, count, rep);
  return st;
}

Status CopyStream::poll(uint64_t ticket, bool& done) {
  done = ticket <= done_;
  if (done) return Status::OK();
  Status st = bind();
  if (!st.ok()) return st;
  while (!marks_.empty()) {
    Mark m = marks_.front();
    cu::Result rc = d_->api().EventQuery(m.event);
    if (rc == cu::kErrorNotReady) break;
    if (rc != cu::kSuccess) return d_->check(rc, fmt::format("copy on GPU {} failed", device_));
    marks_.pop_front();
    recycle(m.event);
    done_ = m.ticket;
    if (done_ >= ticket) break;
  }
  done = ticket <= done_;
  return Status::OK();
}

Status CopyStream::wait(uint64_t ticket) {
  if (ticket <= done_) return Status::OK();
  Status st = bind();
  if (!st.ok()) return st;
  while (!marks_.empty() && marks_.front().ticket <= ticket) {
    Mark m = marks_.front();
    cu::Result rc = d_->api().EventSynchronize(m.event);
    if (rc != cu::kSuccess) return d_->check(rc, fmt::format("copy on GPU {} failed", device_));
    marks_.pop_front();
    recycle(m.event);
    done_ = m.ticket;
  }
  return Status::OK();
}

Status CopyStream::waitAll() { return wait(last()); }

}  // namespace hawser::gpu
