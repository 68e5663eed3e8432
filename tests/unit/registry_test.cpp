// The registry's identity of a registration (issue 30): every registration
// gets a number never used before, so a range registered again at the same
// address is another registration, and a request bound to the first one is
// refused by the second.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "base/registry.h"

namespace hawser {
namespace {

TEST(Registry, a_range_registered_again_at_the_same_address_is_another_registration) {
  MemoryRegistry reg;
  Region r;
  r.addr = 0x10000;
  r.length = 0x4000;
  ASSERT_TRUE(reg.insert(r).ok());
  const uint64_t first = reg.find(r.addr)->seq;
  ASSERT_TRUE(reg.erase(r.addr).ok());
  ASSERT_TRUE(reg.insert(r).ok());
  const uint64_t second = reg.find(r.addr)->seq;
  EXPECT_NE(first, 0u);
  EXPECT_GT(second, first);

  MemoryRegistry::Pin pin;
  Status s = reg.pinRemote(r.addr + 0x1000, 0x1000, pin, first);
  EXPECT_EQ(s.code(), Code::kOutOfRange);
  EXPECT_FALSE(pin);
  EXPECT_NE(s.message().find(fmt::format("registration {} (the one the request is bound to) was withdrawn", first)),
            std::string::npos)
      << s.toString();
  EXPECT_TRUE(reg.pinRemote(r.addr + 0x1000, 0x1000, pin, second).ok());
  EXPECT_TRUE(pin);
  pin.release();
  EXPECT_TRUE(reg.pinRemote(r.addr, 0x4000, pin).ok()) << "0: bound to no registration";
  pin.release();

  // Withdrawn and not registered again: the request names its registration too.
  ASSERT_TRUE(reg.erase(r.addr).ok());
  s = reg.pinRemote(r.addr, 0x1000, pin, second);
  EXPECT_EQ(s.code(), Code::kOutOfRange);
  EXPECT_NE(s.message().find(fmt::format("registration {} (the one the request is bound to) was withdrawn", second)),
            std::string::npos)
      << s.toString();
}

}  // namespace
}  // namespace hawser
