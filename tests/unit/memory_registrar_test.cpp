// Memory registration alone (engine/memory_registrar.h), over a
// MemoryRegistry and fake transports: every transport registers every
// region and its attrs reach the descriptor's buffers, a refusal by one
// transport undoes the whole call everywhere, unregister refuses what is
// not a region's start and tears down the rest, a transport installed
// later gets what is registered so far, the descriptor is published
// after each change (under the registrar's lock, as the engine's publisher
// reads the attrs back), and registrations from several threads at once.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "common/fake_transport.h"
#include "engine/memory_registrar.h"

namespace hawser {
namespace {

uint64_t addrOf(const void* p) { return reinterpret_cast<uint64_t>(p); }

// A fake transport with a name of its own that says what it saw of each
// region (its attrs), and refuses the region starting at `refuse`.
class NamedTransport : public test::FakeTransport {
 public:
  explicit NamedTransport(std::string name, uint64_t refuse = 0) : name_(std::move(name)), refuse_(refuse) {}
  const char* name() const override { return name_.c_str(); }
  Status registerRegion(const Region& region, nlohmann::json& attrs,
                        std::shared_ptr<const Registration>& out) override {
    if (region.addr == refuse_) return {Code::kIoError, "refused by the test"};
    attrs["length"] = region.length;
    return FakeTransport::registerRegion(region, attrs, out);
  }

 private:
  const std::string name_;
  const uint64_t refuse_;
};

class MemoryRegistrarTest : public ::testing::Test {
 protected:
  MemoryRegistry registry;
  std::vector<std::unique_ptr<Transport>> transports;
  std::atomic<int> published{0};
  std::vector<BufferDesc> last_published;  // under the registrar's lock
  // Publishes the way the engine does: reads the buffers back.
  MemoryRegistrar registrar{registry, transports, [this] {
                              ++published;
                              last_published = registrar.buffers();
                              return Status::OK();
                            }};
  std::vector<char> mem = std::vector<char>(1 << 16);

  NamedTransport& add(std::string name, uint64_t refuse = 0) {
    transports.push_back(std::make_unique<NamedTransport>(std::move(name), refuse));
    return static_cast<NamedTransport&>(*transports.back());
  }
  void* at(size_t off) { return mem.data() + off; }
};

TEST_F(MemoryRegistrarTest, every_transport_registers_every_region_and_its_attrs_are_published) {
  auto& a = add("one");
  auto& b = add("two");
  ASSERT_TRUE(registrar.add({{at(0), 4096, "cpu:0"}, {at(8192), 1024, "cpu:0"}, {at(16384), 512, "cpu:0", false}})
                  .ok());
  EXPECT_EQ(registry.snapshot().size(), 3u);
  for (auto* t : {&a, &b}) {
    EXPECT_NE(t->registeredAt(addrOf(at(0))), nullptr);
    EXPECT_NE(t->registeredAt(addrOf(at(8192))), nullptr);
  }
  auto r = registry.find(addrOf(at(0)));
  ASSERT_TRUE(r.has_value());
  ASSERT_NE(r->registrations, nullptr);
  EXPECT_EQ(r->registrations->size(), 2u);  // one Registration per transport, kept with the region
  EXPECT_EQ(r->location, "cpu:0");

  EXPECT_EQ(published.load(), 1);
  // Remote-inaccessible memory is not published.
  ASSERT_EQ(last_published.size(), 2u);
  auto buffers = registrar.buffers();
  ASSERT_EQ(buffers.size(), 2u);
  const BufferDesc& first = buffers[0].addr == addrOf(at(0)) ? buffers[0] : buffers[1];
  EXPECT_EQ(first.length, 4096u);
  EXPECT_EQ(first.attrs["one"]["length"], 4096);
  EXPECT_EQ(first.attrs["two"]["length"], 4096);
}

TEST_F(MemoryRegistrarTest, bad_buffers_are_refused_naming_them_before_anything_registers) {
  auto& a = add("one");
  Status s = registrar.add({});
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.message(), "buffers is empty");
  s = registrar.add({{at(0), 64, "cpu:0"}, {nullptr, 64, "cpu:0"}});
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.message(), "buffers[1].addr is null");
  s = registrar.add({{at(0), 4096, "cpu:0"}, {at(1024), 4096, "cpu:0"}});
  EXPECT_EQ(s.code(), Code::kAddressOverlapped);
  EXPECT_NE(s.message().find("buffers[1]"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("overlaps buffers[0]"), std::string::npos) << s.message();
  EXPECT_EQ(registry.snapshot().size(), 0u);
  EXPECT_EQ(a.registeredAt(addrOf(at(0))), nullptr);
  EXPECT_EQ(published.load(), 0);
}

TEST_F(MemoryRegistrarTest, a_refusal_by_one_transport_undoes_the_whole_call_in_every_transport) {
  auto& a = add("one");
  add("two", addrOf(at(8192)));  // refuses the second buffer
  Status s = registrar.add({{at(0), 4096, "cpu:0"}, {at(8192), 4096, "cpu:0"}});
  EXPECT_EQ(s.code(), Code::kIoError);
  EXPECT_EQ(s.message(), "buffers[1] in transport two: refused by the test");
  EXPECT_EQ(registry.snapshot().size(), 0u);
  EXPECT_EQ(a.registeredAt(addrOf(at(0))), nullptr);
  EXPECT_EQ(a.registeredAt(addrOf(at(8192))), nullptr);
  EXPECT_TRUE(registrar.buffers().empty());
  EXPECT_EQ(published.load(), 0);
}

TEST_F(MemoryRegistrarTest, unregister_refuses_what_is_not_a_region_start_and_tears_down_the_rest) {
  auto& a = add("one");
  ASSERT_TRUE(registrar.add({{at(0), 4096, "cpu:0"}, {at(8192), 4096, "cpu:0"}}).ok());
  auto reg = a.registeredAt(addrOf(at(0)));
  Status s = registrar.remove({at(0), at(100)});
  EXPECT_EQ(s.code(), Code::kNotRegistered);
  EXPECT_NE(s.message().find("addrs[1]"), std::string::npos) << s.message();
  EXPECT_EQ(registry.snapshot().size(), 2u);  // none removed
  EXPECT_FALSE(reg->torn_down.load());

  ASSERT_TRUE(registrar.remove({at(0)}).ok());
  EXPECT_TRUE(reg->torn_down.load());
  EXPECT_FALSE(registry.find(addrOf(at(0))).has_value());
  auto buffers = registrar.buffers();
  ASSERT_EQ(buffers.size(), 1u);
  EXPECT_EQ(buffers[0].addr, addrOf(at(8192)));
  EXPECT_EQ(published.load(), 2);
  EXPECT_EQ(last_published.size(), 1u);
}

TEST_F(MemoryRegistrarTest, a_transport_added_later_gets_every_region_registered_so_far) {
  add("one");
  ASSERT_TRUE(registrar.add({{at(0), 4096, "cpu:0"}, {at(8192), 4096, "cpu:0"}}).ok());
  auto later = std::make_unique<NamedTransport>("later");
  bool adopted = false;
  ASSERT_TRUE(registrar.addTransport(*later, [&] { adopted = true; }).ok());
  EXPECT_TRUE(adopted);
  EXPECT_NE(later->registeredAt(addrOf(at(0))), nullptr);
  EXPECT_NE(later->registeredAt(addrOf(at(8192))), nullptr);
  auto r = registry.find(addrOf(at(8192)));
  ASSERT_TRUE(r.has_value() && r->registrations);
  ASSERT_EQ(r->registrations->size(), 2u);
  EXPECT_EQ((*r->registrations)[1].first, later.get());
  EXPECT_EQ(published.load(), 2);

  // One that refuses a region is not adopted, and nothing is published.
  auto refusing = std::make_unique<NamedTransport>("refusing", addrOf(at(8192)));
  adopted = false;
  Status s = registrar.addTransport(*refusing, [&] { adopted = true; });
  EXPECT_EQ(s.code(), Code::kIoError);
  EXPECT_EQ(s.message(), "refused by the test");
  EXPECT_FALSE(adopted);
  EXPECT_EQ(published.load(), 2);
}

TEST_F(MemoryRegistrarTest, threads_registering_and_unregistering_at_once_each_publish_once) {
  add("one");
  add("two");
  constexpr int kThreads = 4, kRounds = 100;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRounds; ++i) {
        void* p = at(size_t(t) * 8192 + size_t(i % 2) * 4096);
        if (!registrar.add({{p, 4096, "cpu:0"}}).ok()) ++failures;
        (void)registrar.buffers();
        if (!registrar.remove({p}).ok()) ++failures;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(published.load(), 2 * kThreads * kRounds);
  EXPECT_EQ(registry.snapshot().size(), 0u);
  EXPECT_TRUE(last_published.empty());
}

}  // namespace
}  // namespace hawser
