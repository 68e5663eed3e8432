// The p2p file segments JSON file: {"version":"1.0","segments":[<file
// segment descriptor>...]}, loaded by p2p engines (config file_segments, env
// HAWSER_FILE_SEGMENTS) and edited by `hawser segment`. Writers replace it
// atomically (write a temporary file, rename) under an exclusive flock on
// PATH.lock, so concurrent editors do not lose each other's changes.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "hawser/status.h"
#include "metadata/descriptor.h"

namespace hawser {

using FileSegmentMap = std::map<std::string, SegmentDesc>;  // by segment name

// The file's text: kMetadataError naming what is wrong (not JSON, a segment
// that does not decode, is not of kind file, or is listed twice). Fuzzed by
// tests/fuzz/file_segments_fuzz.cpp.
Status decodeFileSegments(std::string_view text, FileSegmentMap& out);
std::string encodeFileSegments(const FileSegmentMap& segs);
// A file that does not exist holds no segments (Ok, empty map).
Status loadFileSegments(const std::string& path, FileSegmentMap& out);
Status saveFileSegments(const std::string& path, const FileSegmentMap& segs);

// Read-modify-write under an exclusive flock on PATH.lock: loads the file,
// calls `edit`, and saves when `edit` succeeds and sets `dirty`.
Status editFileSegments(const std::string& path, const std::function<Status(FileSegmentMap&, bool& dirty)>& edit);

}  // namespace hawser
