// The knob tables (base/knob.h; the base rows in base/config_table.h, each
// transport's in its folder) and their registry (base/knob_registry.h),
// Config's strict getters, the public config API (hawser/config.h), and
// init()'s validation of every value.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "base/config.h"
#include "base/knob_registry.h"
#include "base/log.h"
#include "hawser/config.h"
#include "hawser/engine.h"
#include "transport/file/file_config.h"
#include "transport/tcp/tcp_config.h"

namespace hawser {
namespace {

// Sets environment variables for one test; restores them after.
class EnvGuard {
 public:
  EnvGuard() = default;
  EnvGuard(std::initializer_list<std::pair<std::string, std::string>> vars) {
    for (auto& [k, v] : vars) set(k, v);
  }
  void set(const std::string& k, const std::string& v) {
    const char* old = ::getenv(k.c_str());
    saved_.emplace_back(k, old ? std::optional<std::string>(old) : std::nullopt);
    ::setenv(k.c_str(), v.c_str(), 1);
  }
  ~EnvGuard() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      if (it->second) {
        ::setenv(it->first.c_str(), it->second->c_str(), 1);
      } else {
        ::unsetenv(it->first.c_str());
      }
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// ---- sizes --------------------------------------------------------------------------------------

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

// ---- the table ----------------------------------------------------------------------------------

TEST(ConfigTable, no_key_or_env_name_is_in_two_tables) {
  std::map<std::string_view, std::string_view> keys, envs;  // -> owner
  for (const RegisteredKnobTable& t : knobTables())
    for (const Knob& k : t.rows) {
      auto [kit, knew] = keys.emplace(k.key, t.owner);
      EXPECT_TRUE(knew) << "key " << k.key << " of " << t.owner << " is also " << kit->second << "'s";
      auto [eit, enew] = envs.emplace(k.env, t.owner);
      EXPECT_TRUE(enew) << "env " << k.env << " of " << t.owner << " is also " << eit->second << "'s";
    }
  // The build's own check (the generated list of built-in transports
  // static_asserts it) names the first shared name.
  static constexpr Knob kTwin[] = {
      {"tcp.connections", "HAWSER_TWIN_CONNECTIONS", KnobType::kInt, "1", 1, 2, {}, "a duplicate key"}};
  static constexpr Knob kEnvTwin[] = {
      {"twin.connections", "HAWSER_TCP_CONNECTIONS", KnobType::kInt, "1", 1, 2, {}, "a duplicate env name"}};
  static constexpr KnobTable kDupKey[] = {{"tcp", kTcpKnobs}, {"twin", kTwin}};
  static constexpr KnobTable kDupEnv[] = {{"tcp", kTcpKnobs}, {"twin", kEnvTwin}};
  static constexpr KnobTable kDisjoint[] = {{"base", kKnobs}, {"tcp", kTcpKnobs}, {"file", kFileKnobs}};
  static_assert(firstSharedKnobName(kDupKey) == "tcp.connections");
  static_assert(firstSharedKnobName(kDupEnv) == "HAWSER_TCP_CONNECTIONS");
  static_assert(firstSharedKnobName(kDisjoint).empty());
  // The registry refuses such a table at run time, naming the key and its owner.
  Status s = registerKnobTable({"twin", kTwin});
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_TRUE(has(s.message(), "tcp.connections") && has(s.message(), "already tcp's")) << s.message();
  s = registerKnobTable({"twin", kEnvTwin});
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_TRUE(has(s.message(), "HAWSER_TCP_CONNECTIONS")) << s.message();
  EXPECT_EQ(registerKnobTable({"tcp", kEnvTwin}).code(), Code::kInvalidArgument);  // an owner twice
  EXPECT_EQ(findKnob("twin.connections"), nullptr);  // nothing of a refused table was added
}

TEST(ConfigTable, every_transport_of_the_build_has_its_table_registered_and_listed) {
  auto tables = knobTables();
  ASSERT_FALSE(tables.empty());
  EXPECT_EQ(tables[0].owner, "base");
  EXPECT_EQ(tables[0].rows.data(), kKnobs);
  auto owned = [&](std::string_view owner) -> std::span<const Knob> {
    for (const RegisteredKnobTable& t : tables)
      if (t.owner == owner) return t.rows;
    return {};
  };
  // The rows registered are the folder's own (no copy).
  EXPECT_EQ(owned("tcp").data(), kTcpKnobs);
  EXPECT_EQ(owned("tcp").size(), std::size(kTcpKnobs));
  EXPECT_EQ(owned("file").data(), kFileKnobs);
  for (const char* t : {"tcp", "shm", "nvlink", "file"}) EXPECT_FALSE(owned(t).empty()) << t;
#ifdef HAWSER_HAVE_RDMA
  EXPECT_FALSE(owned("rdma").empty());
#endif
  // configKeys() (`hawser config`) lists every row of every table, base first.
  auto keys = configKeys();
  std::set<std::string> listed;
  for (auto& k : keys) listed.insert(k.key);
  for (const RegisteredKnobTable& t : tables)
    for (const Knob& k : t.rows) EXPECT_TRUE(listed.count(std::string(k.key))) << k.key;
  ASSERT_FALSE(keys.empty());
  EXPECT_EQ(keys.front().key, kKnobs[0].key);
  // Each transport's keys are under its own prefix.
  for (const RegisteredKnobTable& t : tables) {
    if (t.owner == "base") continue;
    for (const Knob& k : t.rows) EXPECT_TRUE(k.key.starts_with(t.owner + ".")) << k.key;
  }
}

// A key of a component that is not in the process (a transport this build
// lacks) is unknown: init refuses it, the environment's is only reported;
// once its table is registered it is a key like any other.
TEST(ConfigTable, a_key_of_a_table_not_registered_is_unknown) {
  static constexpr Knob kProbe[] = {
      {"probe.depth", "HAWSER_PROBE_DEPTH", KnobType::kInt, "4", 1, 16, {}, "a knob of a transport not built"}};
  EnvGuard env{{"HAWSER_PROBE_DEPTH", "8"}};
  Config c;
  c.set("probe.depth", "8");
  Status s = c.validate();
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_TRUE(has(s.message(), "'probe.depth'")) << s.message();
  KnobValue v;
  EXPECT_EQ(c.lookup("probe.depth", v).code(), Code::kInvalidArgument);
  std::vector<std::string> unknown;
  (void)Config::fromEnv(&unknown);
  EXPECT_EQ(std::count(unknown.begin(), unknown.end(), "HAWSER_PROBE_DEPTH"), 1);

  ASSERT_TRUE(registerKnobTable({"probe", kProbe}).ok());
  EXPECT_TRUE(c.validate().ok());
  ASSERT_TRUE(c.lookup("probe.depth", v).ok());
  EXPECT_EQ(v.number, 8);
  unknown.clear();
  Config e = Config::fromEnv(&unknown);
  EXPECT_EQ(std::count(unknown.begin(), unknown.end(), "HAWSER_PROBE_DEPTH"), 0);
  ConfigSource src = ConfigSource::kDefault;
  ASSERT_TRUE(e.lookup("probe.depth", v, &src).ok());
  EXPECT_EQ(src, ConfigSource::kEnvironment);
  c.set("probe.depth", "17");
  s = c.validate();
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_TRUE(has(s.message(), "probe.depth (env HAWSER_PROBE_DEPTH) = '17'")) << s.message();
  EXPECT_TRUE(unregisterKnobTable("probe"));
  EXPECT_FALSE(unregisterKnobTable("probe"));
  EXPECT_FALSE(unregisterKnobTable("base"));  // the base table stays
  EXPECT_EQ(findKnob("probe.depth"), nullptr);
  EXPECT_NE(findKnob("rpc.timeout_ms"), nullptr);
}

TEST(ConfigTable, env_names_follow_the_key) {
  for (const Knob* k : allKnobs()) EXPECT_EQ(k->env, Config::envName(std::string(k->key))) << k->key;
  // envName of a key not in the table: the same rule.
  EXPECT_EQ(Config::envName("x.max_io_size"), "HAWSER_X_MAX_IO_SIZE");
}

TEST(ConfigTable, every_default_is_valid_and_every_key_documented) {
  for (const Knob* row : allKnobs()) {
    const Knob& k = *row;
    KnobValue v;
    Status s = parseKnob(k, k.def, "the default", v);
    EXPECT_TRUE(s.ok()) << k.key << ": " << s.toString();
    EXPECT_FALSE(k.doc.empty()) << k.key;
    if (k.type == KnobType::kInt || k.type == KnobType::kSize || k.type == KnobType::kDurationMs) {
      EXPECT_LE(k.lo, k.hi) << k.key;
    }
    if (k.type == KnobType::kEnum) {
      EXPECT_FALSE(k.choices.empty()) << k.key;
    }
  }
}

TEST(ConfigTable, public_config_keys_mirror_the_tables) {
  auto keys = configKeys();
  auto rows = allKnobs();
  ASSERT_EQ(keys.size(), rows.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(keys[i].key, rows[i]->key);
    EXPECT_EQ(keys[i].env, rows[i]->env);
    EXPECT_EQ(keys[i].default_value, rows[i]->def);
  }
  const Knob* tcp = findKnob("tcp.max_frame");
  ASSERT_NE(tcp, nullptr);
  EXPECT_EQ(knobRangeText(*tcp), "4K..1G");
  EXPECT_EQ(knobRangeText(*findKnob("file.engine")), "auto|uring|posix");
}

// Every config key the sources use is in the table: keys given to the
// getters are checked when they compile (KnobKey); this scans for the rest
// (public configValue()/configInt() calls, EngineOptions::config["..."],
// HAWSER_* names in code, messages and comments).
TEST(ConfigTable, every_key_used_in_the_sources_is_in_the_table) {
  namespace fs = std::filesystem;
  // Scanned by hand, not with std::regex over whole files: that took over
  // a minute in the unoptimized sanitizer build.
  auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  // Every string literal opening the argument list of `call` (after
  // optional whitespace) at a word boundary.
  auto quotedAfter = [&](const std::string& text, const std::string& call, auto&& each) {
    for (size_t at = text.find(call); at != std::string::npos; at = text.find(call, at + 1)) {
      if (at > 0 && word(text[at - 1])) continue;
      size_t q = at + call.size();
      while (q < text.size() && std::isspace(static_cast<unsigned char>(text[q]))) ++q;
      if (q >= text.size() || text[q] != '"') continue;
      const size_t end = text.find('"', q + 1);
      if (end == std::string::npos || end == q + 1) continue;
      each(text.substr(q + 1, end - q - 1));
    }
  };
  const char* const kGetters[] = {"getInt(",   "getSize(",     "getBool(",   "getString(", "getDuration(",
                                  "lookup(",   "configValue(", "configInt(", "configBool("};
  const std::regex not_config(
      "^HAWSER_(HAVE|WITH)_[A-Z0-9_]+$|^HAWSER_PY_VERSION$|^HAWSER_(TEST|SOFTVERBS|FAKE)_[A-Z0-9_]*$");  // test tools

  // Names the public headers define (the C API's HAWSER_E_* codes and state
  // numbers) are identifiers, not environment variables.
  std::string public_defs;
  for (auto& e : fs::directory_iterator(fs::path(HAWSER_SOURCE_DIR) / "include" / "hawser")) {
    std::ifstream in(e.path());
    std::stringstream ss;
    ss << in.rdbuf();
    public_defs += ss.str();
  }
  // And so are the macros the internal headers define (base/tsan.h's
  // HAWSER_TSAN, used by files that include it).
  for (auto& e : fs::recursive_directory_iterator(fs::path(HAWSER_SOURCE_DIR) / "src")) {
    if (!e.is_regular_file() || e.path().extension() != ".h") continue;
    std::ifstream in(e.path());
    for (std::string line; std::getline(in, line);)
      if (line.rfind("#define HAWSER_", 0) == 0) public_defs += line + "\n";
  }
  auto defined_publicly = [&](const std::string& name) {
    return public_defs.find("#define " + name + " ") != std::string::npos ||
           public_defs.find(" " + name + " =") != std::string::npos;
  };

  std::vector<std::string> missing;
  size_t files = 0;
  for (const char* dir : {"src", "tools", "python"}) {
    for (auto& e : fs::recursive_directory_iterator(fs::path(HAWSER_SOURCE_DIR) / dir)) {
      auto ext = e.path().extension();
      if (!e.is_regular_file() || (ext != ".cpp" && ext != ".h")) continue;
      ++files;
      std::ifstream in(e.path());
      std::stringstream ss;
      ss << in.rdbuf();
      const std::string text = ss.str();
      const std::string where = fs::relative(e.path(), HAWSER_SOURCE_DIR).string();
      auto check_key = [&](const std::string& key) {
        if (key.find_first_of("' +") != std::string::npos) return;  // a message built around an index
        if (!findKnob(key)) missing.push_back(where + ": key '" + key + "'");
      };
      for (const char* getter : kGetters) quotedAfter(text, getter, check_key);
      quotedAfter(text, "config[", check_key);
      const std::string prefix = "HAWSER_";
      for (size_t at = text.find(prefix); at != std::string::npos; at = text.find(prefix, at + 1)) {
        if (at > 0 && word(text[at - 1])) continue;
        size_t end = at + prefix.size();
        while (end < text.size() && (std::isupper(static_cast<unsigned char>(text[end])) ||
                                     std::isdigit(static_cast<unsigned char>(text[end])) || text[end] == '_'))
          ++end;
        if (end == at + prefix.size() || (end < text.size() && word(text[end]))) continue;
        const std::string name = text.substr(at, end - at);
        const bool macro = text.find("#define " + name) != std::string::npos;  // HAWSER_FILE_COUNTER(x)
        if (!macro && !defined_publicly(name) && !std::regex_match(name, not_config) && !findKnobByEnv(name))
          missing.push_back(where + ": environment variable " + name);
      }
    }
  }
  EXPECT_GT(files, 20u);
  EXPECT_TRUE(missing.empty()) << "in no knob table of this build:\n" << [&] {
    std::string s;
    for (auto& m : missing) s += "  " + m + "\n";
    return s;
  }();
}

// ---- Config's getters ---------------------------------------------------------------------------

TEST(Config, defaults_apply_when_nothing_is_set) {
  Config c;
  const TcpConfig tcp(c);
  const FileConfig file(c);
  int64_t conns = 0;
  uint64_t frame = 0;
  bool direct = false;
  std::string engine;
  std::chrono::milliseconds t{0};
  ASSERT_TRUE(tcp.getInt("tcp.connections", conns).ok());
  ASSERT_TRUE(tcp.getSize("tcp.max_frame", frame).ok());
  ASSERT_TRUE(file.getBool("file.direct", direct).ok());
  ASSERT_TRUE(file.getString("file.engine", engine).ok());
  ASSERT_TRUE(c.getDuration("rpc.timeout_ms", t).ok());
  EXPECT_EQ(conns, 2);
  EXPECT_EQ(frame, 64u << 20);
  EXPECT_TRUE(direct);
  EXPECT_EQ(engine, "auto");
  EXPECT_EQ(t, std::chrono::milliseconds(5000));
}

TEST(Config, env_overrides_default_and_set_overrides_env) {
  EnvGuard env{{"HAWSER_TCP_CONNECTIONS", "7"}};
  Config c = Config::fromEnv();
  int64_t v = 0;
  ASSERT_TRUE(TcpConfig(c).getInt("tcp.connections", v).ok());
  EXPECT_EQ(v, 7);
  c.set("tcp.connections", "9");
  ASSERT_TRUE(TcpConfig(c).getInt("tcp.connections", v).ok());
  EXPECT_EQ(v, 9);
}

TEST(Config, keys_with_underscores_read_their_env_name) {
  EnvGuard env{{"HAWSER_FILE_MAX_IO_SIZE", "2M"}};
  std::vector<std::string> unknown;
  Config c = Config::fromEnv(&unknown);
  uint64_t v = 0;
  ASSERT_TRUE(FileConfig(c).getSize("file.max_io_size", v).ok());
  EXPECT_EQ(v, 2u << 20);
  EXPECT_EQ(std::count(unknown.begin(), unknown.end(), "HAWSER_FILE_MAX_IO_SIZE"), 0);
}

TEST(Config, size_suffixes_parse) {
  Config c;
  uint64_t v = 0;
  for (auto [text, want] : std::vector<std::pair<std::string, uint64_t>>{
           {"256K", 256u << 10}, {"2m", 2u << 20}, {"1G", 1u << 30}, {"8KiB", 8u << 10}, {"65536", 65536}}) {
    c.set("tcp.slice_size", text);
    ASSERT_TRUE(TcpConfig(c).getSize("tcp.slice_size", v).ok()) << text;
    EXPECT_EQ(v, want) << text;
  }
}

TEST(Config, a_bad_value_is_an_error_never_the_default) {
  Config c;
  c.set("batch.slices_per_task", "abc");
  uint64_t v = 0;
  Status s = c.getSize("batch.slices_per_task", v);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_TRUE(has(s.message(), "batch.slices_per_task")) << s.message();
  EXPECT_TRUE(has(s.message(), "HAWSER_BATCH_SLICES_PER_TASK")) << s.message();
  EXPECT_TRUE(has(s.message(), "'abc'")) << s.message();
  EXPECT_TRUE(has(s.message(), "a size in [1, 16M]")) << s.message();

  const FileConfig file(c);
  c.set("file.direct", "maybe");
  bool b = true;
  EXPECT_EQ(file.getBool("file.direct", b).code(), Code::kInvalidArgument);
  c.set("file.direct", "OFF");
  ASSERT_TRUE(file.getBool("file.direct", b).ok());
  EXPECT_FALSE(b);
  const TcpConfig tcp(c);
  c.set("tcp.connections", "12abc");
  int64_t i = 0;
  EXPECT_EQ(tcp.getInt("tcp.connections", i).code(), Code::kInvalidArgument);
  c.set("tcp.connections", "");
  EXPECT_EQ(tcp.getInt("tcp.connections", i).code(), Code::kInvalidArgument);
}

TEST(Config, validate_refuses_unknown_keys_and_bad_values) {
  Config c;
  c.set("tcp.conections", "2");
  Status s = c.validate();
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_TRUE(has(s.message(), "tcp.conections")) << s.message();
  Config d;
  d.set("log.level", "loud", ConfigSource::kEnvironment);
  s = d.validate();
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_TRUE(has(s.message(), "HAWSER_LOG_LEVEL")) << s.message();
  EXPECT_TRUE(has(s.message(), "the environment")) << s.message();
  EXPECT_TRUE(has(s.message(), "one of trace, debug, info, warn, error, off")) << s.message();
}

TEST(Config, enums_accept_any_case_and_return_the_canonical_value) {
  Config c;
  c.set("file.engine", "POSIX");
  std::string v;
  ASSERT_TRUE(FileConfig(c).getString("file.engine", v).ok());
  EXPECT_EQ(v, "posix");
}

// ---- public API ---------------------------------------------------------------------------------

TEST(ConfigApi, config_value_reads_options_then_env_then_default) {
  EnvGuard env{{"HAWSER_TCP_INFLIGHT", "32"}};
  EngineOptions o;
  int64_t v = 0;
  ConfigSource src;
  ASSERT_TRUE(configInt("tcp.inflight", o, v, &src).ok());
  EXPECT_EQ(v, 32);
  EXPECT_EQ(src, ConfigSource::kEnvironment);
  o.config["tcp.inflight"] = "16";
  ASSERT_TRUE(configInt("tcp.inflight", o, v, &src).ok());
  EXPECT_EQ(v, 16);
  EXPECT_EQ(src, ConfigSource::kOptions);
  ASSERT_TRUE(configInt("tcp.connections", o, v, &src).ok());
  EXPECT_EQ(v, 2);
  EXPECT_EQ(src, ConfigSource::kDefault);
  ASSERT_TRUE(configInt("python.managed_pool_size", o, v).ok());
  EXPECT_EQ(v, 64 << 20);
  std::string text;
  ASSERT_TRUE(configValue("transport", o, text).ok());
  EXPECT_EQ(text, "auto");
  bool b = false;
  ASSERT_TRUE(configBool("rdma.relaxed_ordering", o, b).ok());
  EXPECT_TRUE(b);
}

TEST(ConfigApi, unknown_key_wrong_type_and_bad_value_are_invalid_argument) {
  EngineOptions o;
  int64_t v = 0;
  bool b = false;
  EXPECT_EQ(configInt("tcp.nope", o, v).code(), Code::kInvalidArgument);
  EXPECT_EQ(configBool("tcp.connections", o, b).code(), Code::kInvalidArgument);
  o.config["python.sync_timeout_ms"] = "soon";
  Status s = configInt("python.sync_timeout_ms", o, v);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_TRUE(has(s.message(), "HAWSER_PYTHON_SYNC_TIMEOUT_MS")) << s.message();
  EXPECT_TRUE(has(s.message(), "EngineOptions::config")) << s.message();
  EXPECT_EQ(validateConfig(o).code(), Code::kInvalidArgument);
}

// ---- init() validates every value before anything starts ---------------------------------------

struct BadValue {
  std::string key, env, value, expected;
};

// One per type: junk, out of range, wrong type.
const std::vector<BadValue> kBadValues = {
    {"tcp.connections", "HAWSER_TCP_CONNECTIONS", "lots", "an integer in [1, 64]"},                  // int: junk
    {"tcp.connections", "HAWSER_TCP_CONNECTIONS", "65", "an integer in [1, 64]"},                    // int: range
    {"batch.slices_per_task", "HAWSER_BATCH_SLICES_PER_TASK", "abc", "a size in [1, 16M]"},          // size: junk
    {"batch.max_capacity", "HAWSER_BATCH_MAX_CAPACITY", "0", "a size in [1, 1G]"},                   // size: range
    {"tcp.slice_size", "HAWSER_TCP_SLICE_SIZE", "1.5M", "a size in [4K, 1G]"},                       // size: type
    {"file.direct", "HAWSER_FILE_DIRECT", "maybe", "true or false"},                                 // bool
    {"transport", "HAWSER_TRANSPORT", "carrier-pigeon", "expected auto or one of this build's transports"},
    {"file.engine", "HAWSER_FILE_ENGINE", "turbo", "one of auto, uring, posix"},                     // enum
    {"log.level", "HAWSER_LOG_LEVEL", "loud", "one of trace, debug"},                                // enum
    {"rpc.timeout_ms", "HAWSER_RPC_TIMEOUT_MS", "5s", "a duration in milliseconds in [10, 3600000]"},  // duration: type
    {"etcd.timeout_ms", "HAWSER_ETCD_TIMEOUT_MS", "1", "a duration in milliseconds in [10, 600000]"},  // duration: range
    {"python.sync_timeout_ms", "HAWSER_PYTHON_SYNC_TIMEOUT_MS", "-1", "a duration in milliseconds"},
    {"rdma.qps_per_peer", "HAWSER_RDMA_QPS_PER_PEER", "0", "an integer in [1, 64]"},
    {"file.io_depth", "HAWSER_FILE_IO_DEPTH", "deep", "an integer in [1, 4096]"},
};

void expectNamesAll(const Status& s, const BadValue& b, const std::string& origin) {
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.toString();
  EXPECT_TRUE(has(s.message(), b.key)) << s.message();
  EXPECT_TRUE(has(s.message(), b.env)) << s.message();
  EXPECT_TRUE(has(s.message(), "'" + b.value + "'")) << s.message();
  EXPECT_TRUE(has(s.message(), b.expected)) << s.message();
  EXPECT_TRUE(has(s.message(), origin)) << s.message();
}

TEST(ConfigInit, bad_value_from_the_environment_fails_init_naming_it) {
  for (const auto& b : kBadValues) {
    SCOPED_TRACE(b.env + "=" + b.value);
    EnvGuard env{{b.env, b.value}};
    TransferEngine e;
    expectNamesAll(e.init("p2p", "node-a", "127.0.0.1", 0), b, "the environment");
    EXPECT_EQ(e.rpcPort(), 0) << "nothing may start before the config is validated";
  }
}

TEST(ConfigInit, bad_value_from_options_fails_init_naming_it) {
  for (const auto& b : kBadValues) {
    SCOPED_TRACE(b.key + "=" + b.value);
    EngineOptions o;
    o.config[b.key] = b.value;
    TransferEngine e;
    expectNamesAll(e.init("p2p", "node-a", "127.0.0.1", 0, o), b, "EngineOptions::config");
    EXPECT_EQ(e.rpcPort(), 0);
  }
}

TEST(ConfigInit, options_win_over_a_bad_environment_value) {
  EnvGuard env{{"HAWSER_TCP_CONNECTIONS", "lots"}};
  EngineOptions o;
  o.config["tcp.connections"] = "3";
  TransferEngine e;
  EXPECT_TRUE(e.init("p2p", "node-a", "127.0.0.1", 0, o).ok());
}

TEST(ConfigInit, unknown_option_key_fails_init) {
  EngineOptions o;
  o.config["tcp.conections"] = "4";
  TransferEngine e;
  Status s = e.init("p2p", "node-a", "127.0.0.1", 0, o);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_TRUE(has(s.message(), "tcp.conections")) << s.message();
  EXPECT_TRUE(has(s.message(), "'4'")) << s.message();
}

TEST(ConfigInit, unknown_environment_variable_is_only_a_warning) {
  EnvGuard env{{"HAWSER_TCP_CONECTIONS", "4"}};
  TransferEngine e;
  EXPECT_TRUE(e.init("p2p", "node-a", "127.0.0.1", 0).ok());
}

TEST(ConfigInit, defaults_apply) {
  TransferEngine e;
  ASSERT_TRUE(e.init("p2p", "node-a", "127.0.0.1", 0).ok());
  EXPECT_EQ(logger().level(), spdlog::level::warn);
  BatchID b;
  EXPECT_TRUE(e.allocateBatchID(1 << 20, b).ok());  // batch.max_capacity default 1M
  EXPECT_TRUE(e.freeBatchID(b).ok());
  EXPECT_EQ(e.allocateBatchID((1 << 20) + 1, b).code(), Code::kInvalidArgument);
}

TEST(ConfigInit, log_level_is_applied_from_options_and_from_the_environment) {
  {
    EngineOptions o;
    o.config["log.level"] = "debug";
    TransferEngine e;
    ASSERT_TRUE(e.init("p2p", "node-a", "127.0.0.1", 0, o).ok());
    EXPECT_EQ(logger().level(), spdlog::level::debug);
  }
  {
    EnvGuard env{{"HAWSER_LOG_LEVEL", "error"}};
    TransferEngine e;
    ASSERT_TRUE(e.init("p2p", "node-a", "127.0.0.1", 0).ok());
    EXPECT_EQ(logger().level(), spdlog::level::err);
  }
  TransferEngine e;
  ASSERT_TRUE(e.init("p2p", "node-a", "127.0.0.1", 0).ok());
  EXPECT_EQ(logger().level(), spdlog::level::warn);
}

}  // namespace
}  // namespace hawser
