// The transports an engine installs at init: the built-in ones (generated
// from src/CMakeLists.txt's list) and any registered at run time before init
// (embedders, tests).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/knob.h"
#include "base/transport.h"

namespace hawser {

// A transport's descriptor decoder: decodes and checks its part of a peer's
// descriptor (transports.<name>, the buffers' attrs.<name>) as its openPeer
// does, without a transport instance or any I/O. A refusal names the field
// and its route reason (`why`, whose text is the message). The one fuzz
// target of peer descriptors (tests/fuzz/peer_descriptor_fuzz.cpp) feeds
// every factory's decoder.
using PeerDecoder = Status (*)(const SegmentDesc& seg, RouteDecline& why);

struct TransportFactory {
  std::string name;
  std::unique_ptr<Transport> (*make)();
  // Its knobs (base/knob.h), registered with the config system under `name`
  // while the factory is (a built-in one's: by the generated list).
  std::span<const Knob> knobs = {};
  // A built-in transport's is found by its factory's name: makeTcpTransport
  // comes with `Status decodeTcpPeer(const SegmentDesc&, RouteDecline&)`
  // (src/engine/CMakeLists.txt). Optional for a factory registered at run time.
  PeerDecoder decodePeer = nullptr;
};

const std::vector<TransportFactory>& builtinTransports();

// Adds a factory that engines initialized from now on install too. A name
// already in the list is replaced. Its knobs join the config system
// (base/knob_registry.h): kInvalidArgument, and nothing registered, when
// one of its keys or environment names is already another table's (a
// factory that replaces a built-in one brings no knobs of its own).
// Thread-safe.
Status registerTransportFactory(const TransportFactory& f);

// Removes the factory registered under `name` (a built-in one it replaced
// is used again) and its knobs; false when none is. Engines already
// initialized keep what they installed. Thread-safe.
bool unregisterTransportFactory(const std::string& name);

// A factory registered for a scope (a test's): unregistered at its end.
class ScopedTransportFactory {
 public:
  explicit ScopedTransportFactory(const TransportFactory& f)
      : name_(f.name), status_(registerTransportFactory(f)) {}
  ~ScopedTransportFactory() {
    if (status_.ok()) unregisterTransportFactory(name_);
  }
  ScopedTransportFactory(const ScopedTransportFactory&) = delete;
  ScopedTransportFactory& operator=(const ScopedTransportFactory&) = delete;
  // registerTransportFactory's result.
  const Status& status() const { return status_; }

 private:
  std::string name_;
  Status status_;
};

// Every factory: built-in, then registered.
std::vector<TransportFactory> transportFactories();

}  // namespace hawser
