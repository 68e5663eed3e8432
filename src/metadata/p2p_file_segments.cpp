#include "metadata/p2p_file_segments.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace hawser {

Status decodeFileSegments(std::string_view text, FileSegmentMap& out) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return {Code::kMetadataError, "not a JSON object"};
  auto segs = j.find("segments");
  if (segs == j.end() || !segs->is_array()) return {Code::kMetadataError, "field 'segments' must be an array"};
  FileSegmentMap got;
  for (auto& js : *segs) {
    SegmentDesc d;
    Status s = decodeSegment(js, d);
    if (!s.ok()) return s;
    if (d.kind != SegmentDesc::Kind::kFile)
      return {Code::kMetadataError, fmt::format("segment '{}' is not of kind file", d.name)};
    if (got.count(d.name)) return {Code::kMetadataError, fmt::format("segment '{}' is listed twice", d.name)};
    got[d.name] = std::move(d);
  }
  out = std::move(got);
  return Status::OK();
}

std::string encodeFileSegments(const FileSegmentMap& segs) {
  nlohmann::json j;
  j["version"] = fmt::format("{}.{}", kDescriptorMajor, kDescriptorMinor);
  j["segments"] = nlohmann::json::array();
  for (auto& [n, d] : segs) j["segments"].push_back(encodeSegment(d));
  return j.dump(2);
}

Status loadFileSegments(const std::string& path, FileSegmentMap& out) {
  std::ifstream in(path);
  if (!in) {
    if (errno == ENOENT) return Status::OK();  // nothing yet
    return {Code::kMetadataError, fmt::format("file segments '{}': {}", path, std::strerror(errno))};
  }
  std::stringstream ss;
  ss << in.rdbuf();
  Status s = decodeFileSegments(ss.str(), out);
  if (!s.ok()) return {s.code(), fmt::format("file segments '{}': {}", path, s.message())};
  return Status::OK();
}

Status saveFileSegments(const std::string& path, const FileSegmentMap& segs) {
  std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) return {Code::kMetadataError, fmt::format("cannot write '{}': {}", tmp, std::strerror(errno))};
    out << encodeFileSegments(segs) << "\n";
    if (!out.flush()) return {Code::kMetadataError, fmt::format("cannot write '{}'", tmp)};
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    return {Code::kMetadataError, fmt::format("cannot rename '{}' to '{}': {}", tmp, path, std::strerror(errno))};
  return Status::OK();
}

Status editFileSegments(const std::string& path, const std::function<Status(FileSegmentMap&, bool&)>& edit) {
  const std::string lock_path = path + ".lock";
  int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    int e = errno;
    return {e == EACCES ? Code::kPermissionDenied : Code::kMetadataError,
            fmt::format("cannot open lock file '{}': {}", lock_path, std::strerror(e))};
  }
  if (::flock(fd, LOCK_EX) != 0) {
    int e = errno;
    ::close(fd);
    return {Code::kMetadataError, fmt::format("cannot lock '{}': {}", lock_path, std::strerror(e))};
  }
  FileSegmentMap segs;
  Status s = loadFileSegments(path, segs);
  bool dirty = false;
  if (s.ok()) s = edit(segs, dirty);
  if (s.ok() && dirty) s = saveFileSegments(path, segs);
  ::close(fd);  // releases the lock
  return s;
}

}  // namespace hawser
