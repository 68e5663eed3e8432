// TransferEngine.get_stats(), get_metrics() and metrics_text(): the
// engine's counters and metrics (docs/metrics.md) as Python objects.
#pragma once

#include <pybind11/pybind11.h>

#include "py_engine.h"

namespace hawser::pymod {

void bindMetrics(pybind11::class_<PyEngine>& cls);

}  // namespace hawser::pymod
