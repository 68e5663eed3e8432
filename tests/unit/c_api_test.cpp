// The C API maps Status codes to negative ints and keeps the message.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "hawser/c_api.h"
#include "hawser/status.h"

TEST(CApi, errors_are_negative_codes_with_a_message) {
  hawser_engine_t* e = nullptr;
  EXPECT_EQ(hawser_engine_create("bogus://", "n", "127.0.0.1", 0, &e), -int(hawser::Code::kInvalidArgument));
  EXPECT_NE(std::string(hawser_last_error()).find("bogus://"), std::string::npos);
  ASSERT_EQ(hawser_engine_create("p2p", "n", "127.0.0.1", 0, &e), 0);
  char name[64];
  ASSERT_EQ(hawser_segment_name(e, name, sizeof(name)), 0);
  EXPECT_EQ(std::string(name), "127.0.0.1:" + std::to_string(hawser_rpc_port(e)));
  std::vector<char> buf(4096);
  EXPECT_EQ(hawser_register_memory(e, buf.data(), 0, "cpu:0", 1), -int(hawser::Code::kInvalidArgument));
  ASSERT_EQ(hawser_register_memory(e, buf.data(), buf.size(), "cpu:0", 1), 0);
  EXPECT_EQ(hawser_register_memory(e, buf.data() + 1, 10, "cpu:0", 1), -int(hawser::Code::kAddressOverlapped));
  EXPECT_EQ(hawser_free_batch(e, 12345), -int(hawser::Code::kInvalidBatch));
  hawser_status_t st;
  EXPECT_EQ(hawser_task_status(e, 1, 0, nullptr), -int(hawser::Code::kInvalidArgument));
  EXPECT_EQ(hawser_task_status(e, 999, 0, &st), -int(hawser::Code::kInvalidBatch));
  EXPECT_EQ(hawser_unregister_memory(e, buf.data()), 0);
  hawser_engine_destroy(e);
}

TEST(CApi, a_loopback_write_and_read_through_the_c_api_round_trips) {
  hawser_engine_t* e = nullptr;
  ASSERT_EQ(hawser_engine_create("p2p", "c", "127.0.0.1", 0, &e), 0);
  std::vector<char> target(1 << 20), src(1 << 20), dst(1 << 20);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<char>(i * 31 + 7);
  ASSERT_EQ(hawser_register_memory(e, target.data(), target.size(), "cpu:0", 1), 0);
  ASSERT_EQ(hawser_register_memory(e, src.data(), src.size(), "cpu:0", 0), 0);
  ASSERT_EQ(hawser_register_memory(e, dst.data(), dst.size(), "cpu:0", 0), 0);
  char name[64];
  ASSERT_EQ(hawser_segment_name(e, name, sizeof(name)), 0);
  hawser_segment_id_t seg;
  ASSERT_EQ(hawser_open_segment(e, name, &seg), 0) << hawser_last_error();
  hawser_batch_id_t b;
  ASSERT_EQ(hawser_allocate_batch(e, 2, &b), 0);
  hawser_request_t w{HAWSER_OP_WRITE, src.data(), seg, reinterpret_cast<uint64_t>(target.data()), src.size()};
  ASSERT_EQ(hawser_submit(e, b, &w, 1), 0) << hawser_last_error();
  ASSERT_EQ(hawser_wait(e, b, 20000), 0) << hawser_last_error();
  hawser_request_t r{HAWSER_OP_READ, dst.data(), seg, reinterpret_cast<uint64_t>(target.data()), dst.size()};
  ASSERT_EQ(hawser_submit(e, b, &r, 1), 0) << hawser_last_error();
  ASSERT_EQ(hawser_wait(e, b, 20000), 0);
  hawser_status_t st;
  ASSERT_EQ(hawser_task_status(e, b, 1, &st), 0);
  EXPECT_EQ(st.state, HAWSER_COMPLETED);
  EXPECT_EQ(st.transferred_bytes, dst.size());
  EXPECT_EQ(std::memcmp(src.data(), dst.data(), src.size()), 0);
  ASSERT_EQ(hawser_free_batch(e, b), 0);
  hawser_engine_destroy(e);
}
