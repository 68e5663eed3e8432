// checkNameOwner (name_claim.h).
#include "metadata/name_claim.h"

#include <chrono>

#include "rpc/rpc.h"

namespace hawser {

namespace {
constexpr std::chrono::milliseconds kOwnerPingTimeout{500};
}  // namespace

Status checkNameOwner(const std::string& name, const SegmentDesc& old, const SegmentDesc& mine,
                      const std::string& where) {
  if (old.host.empty() || old.rpc_port == 0) return Status::OK();
  if (old.host == mine.host && old.rpc_port == mine.rpc_port) return Status::OK();
  std::string reply;
  Status ping = rpc::call(old.host, old.rpc_port, rpc::kPing, std::string(), reply, kOwnerPingTimeout);
  // Anything but "nobody there" means an engine still holds the endpoint.
  if (!ping.ok() && (ping.code() == Code::kUnavailable || ping.code() == Code::kTimeout)) return Status::OK();
  return Status(Code::kInvalidArgument, "local_server_name '" + name + "' is already published in " + where +
                                            " by a live engine at " + old.host + ":" + std::to_string(old.rpc_port) +
                                            " (pid " + std::to_string(old.pid) + "); stop it or pick another name");
}

}  // namespace hawser
