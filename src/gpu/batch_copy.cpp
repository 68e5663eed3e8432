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

void CopyCounters::add(const CopyReport& r) {
  windows.fetch_add(1, std::memory_order_relaxed);
  runs.fetch_add(r.runs, std::memory_order_relaxed);
  switch (r.used) {
    case CopyMechanism::kKernel: kernel_launches.fetch_add(r.launches, std::memory_order_relaxed); break;
    case CopyMechanism::kCopyEngine: engine_batches.fetch_add(r.launches, std::memory_order_relaxed); break;
    default: per_run.fetch_add(r.launches, std::memory_order_relaxed); break;
  }
  uint64_t seen = ctas_max.load(std::memory_order_relaxed);
  while (r.ctas > seen && !ctas_max.compare_exchange_weak(seen, r.ctas, std::memory_order_relaxed)) {
  }
  if (*r.fallback) fallbacks.fetch_add(1, std::memory_order_relaxed);
}

void CopyCounters::appendTo(Counters& out) const {
  out.emplace_back("gpu_copy_windows", windows.load(std::memory_order_relaxed));
  out.emplace_back("gpu_copy_runs", runs.load(std::memory_order_relaxed));
  out.emplace_back("gpu_copy_kernel_launches", kernel_launches.load(std::memory_order_relaxed));
  out.emplace_back("gpu_copy_engine_batches", engine_batches.load(std::memory_order_relaxed));
  out.emplace_back("gpu_copy_per_run", per_run.load(std::memory_order_relaxed));
  out.emplace_back("gpu_copy_ctas_max", ctas_max.load(std::memory_order_relaxed));
  out.emplace_back("gpu_copy_fallbacks", fallbacks.load(std::memory_order_relaxed));
}

}  // namespace hawser::gpu
