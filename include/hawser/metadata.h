// hawser — metadata administration: the segments a metadata service holds,
// read and edited without running an engine (what `hawser segment` does).
//
//   std::unique_ptr<hawser::MetadataAdmin> admin;
//   hawser::Status s = hawser::MetadataAdmin::open("etcd://10.0.0.1:2379", {}, admin);
//   hawser::FileDesc f;
//   s = hawser::MetadataAdmin::inspectFile("/data/ckpt.bin", f);   // absolute path + size
//   f.local_path_map["node-a"] = f.file_path;
//   s = admin->registerFileSegment("ckpt", {f}, /*replace=*/false);
//   s = admin->mapFile("ckpt", "0", "node-b", "/mnt/ckpt.bin");     // where node-b sees file #0
//   std::vector<hawser::SegmentRecord> all;  s = admin->list(all);
//
// Metadata URIs are the five of TransferEngine::init: "p2p" (or "", or
// "P2PHANDSHAKE") edits the file segments JSON file that p2p engines load
// (config key "file_segments", env HAWSER_FILE_SEGMENTS), under an exclusive
// flock of PATH.lock; "etcd://h:p[,h:p]" and "etcds://h:p[,h:p]" (TLS) edit
// <prefix>/files/<name> keys, each edit one write (create-if-absent, or
// compare-and-swap on the key's revision, retried on conflict);
// "http://host:port/path" (Mooncake's HTTP metadata server) reads and
// writes single keys: it has no listing (list() is kNotSupported) and
// edits are read-then-write.
// Every call returns a Status; nothing throws. A MetadataAdmin may be used
// from several threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "hawser/status.h"
#include "hawser/types.h"

namespace hawser {

// One segment as metadata stores it.
struct SegmentRecord {
  std::string name;
  bool is_file = false;  // a file segment; else the memory segment of an engine

  // How it is stored: etcd's key, its mod_revision and (memory segments) the
  // owning engine's lease. Empty / 0 with p2p.
  std::string key;
  int64_t mod_revision = 0;
  int64_t lease = 0;

  // Why the stored descriptor could not be decoded (kMetadataError). When
  // set, only the fields above are meaningful.
  Status error;

  // Memory segments: the owning engine and its buffers.
  std::string server_name;
  std::string host;
  uint16_t rpc_port = 0;
  int64_t pid = 0;
  std::vector<SegmentBuffer> buffers;
  std::string transports_json;  // per-transport attributes, JSON text; "" if none

  // File segments: the backing files, concatenated in order.
  std::vector<FileDesc> files;

  // File segments: the sum of the file lengths; memory: of the buffer lengths.
  uint64_t bytes = 0;
  // The whole descriptor as metadata holds it (versioned JSON text).
  std::string descriptor_json;
};

class MetadataAdmin {
 public:
  // metadata_uri: one of the five forms above. `config`: keys of
  // hawser's config table ("file_segments", "metadata.prefix",
  // "etcd.timeout_ms", ...) that override the environment (HAWSER_*).
  // Every value (environment and `config`) is validated first, as an engine's
  // init() validates it (hawser/config.h).
  // Errors: kInvalidArgument for a malformed URI, a bad config value, a key
  // of `config` that is not in the table, or p2p
  // without a file segments file; kUnavailable / kTimeout when etcd does not
  // answer (naming every endpoint); kNotSupported for etcd in a build without it.
  static Status open(const std::string& metadata_uri, const std::map<std::string, std::string>& config,
                     std::unique_ptr<MetadataAdmin>& out);
  ~MetadataAdmin();
  MetadataAdmin(const MetadataAdmin&) = delete;
  MetadataAdmin& operator=(const MetadataAdmin&) = delete;

  // Where the segments live, for messages: "file segments '/etc/segs.json'",
  // "etcd etcd://10.0.0.1:2379 (prefix 'hawser')".
  std::string where() const;

  // Every segment, memory and file (etcd: file segments first, each kind by
  // name); one
  // whose descriptor does not decode is listed with `error` set.
  Status list(std::vector<SegmentRecord>& out);
  // One segment: kSegmentNotFound when absent. A descriptor that does not
  // decode is Ok with out.error set.
  Status show(const std::string& name, SegmentRecord& out);

  // Publishes file segment `name` made of `files` (each with an absolute
  // file_path and a length >= 1). replace=false: kInvalidArgument when the
  // name is taken (by a file or a memory segment); replace=true: overwrites a
  // file segment. `stored` (optional) gets the segment as now stored.
  Status registerFileSegment(const std::string& name, const std::vector<FileDesc>& files, bool replace,
                             SegmentRecord* stored = nullptr);

  // Records that host `host` sees one file of segment `name` at
  // `local_path` (absolute). `file` names the file: its file_path, that path
  // after resolving symbolic links, a path it is mapped to, or its index
  // ("0", "1", ...). Concurrent maps of the same segment are all kept.
  // kSegmentNotFound for an unknown segment; kInvalidArgument for a memory
  // segment, an unknown `file` (the message lists the segment's files) or a
  // relative path. `index` (optional) gets the index of the file.
  Status mapFile(const std::string& name, const std::string& file, const std::string& host,
                 const std::string& local_path, size_t* index = nullptr);

  // Removes a file segment. A memory segment (etcd: a running engine's key,
  // under its lease) is removed only with `force` (kInvalidArgument naming
  // its owner otherwise); a running engine publishes it again.
  Status remove(const std::string& name, bool force);

  // Segment names: 1..255 bytes, no '/', whitespace or control characters,
  // not starting with "file:" (those name files directly). kInvalidArgument.
  static Status checkName(const std::string& name);

  // A backing file for a file segment: `path` made absolute (symbolic links
  // resolved) into out.file_path, its size (a regular file's length, a block
  // device's size) into out.length; out.local_path_map is cleared.
  // kFileNotFound, kPermissionDenied (also when not readable), kIoError;
  // kInvalidArgument when it is neither a regular file nor a block device, or
  // is empty.
  static Status inspectFile(const std::string& path, FileDesc& out);

 private:
  struct Impl;
  explicit MetadataAdmin(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace hawser
