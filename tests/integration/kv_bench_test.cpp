// `hawser bench --layout kv` (tools/bench_kv.h): its options refused with
// exact messages, and runs over tcp, shm and a file segment whose JSON says
// which transport carried the KV block request and that every byte of every
// transfer was verified. Figures are benchmarks (bench/kv.sh), never
// asserted here.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "common/util.h"

namespace hawser::test {
namespace {

// `hawser bench ARGS` with stderr folded into the output.
int bench(const std::string& args, std::string* out, const std::string& env = "") {
  return sh(env + " " + hawserBin() + " bench " + args + " 2>&1", out);
}

struct Refused {
  std::string args;
  std::string message;  // the whole output
};

TEST(KvBench, bad_options_are_refused_with_exact_messages) {
  // Checked before any segment is opened: the target need not exist.
  const std::string t = "--target 127.0.0.1:1 ";
  const Refused cases[] = {
      {"--layout kv --layers 0", "hawser bench: --layers must be >= 1\n"},
      {"--layout kv --kv-blocks 0", "hawser bench: --kv-blocks must be >= 1\n"},
      {"--layout kv --kv-blocks 10 --kv-pool 5",
       "hawser bench: --kv-pool 5 is less than --kv-blocks 10: each side's pool holds the blocks moved\n"},
      {"--layout kv --block-size 3X", "hawser bench: --block-size '3X' is not a size\n"},
      {"--layout kv --op copy", "hawser bench: --op must be read or write, got 'copy'\n"},
      {"--layout kv --rounds 0", "hawser bench: --rounds must be >= 1\n"},
      {"--layout kv --local-location gpu0", "hawser bench: --local-location 'gpu0' is not cpu or cuda:N\n"},
      {"--layout kv --layers 1000000 --kv-blocks 1000000 --block-size 1G",
       "hawser bench: --layout kv of 1000000 layers x K/V x --kv-pool 2000000 blocks of 1073741824 B is too large\n"},
      {"--layout kv --blocks 4", "hawser bench: --layout kv takes --kv-blocks, not --blocks\n"},
      {"--layout kv --no-verify",
       "hawser bench: --layout kv verifies every byte of every transfer: drop --no-verify\n"},
      {"--layers 4", "hawser bench: --layers, --kv-blocks, --kv-pool and --kv-plan need --layout kv\n"},
      {"--blocks 4 --kv-pool 8", "hawser bench: --layers, --kv-blocks, --kv-pool and --kv-plan need --layout kv\n"},
      {"--kv-plan", "hawser bench: --layers, --kv-blocks, --kv-pool and --kv-plan need --layout kv\n"},
  };
  for (const auto& c : cases) {
    std::string out;
    EXPECT_EQ(bench(t + c.args, &out), 2) << c.args << ": " << out;
    EXPECT_EQ(out, c.message) << c.args;
  }
}

// A `hawser serve` target of host memory (with `env`, e.g. HAWSER_TRANSPORT=tcp).
class KvBenchTarget : public ::testing::Test {
 protected:
  void serve(uint64_t bytes, const std::vector<std::string>& env = {}) {
    ASSERT_TRUE(serve_.start({"serve", "--listen", "127.0.0.1:0", "--memory", std::to_string(bytes)}, env));
    const std::string seg = serve_.waitFor("segment: ", 20000);
    ASSERT_FALSE(seg.empty());
    ASSERT_FALSE(serve_.waitFor("ready", 20000).empty());
    segment_ = seg.substr(9);
  }
  // One --json run: its summary, after checking what every run must show.
  nlohmann::json run(const std::string& args, const std::string& env = "") {
    std::string out;
    const int rc = bench("--target " + segment_ + " --layout kv " + args + " --json", &out, env);
    EXPECT_EQ(rc, 0) << out;
    nlohmann::json j = nlohmann::json::parse(lastLine(out), nullptr, false);
    EXPECT_TRUE(j.is_object()) << out;
    return j.is_object() ? j : nlohmann::json::object();
  }
  Child serve_;
  std::string segment_;
};

// 2 layers x K/V x 16 blocks of 16 KiB: 64 chunks, 1 MiB; pools of 32 blocks (2 MiB a side).
constexpr const char* kSmall = "--layers 2 --kv-blocks 16 --block-size 16K --rounds 2";
constexpr uint64_t kSmallPool = 2 * 2 * 32 * 16384;

void expectVerifiedKv(const nlohmann::json& j, const std::string& op, const std::string& transport) {
  EXPECT_EQ(j["layout"], "kv") << j.dump();
  EXPECT_EQ(j["op"], op) << j.dump();
  EXPECT_EQ(j["chunks"], 64) << j.dump();
  EXPECT_EQ(j["bytes"], 64 * 16384) << j.dump();
  EXPECT_EQ(j["kv_pool"], 32) << j.dump();
  // Scattered differently on the two sides: hardly any chunk merges with the next.
  EXPECT_GT(j["kv_runs"].get<uint64_t>(), 32u) << j.dump();
  EXPECT_EQ(j["transports"], nlohmann::json::array({transport})) << j.dump();
  EXPECT_EQ(j["contiguous_transports"], nlohmann::json::array({transport})) << j.dump();
  EXPECT_TRUE(j["verified"].get<bool>()) << j.dump();
  EXPECT_EQ(j["warmup_transfers"], 1) << j.dump();
  // (1 warm-up + 2 rounds) x (KV, contiguous, 1 MiB requests)
  EXPECT_EQ(j["verified_transfers"], 9) << j.dump();
  EXPECT_EQ(j["kv_rounds_gbps"].size(), 2u) << j.dump();
  EXPECT_GT(j["kv_gbps"].get<double>(), 0) << j.dump();
  EXPECT_GT(j["contiguous_gbps"].get<double>(), 0) << j.dump();
  EXPECT_GT(j["ratio"].get<double>(), 0) << j.dump();
  // Host memory: no GPU copies (n/a where the transport does not count them).
  const std::string mech = j["copy_mechanism"];
  EXPECT_TRUE(mech == "n/a" || mech == "none") << j.dump();
}

TEST_F(KvBenchTarget, kv_layout_over_tcp_is_verified_and_carried_by_tcp) {
  ASSERT_NO_FATAL_FAILURE(serve(kSmallPool, {"HAWSER_TRANSPORT=tcp"}));
  for (const std::string op : {"read", "write"}) {
    nlohmann::json j = run(std::string(kSmall) + " --op " + op, "HAWSER_TRANSPORT=tcp");
    expectVerifiedKv(j, op, "tcp");
    EXPECT_EQ(j["submit"], "submitBlocks") << j.dump();
  }
}

TEST_F(KvBenchTarget, kv_layout_over_shm_is_verified_and_carried_by_shm) {
  ASSERT_NO_FATAL_FAILURE(serve(kSmallPool));
  for (const std::string op : {"read", "write"}) expectVerifiedKv(run(std::string(kSmall) + " --op " + op), op, "shm");
}

TEST_F(KvBenchTarget, kv_plan_posts_a_prepared_request_and_is_verified) {
  ASSERT_NO_FATAL_FAILURE(serve(kSmallPool));
  nlohmann::json j = run(std::string(kSmall) + " --op write --kv-plan");
  expectVerifiedKv(j, "write", "shm");
  EXPECT_EQ(j["submit"], "postPlan") << j.dump();
}

TEST_F(KvBenchTarget, the_text_summary_says_verified) {
  ASSERT_NO_FATAL_FAILURE(serve(kSmallPool));
  std::string out;
  ASSERT_EQ(bench("--target " + segment_ + " --layout kv " + kSmall, &out), 0) << out;
  EXPECT_NE(out.find("transport shm"), std::string::npos) << out;
  EXPECT_NE(out.find("verified: yes (every byte of 9 transfers)"), std::string::npos) << out;
}

TEST_F(KvBenchTarget, a_target_too_small_for_the_pools_is_refused_saying_what_it_needs) {
  ASSERT_NO_FATAL_FAILURE(serve(1 << 20));
  std::string out;
  EXPECT_EQ(bench("--target " + segment_ + " --layout kv " + kSmall, &out), 2) << out;
  EXPECT_EQ(lastLine(out),
            "hawser bench: the target's first buffer has 1048576 bytes; --layout kv of 2 layers x K/V x --kv-pool 32 "
            "blocks of 16384 B needs 2097152 (hawser serve --memory 2097152)\n")
      << out;
}

// A file segment: the chunks lie there one after another, the memory side scattered.
TEST(KvBench, kv_layout_against_a_file_is_verified_and_carried_by_file) {
  TempDir dir;
  const std::string path = dir.path + "/kv.bin";
  ASSERT_TRUE(writeFile(path, 64 * 16384, 0));
  for (const std::string op : {"read", "write"}) {
    std::string out;
    ASSERT_EQ(bench("--target file://" + path + " --layout kv " + kSmall + " --op " + op + " --json", &out), 0) << out;
    nlohmann::json j = nlohmann::json::parse(lastLine(out), nullptr, false);
    ASSERT_TRUE(j.is_object()) << out;
    EXPECT_EQ(j["target_kind"], "file") << j.dump();
    expectVerifiedKv(j, op, "file");
  }
  std::string out;
  EXPECT_EQ(bench("--target file://" + path + " --layout kv --layers 2 --kv-blocks 17 --block-size 16K", &out), 2);
  EXPECT_EQ(lastLine(out),
            "hawser bench: the file segment has 1048576 bytes; --layout kv of 68 chunks of 16384 B needs 1114112\n")
      << out;
}

}  // namespace
}  // namespace hawser::test
