// The p2p file segments file (src/metadata/p2p_file_segments.h), which any
// user with write access to it may have edited. Invariants: a refusal is
// kMetadataError; what decodes is file segments only, keyed by name, and
// encodes to text that decodes to the same map.
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "metadata/p2p_file_segments.h"

using namespace hawser;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  FileSegmentMap segs;
  Status s = decodeFileSegments(text, segs);
  if (!s.ok()) {
    FUZZ_CHECK(s.code() == Code::kMetadataError && !s.message().empty() && segs.empty());
    return 0;
  }
  for (const auto& [name, d] : segs) FUZZ_CHECK(name == d.name && d.kind == SegmentDesc::Kind::kFile);
  const std::string once = encodeFileSegments(segs);
  FileSegmentMap again;
  FUZZ_CHECK(decodeFileSegments(once, again).ok());
  FUZZ_CHECK(again.size() == segs.size() && encodeFileSegments(again) == once);
  return 0;
}
