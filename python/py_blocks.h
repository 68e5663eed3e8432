// Block requests and transfer plans in the Python binding (py_blocks.cpp):
// arrays of addresses and lengths taken through the buffer protocol (numpy
// arrays of uint64/int64, array.array('Q'), memoryviews) without a Python
// loop; plain lists work too. docs/python.md "Block requests".
#pragma once

#include <pybind11/pybind11.h>

namespace hawser::pymod {

class PyEngine;

// Adds the block methods to the TransferEngine class.
void defineBlocks(pybind11::class_<PyEngine>& cls);

}  // namespace hawser::pymod
