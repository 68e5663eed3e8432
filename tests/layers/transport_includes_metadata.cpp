// Compiled with a transport's include roots only (tests/layers.cmake): it
// must NOT compile. A transport sees a peer's descriptor as data
// (base/segment_desc.h); the metadata layer (its codec, the etcd and HTTP
// stores) is above it.
#include "base/segment_desc.h"
#include "metadata/descriptor.h"
