#include <gtest/gtest.h>
#include <stdlib.h>

#include "base/config.h"

using namespace hawser;

TEST(Config, parse_size_accepts_binary_suffixes) {
  EXPECT_EQ(parseSize("4096"), 4096u);
  EXPECT_EQ(parseSize("64K"), 64u << 10);
  EXPECT_EQ(parseSize("1m"), 1u << 20);
  EXPECT_EQ(parseSize("2G"), 2ull << 30);
  EXPECT_EQ(parseSize("1MiB"), 1u << 20);
  EXPECT_EQ(parseSize("8KB"), 8u << 10);
}

TEST(Config, parse_size_rejects_junk_and_overflow) {
  EXPECT_FALSE(parseSize(""));
  EXPECT_FALSE(parseSize("abc"));
  EXPECT_FALSE(parseSize("12Q"));
  EXPECT_FALSE(parseSize("-1"));
  EXPECT_FALSE(parseSize("99999999999999999999"));
  EXPECT_FALSE(parseSize("17179869184G"));
}

TEST(Config, env_overrides_default_and_set_overrides_env) {
  ::setenv("HAWSER_TCP_CONNECTIONS", "7", 1);
  Config c = Config::fromEnv();
  EXPECT_EQ(c.getInt("tcp.connections", 4), 7);
  EXPECT_EQ(c.getInt("tcp.missing", 4), 4);
  c.set("tcp.connections", "9");
  EXPECT_EQ(c.getInt("tcp.connections", 4), 9);
  ::unsetenv("HAWSER_TCP_CONNECTIONS");
}

TEST(Config, keys_with_underscores_read_their_env_name) {
  ::setenv("HAWSER_FILE_MAX_IO_SIZE", "2M", 1);
  Config c = Config::fromEnv();
  EXPECT_EQ(c.getSize("file.max_io_size", 1), 2u << 20);
  ::unsetenv("HAWSER_FILE_MAX_IO_SIZE");
}

TEST(Config, bad_numbers_fall_back_to_default) {
  Config c;
  c.set("x", "12abc");
  EXPECT_EQ(c.getInt("x", 3), 3);
  c.set("b", "maybe");
  EXPECT_TRUE(c.getBool("b", true));
  c.set("b", "off");
  EXPECT_FALSE(c.getBool("b", true));
}
