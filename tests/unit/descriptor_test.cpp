#include <gtest/gtest.h>

#include "metadata/descriptor.h"

using namespace hawser;
using json = nlohmann::json;

static SegmentDesc memorySeg() {
  SegmentDesc d;
  d.name = "10.0.0.1:5000";
  d.host = "10.0.0.1";
  d.rpc_port = 5000;
  d.buffers.push_back(BufferDesc{0x2000, 4096, "cpu:0", json{{"rdma", {{"rkey", {1, 2}}}}}});
  d.buffers.push_back(BufferDesc{0x1000, 4096, "cpu:1", json::object()});
  d.transports["tcp"] = json::object();
  return d;
}

TEST(Descriptor, memory_segment_round_trips_and_sorts_buffers) {
  SegmentDesc out;
  ASSERT_TRUE(decodeSegmentText(encodeSegmentText(memorySeg()), out).ok());
  EXPECT_EQ(out.kind, SegmentDesc::Kind::kMemory);
  EXPECT_EQ(out.rpc_port, 5000);
  ASSERT_EQ(out.buffers.size(), 2u);
  EXPECT_EQ(out.buffers[0].addr, 0x1000u);
  EXPECT_EQ(out.buffers[1].attrs["rdma"]["rkey"][1], 2);
  EXPECT_TRUE(out.transports.contains("tcp"));
}

TEST(Descriptor, registration_order_round_trips_and_is_optional) {
  SegmentDesc d = memorySeg();
  d.buffers[0].seq = 7;
  d.buffers[1].seq = 9;
  SegmentDesc out;
  ASSERT_TRUE(decodeSegmentText(encodeSegmentText(d), out).ok());
  ASSERT_EQ(out.buffers.size(), 2u);
  EXPECT_EQ(out.buffers[0].addr, 0x1000u);  // still sorted by address
  EXPECT_EQ(out.buffers[0].seq, 9u);
  EXPECT_EQ(out.buffers[1].seq, 7u);
  // A descriptor from an engine that does not publish it: 0.
  ASSERT_TRUE(decodeSegmentText(encodeSegmentText(memorySeg()), out).ok());
  EXPECT_FALSE(encodeSegment(memorySeg())["buffers"][0].contains("seq"));
  EXPECT_EQ(out.buffers[0].seq, 0u);
  json bad = encodeSegment(d);
  bad["buffers"][0]["seq"] = "first";
  Status s = decodeSegment(bad, out);
  EXPECT_EQ(s.code(), Code::kMetadataError);
  EXPECT_NE(s.message().find("seq"), std::string::npos) << s.toString();
}

TEST(Descriptor, find_buffer_requires_the_whole_range_inside_one_buffer) {
  SegmentDesc d;
  ASSERT_TRUE(decodeSegmentText(encodeSegmentText(memorySeg()), d).ok());
  EXPECT_EQ(d.findBuffer(0x1000, 4096), 0);
  EXPECT_EQ(d.findBuffer(0x2fff, 1), 1);
  EXPECT_EQ(d.findBuffer(0x1fff, 2), -1);  // spans two buffers
  EXPECT_EQ(d.findBuffer(0x0fff, 1), -1);
  EXPECT_EQ(d.findBuffer(0x3000, 1), -1);
  EXPECT_EQ(d.findBuffer(0x2000, UINT64_MAX), -1);
}

TEST(Descriptor, file_segment_round_trips_with_path_map) {
  SegmentDesc d;
  d.kind = SegmentDesc::Kind::kFile;
  d.name = "ckpt";
  d.files.push_back(FileDesc{"/data/a", 100, {{"node-b", "/mnt/a"}}});
  SegmentDesc out;
  ASSERT_TRUE(decodeSegmentText(encodeSegmentText(d), out).ok());
  ASSERT_EQ(out.files.size(), 1u);
  EXPECT_EQ(out.files[0].local_path_map.at("node-b"), "/mnt/a");
  EXPECT_EQ(out.fileSpan(), 100u);
}

TEST(Descriptor, unknown_major_version_is_rejected) {
  json j = encodeSegment(memorySeg());
  j["version"] = "2.0";
  SegmentDesc out;
  Status s = decodeSegment(j, out);
  EXPECT_EQ(s.code(), Code::kMetadataError);
  EXPECT_NE(s.message().find("major version 2"), std::string::npos) << s.message();
  j["version"] = "1.7";  // newer minor: accepted
  EXPECT_TRUE(decodeSegment(j, out).ok());
}

TEST(Descriptor, wrong_types_are_rejected_naming_the_field) {
  json j = encodeSegment(memorySeg());
  j["buffers"][0]["length"] = "4096";
  SegmentDesc out;
  Status s = decodeSegment(j, out);
  EXPECT_EQ(s.code(), Code::kMetadataError);
  EXPECT_NE(s.message().find("buffers[0]"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("length"), std::string::npos) << s.message();
  j = encodeSegment(memorySeg());
  j["host"] = 5;
  EXPECT_EQ(decodeSegment(j, out).code(), Code::kMetadataError);
  j = encodeSegment(memorySeg());
  j["kind"] = "disk";
  EXPECT_EQ(decodeSegment(j, out).code(), Code::kMetadataError);
}

TEST(Descriptor, out_of_range_numbers_are_rejected) {
  json j = encodeSegment(memorySeg());
  j["rpc_port"] = 70000;
  SegmentDesc out;
  EXPECT_EQ(decodeSegment(j, out).code(), Code::kMetadataError);
  j = encodeSegment(memorySeg());
  j["buffers"][0]["addr"] = -5;
  EXPECT_EQ(decodeSegment(j, out).code(), Code::kMetadataError);
  j = encodeSegment(memorySeg());
  j["buffers"][0]["length"] = 0;
  EXPECT_EQ(decodeSegment(j, out).code(), Code::kMetadataError);
  j = encodeSegment(memorySeg());
  j["buffers"][0]["addr"] = UINT64_MAX;  // addr + length wraps
  EXPECT_EQ(decodeSegment(j, out).code(), Code::kMetadataError);
}

TEST(Descriptor, malformed_json_is_a_metadata_error) {
  SegmentDesc out;
  EXPECT_EQ(decodeSegmentText("{not json", out).code(), Code::kMetadataError);
  EXPECT_EQ(decodeSegmentText("[1,2]", out).code(), Code::kMetadataError);
  EXPECT_EQ(decodeSegmentText("{}", out).code(), Code::kMetadataError);
}

TEST(Descriptor, overlapping_buffers_are_rejected_naming_both) {
  json j = encodeSegment(memorySeg());
  // buffers[0] is [0x2000, +4096); buffers[1] moves from 0x1000 to overlap it.
  j["buffers"][1]["addr"] = 0x2800;
  SegmentDesc out;
  Status s = decodeSegment(j, out);
  EXPECT_EQ(s.code(), Code::kMetadataError);
  EXPECT_NE(s.message().find("overlap"), std::string::npos) << s.message();
  j["buffers"][1]["addr"] = 0x3000;  // adjacent: fine
  EXPECT_TRUE(decodeSegment(j, out).ok());
}
