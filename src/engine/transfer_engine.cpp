// hawser::TransferEngine: the public facade over EngineImpl.
#include "engine/engine_impl.h"
#include "engine/transport_list.h"
#include "hawser/engine.h"

namespace hawser {

TransferEngine::TransferEngine() : impl_(std::make_unique<EngineImpl>()) {}
TransferEngine::~TransferEngine() = default;

Status TransferEngine::init(const std::string& metadata_uri, const std::string& local_server_name,
                            const std::string& host, uint16_t rpc_port) {
  return impl_->init(metadata_uri, local_server_name, host, rpc_port, EngineOptions{});
}
Status TransferEngine::init(const std::string& metadata_uri, const std::string& local_server_name,
                            const std::string& host, uint16_t rpc_port, const EngineOptions& options) {
  return impl_->init(metadata_uri, local_server_name, host, rpc_port, options);
}
uint16_t TransferEngine::rpcPort() const { return impl_->rpcPort(); }
std::string TransferEngine::segmentName() const { return impl_->segmentName(); }
Status TransferEngine::registerLocalMemory(void* addr, size_t length, const std::string& location,
                                           bool remote_accessible) {
  return impl_->registerMemory({BufferEntry{addr, length, location, remote_accessible}});
}
Status TransferEngine::registerLocalMemoryBatch(const std::vector<BufferEntry>& buffers) {
  return impl_->registerMemory(buffers);
}
Status TransferEngine::unregisterLocalMemory(void* addr) { return impl_->unregisterMemory({addr}); }
Status TransferEngine::unregisterLocalMemoryBatch(const std::vector<void*>& addrs) {
  return impl_->unregisterMemory(addrs);
}
Status TransferEngine::checkRegistered(const void* addr, size_t length) const {
  return impl_->registry().checkLocal(reinterpret_cast<uint64_t>(addr), length);
}
Status TransferEngine::openSegment(const std::string& name, SegmentID& out) { return impl_->openSegment(name, out); }
Status TransferEngine::closeSegment(SegmentID id) { return impl_->closeSegment(id); }
Status TransferEngine::segmentBuffers(SegmentID id, std::vector<SegmentBuffer>& out) {
  return impl_->segmentBuffers(id, out);
}
Status TransferEngine::probeSegment(const std::string& name) { return impl_->probeSegment(name); }
Status TransferEngine::registerFileSegment(const std::string& name, const std::vector<FileDesc>& files) {
  return impl_->registerFileSegment(name, files);
}
Status TransferEngine::unregisterFileSegment(const std::string& name) { return impl_->unregisterFileSegment(name); }
Status TransferEngine::allocateBatchID(size_t capacity, BatchID& out) { return impl_->allocateBatch(capacity, out); }
Status TransferEngine::submitTransfer(BatchID batch, const std::vector<TransferRequest>& requests) {
  return impl_->submit(batch, requests);
}
Status TransferEngine::getTransferStatus(BatchID batch, size_t task_id, TransferStatus& status) {
  return impl_->taskStatus(batch, task_id, status);
}
Status TransferEngine::getBatchTransferStatus(BatchID batch, TransferStatus& status) {
  return impl_->batchStatus(batch, status);
}
Status TransferEngine::waitTransfer(BatchID batch, std::chrono::milliseconds timeout) {
  return impl_->wait(batch, timeout);
}
Status TransferEngine::cancelTransfer(BatchID batch) { return impl_->cancel(batch); }
Status TransferEngine::freeBatchID(BatchID batch) { return impl_->freeBatch(batch); }
Status TransferEngine::transferSync(const std::vector<TransferRequest>& requests, std::chrono::milliseconds timeout,
                                    std::vector<TransferStatus>* statuses, std::chrono::milliseconds cancel_wait) {
  return impl_->transferSync(requests, timeout, statuses, cancel_wait);
}
Status TransferEngine::submitTransfer(BatchID batch, const std::vector<TransferRequest>& requests,
                                      const Notification& notify) {
  return impl_->submit(batch, requests, &notify);
}
Status TransferEngine::sendNotify(SegmentID target, const Notification& notify) {
  return impl_->sendNotify(target, notify);
}
Status TransferEngine::getNotifies(std::vector<ReceivedNotification>& out) { return impl_->getNotifies(out); }
Status TransferEngine::getNotifies(std::vector<ReceivedNotification>& out, bool with_failures) {
  return impl_->getNotifies(out, with_failures);
}
Status TransferEngine::submitTransfer(BatchID batch, const std::vector<TransferRequest>& requests,
                                      const Signal& signal) {
  return impl_->submit(batch, requests, nullptr, &signal);
}
Status TransferEngine::waitSignal(const std::string& peer, const std::string& name, uint64_t expected,
                                  std::chrono::milliseconds timeout, SignalResult& out) {
  return impl_->waitSignal(peer, name, expected, timeout, out);
}
Status TransferEngine::getNotifyStatus(BatchID batch, std::vector<NotifyStatus>& out) {
  return impl_->notifyStatus(batch, out);
}
Status TransferEngine::transferSync(const std::vector<TransferRequest>& requests, const Notification& notify,
                                    std::chrono::milliseconds timeout, std::vector<TransferStatus>* statuses,
                                    std::chrono::milliseconds cancel_wait) {
  return impl_->transferSync(requests, timeout, statuses, cancel_wait, &notify);
}
std::vector<std::string> TransferEngine::transports() const { return impl_->transportNames(); }
std::vector<std::string> TransferEngine::builtTransports() {
  std::vector<std::string> names;
  for (auto& f : transportFactories()) {
    names.push_back(f.name);
    if (names.back() == "file") names.push_back("nvmeof");
  }
  return names;
}
EngineStats TransferEngine::stats() const { return impl_->stats(); }
std::vector<TransportDiagnosis> TransferEngine::diagnose() const { return impl_->diagnose(); }
Status TransferEngine::explainRoute(SegmentID segment, const std::string& local_location, RouteExplanation& out) {
  return impl_->explainRoute(segment, local_location, out);
}

}  // namespace hawser
