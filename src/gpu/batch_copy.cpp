#include "gpu/batch_copy.h"

#include "base/config.h"

namespace hawser::gpu {

namespace {
constexpr const char* kNames[] = {"auto", "kernel", "copy_engine", "per_run"};
}

const char* copyMechanismName(CopyMechanism m) {
  const auto i = static_cast<size_t>(m);
  return i < std::size(kNames) ? kNames[i] : "?";
}

bool parseCopyMechanism(std::string_view s, CopyMechanism& out) {
  for (size_t i = 0; i < std::size(kNames); ++i)
    if (s == kNames[i]) {
      out = static_cast<CopyMechanism>(i);
      return true;
    }
  return false;
}

Status CopySettings::fromConfig(const Config& c, CopySettings& out) {
  CopySettings s;
  std::string m;
  Status st = c.getString("gpu.copy_mechanism", m);
  if (!st.ok()) return st;
  if (!parseCopyMechanism(m, s.mechanism))
    return {Code::kInvalidArgument, "gpu.copy_mechanism: unknown mechanism '" + m + "'"};
  if (!(st = c.getInt("gpu.copy_max_ctas", s.max_ctas)).ok()) return st;
  if (!(st = c.getSize("gpu.copy_kernel_below", s.kernel_below)).ok()) return st;
  out = s;
  return Status::OK();
}

}  // namespace hawser::gpu
