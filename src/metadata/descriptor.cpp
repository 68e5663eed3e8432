#include "metadata/descriptor.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

namespace hawser {

using json = nlohmann::json;

json encodeSegment(const SegmentDesc& d) {
  json j;
  j["version"] = fmt::format("{}.{}", kDescriptorMajor, kDescriptorMinor);
  j["name"] = d.name;
  if (d.kind == SegmentDesc::Kind::kFile) {
    j["kind"] = "file";
    json files = json::array();
    for (auto& f : d.files) {
      json jf;
      jf["file_path"] = f.file_path;
      jf["length"] = f.length;
      jf["local_path_map"] = f.local_path_map;
      files.push_back(std::move(jf));
    }
    j["files"] = std::move(files);
    return j;
  }
  j["kind"] = "memory";
  j["host"] = d.host;
  j["rpc_port"] = d.rpc_port;
  j["host_id"] = d.host_id;
  j["server_name"] = d.server_name;
  j["pid"] = d.pid;
  j["generation"] = d.generation;
  j["transports"] = d.transports;
  json bufs = json::array();
  for (auto& b : d.buffers) {
    json jb;
    jb["addr"] = b.addr;
    jb["length"] = b.length;
    jb["location"] = b.location;
    if (b.seq != 0) jb["seq"] = b.seq;
    if (!b.attrs.empty()) jb["attrs"] = b.attrs;
    bufs.push_back(std::move(jb));
  }
  j["buffers"] = std::move(bufs);
  return j;
}

std::string encodeSegmentText(const SegmentDesc& d) { return encodeSegment(d).dump(); }

namespace {

struct Decoder {
  Status err;
  std::string where;

  bool fail(const std::string& field, const std::string& why) {
    if (err.ok()) err = Status(Code::kMetadataError, fmt::format("descriptor{}: field '{}' {}", where, field, why));
    return false;
  }
  bool str(const json& j, const char* key, std::string& out, bool required = true) {
    auto it = j.find(key);
    if (it == j.end()) return required ? fail(key, "is missing") : true;
    if (!it->is_string()) return fail(key, fmt::format("must be a string, got {}", it->type_name()));
    out = it->get<std::string>();
    return true;
  }
  bool u64(const json& j, const char* key, uint64_t& out, uint64_t max = std::numeric_limits<uint64_t>::max(),
           bool required = true) {
    auto it = j.find(key);
    if (it == j.end()) return required ? fail(key, "is missing") : true;
    if (it->is_number_unsigned()) {
      out = it->get<uint64_t>();
    } else if (it->is_number_integer()) {
      int64_t v = it->get<int64_t>();
      if (v < 0) return fail(key, fmt::format("must be >= 0, got {}", v));
      out = static_cast<uint64_t>(v);
    } else {
      return fail(key, fmt::format("must be an unsigned integer, got {}", it->type_name()));
    }
    if (out > max) return fail(key, fmt::format("is out of range: {} > {}", out, max));
    return true;
  }
};

}  // namespace

Status decodeSegment(const json& j, SegmentDesc& out) {
  Decoder d;
  if (!j.is_object()) return {Code::kMetadataError, fmt::format("descriptor must be a JSON object, got {}", j.type_name())};
  std::string version;
  if (!d.str(j, "version", version)) return d.err;
  int major = -1, minor = 0;
  if (std::sscanf(version.c_str(), "%d.%d", &major, &minor) < 1 || major < 0)
    return {Code::kMetadataError, fmt::format("descriptor: field 'version' is malformed: '{}'", version)};
  if (major != kDescriptorMajor)
    return {Code::kMetadataError, fmt::format("descriptor: unsupported major version {} (this build reads {}.x)",
                                              major, kDescriptorMajor)};
  SegmentDesc s;
  std::string kind;
  if (!d.str(j, "name", s.name) || !d.str(j, "kind", kind)) return d.err;
  if (kind == "file") {
    s.kind = SegmentDesc::Kind::kFile;
    auto it = j.find("files");
    if (it == j.end() || !it->is_array()) return {Code::kMetadataError, "descriptor: field 'files' must be an array"};
    size_t i = 0;
    for (auto& jf : *it) {
      d.where = fmt::format(" files[{}]", i++);
      if (!jf.is_object()) return {Code::kMetadataError, fmt::format("descriptor{}: must be an object", d.where)};
      FileDesc f;
      if (!d.str(jf, "file_path", f.file_path) || !d.u64(jf, "length", f.length)) return d.err;
      auto m = jf.find("local_path_map");
      if (m != jf.end()) {
        if (!m->is_object()) return {Code::kMetadataError, fmt::format("descriptor{}: 'local_path_map' must be an object", d.where)};
        for (auto& [host, path] : m->items()) {
          if (!path.is_string())
            return {Code::kMetadataError, fmt::format("descriptor{}: local_path_map['{}'] must be a string", d.where, host)};
          f.local_path_map[host] = path.get<std::string>();
        }
      }
      s.files.push_back(std::move(f));
    }
  } else if (kind == "memory") {
    s.kind = SegmentDesc::Kind::kMemory;
    uint64_t port = 0, gen = 0, pid = 0;
    if (!d.str(j, "host", s.host) || !d.u64(j, "rpc_port", port, 65535) || !d.str(j, "host_id", s.host_id, false) ||
        !d.str(j, "server_name", s.server_name, false) || !d.u64(j, "generation", gen, UINT64_MAX, false) ||
        !d.u64(j, "pid", pid, INT32_MAX, false))
      return d.err;
    s.rpc_port = static_cast<uint16_t>(port);
    s.generation = gen;
    s.pid = static_cast<int64_t>(pid);
    auto t = j.find("transports");
    if (t != j.end()) {
      if (!t->is_object()) return {Code::kMetadataError, "descriptor: field 'transports' must be an object"};
      s.transports = *t;
    }
    auto b = j.find("buffers");
    if (b == j.end() || !b->is_array()) return {Code::kMetadataError, "descriptor: field 'buffers' must be an array"};
    size_t i = 0;
    for (auto& jb : *b) {
      d.where = fmt::format(" buffers[{}]", i++);
      if (!jb.is_object()) return {Code::kMetadataError, fmt::format("descriptor{}: must be an object", d.where)};
      BufferDesc bd;
      if (!d.u64(jb, "addr", bd.addr) || !d.u64(jb, "length", bd.length) || !d.str(jb, "location", bd.location) ||
          !d.u64(jb, "seq", bd.seq, UINT64_MAX, false))
        return d.err;
      if (bd.length == 0 || bd.addr + bd.length < bd.addr)
        return {Code::kMetadataError, fmt::format("descriptor{}: range addr={} length={} is invalid", d.where, bd.addr, bd.length)};
      auto a = jb.find("attrs");
      if (a != jb.end()) {
        if (!a->is_object()) return {Code::kMetadataError, fmt::format("descriptor{}: 'attrs' must be an object", d.where)};
        bd.attrs = *a;
      }
      s.buffers.push_back(std::move(bd));
    }
    std::sort(s.buffers.begin(), s.buffers.end(), [](auto& x, auto& y) { return x.addr < y.addr; });
    // Registered regions never overlap; findBuffer relies on it.
    for (size_t k = 1; k < s.buffers.size(); ++k) {
      const BufferDesc& prev = s.buffers[k - 1];
      if (s.buffers[k].addr - prev.addr < prev.length)
        return {Code::kMetadataError, fmt::format("descriptor: buffers [{:#x}, +{}) and [{:#x}, +{}) overlap", prev.addr,
                                                  prev.length, s.buffers[k].addr, s.buffers[k].length)};
    }
  } else {
    return {Code::kMetadataError, fmt::format("descriptor: field 'kind' must be \"memory\" or \"file\", got \"{}\"", kind)};
  }
  out = std::move(s);
  return Status::OK();
}

Status decodeSegmentText(std::string_view text, SegmentDesc& out) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return {Code::kMetadataError, "descriptor is not valid JSON"};
  return decodeSegment(j, out);
}

}  // namespace hawser
