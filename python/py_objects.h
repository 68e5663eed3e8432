// What the Python layers (hawser.tensors, hawser.nixl) cannot read from
// Python alone: the address of any buffer-protocol object (read-only ones
// too) and the fields of a DLPack capsule. py_objects.cpp.
#pragma once

#include <pybind11/pybind11.h>

namespace hawser::pymod {

// hawser._buffer_info(obj) and hawser._dlpack_info(capsule).
void bindObjectHelpers(pybind11::module_& m);

// Runs the Python sources embedded at build time (python/pysrc/*.py) as
// submodules hawser.<name>, each with `_hawser` (this module) in its globals,
// and registers them in sys.modules.
void loadEmbeddedModules(pybind11::module_& m);

}  // namespace hawser::pymod
