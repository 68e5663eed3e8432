#include "gpu/copy_stream.h"

#include <fmt/format.h>

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
  st = d_->check(a.MemcpyAsync(reinterpret_cast<cu::DevicePtr>(dst), reinterpret_cast<cu::DevicePtr>(src), len,
                               stream_),
                 fmt::format("cuMemcpyAsync({:p} <- {:p}, {} bytes, GPU {})", dst, src, len, device_));
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
    st = d_->check(a.EventCreate(&e, cu::kEventDisableTiming), "cuEventCreate");
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

Status CopyStream::copyRuns(std::span<const CopyRun> runs, uint64_t& ticket, CopyReport* report) {
  Status st = bind();
  if (!st.ok()) return st;
  const cu::Api& a = d_->api();
  CopyReport rep;
  rep.used = CopyMechanism::kPerRun;
  for (const CopyRun& r : runs) {
    st = d_->check(a.MemcpyAsync(r.dst, r.src, r.len, stream_),
                   fmt::format("cuMemcpyAsync({:#x} <- {:#x}, {} bytes, GPU {})", r.dst, r.src, r.len, device_));
    if (!st.ok()) return st;
    ++rep.launches;
    ++rep.runs;
    rep.bytes += r.len;
  }
  st = mark(ticket);
  if (st.ok() && report) *report = rep;
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
