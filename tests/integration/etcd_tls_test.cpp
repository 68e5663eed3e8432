// etcd for real clusters: a real etcd started by the test with TLS (its
// certificates made here by openssl), client certificates required, and
// user/password authentication enabled. Engines publish, look up and watch
// through it; an expired token is renewed; a wrong password, a wrong CA, a
// missing or foreign client certificate, no credentials and a plain URI each
// fail init with kPermissionDenied naming the setting to fix; bad settings
// fail with kInvalidArgument naming the key; the password appears in no
// message and no log line.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>
#include <iterator>

#include "base/config.h"
#include "common/etcd_server.h"
#include "common/log_capture.h"
#include "common/tls_certs.h"
#include "common/tls_reset_relay.h"
#include "common/util.h"
#include "engine/access.h"
#include "hawser/engine.h"
#include "metadata/etcd_client.h"
#include "metadata/etcd_store.h"

#if HAWSER_HAVE_ETCD
namespace hawser::test {
namespace {

constexpr const char* kUser = "hawser";
constexpr const char* kPassword = "pw-Zq81!secret";
constexpr const char* kRootPassword = "root-Kx55-secret";

class EtcdTlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!EtcdServer::available() || !TlsCerts::missingReason().empty()) return;
    // Quick outage handling for the engines of this process.
    ::setenv("HAWSER_ETCD_LEASE_TTL_S", "3", 1);
    ::setenv("HAWSER_ETCD_TIMEOUT_MS", "2000", 1);
    ::setenv("HAWSER_ETCD_RETRIES", "1", 1);
    ::setenv("HAWSER_ETCD_BACKOFF_MAX_MS", "300", 1);
    dir_ = new TempDir("/tmp");
    certs_ = new TlsCerts;
    setup_error_ = certs_->generate(dir_->path);
    if (!setup_error_.empty()) return;
    etcd_ = new EtcdServer;
    etcd_->useTls({certs_->ca, certs_->server_cert, certs_->server_key, true, certs_->client_cert,
                   certs_->client_key});
    if (!etcd_->start()) {
      setup_error_ = "etcd with TLS did not start: " + etcd_->error();
      return;
    }
    setup_error_ = etcd_->enableAuth(kRootPassword, kUser, kPassword, "hawser/");
  }
  static void TearDownTestSuite() {
    delete etcd_;
    delete certs_;
    delete dir_;
    etcd_ = nullptr;
    certs_ = nullptr;
    dir_ = nullptr;
  }
  void SetUp() override {
    if (!EtcdServer::available()) GTEST_SKIP() << EtcdServer::missingReason();
    if (!TlsCerts::missingReason().empty()) GTEST_SKIP() << TlsCerts::missingReason();
    ASSERT_EQ(setup_error_, "");
  }

  // Every setting right: the CA, the client certificate, user and password.
  static EngineOptions good() {
    EngineOptions o;
    o.config = {{"etcd.ca_file", certs_->ca},
                {"etcd.cert_file", certs_->client_cert},
                {"etcd.key_file", certs_->client_key},
                {"etcd.user", kUser},
                {"etcd.password", kPassword}};
    return o;
  }
  static EngineOptions with(EngineOptions o, const std::string& key, const std::string& value) {
    o.config.erase(key);
    if (!value.empty()) o.config[key] = value;
    return o;
  }
  static Status init(TransferEngine& e, const std::string& name, const EngineOptions& o,
                     const std::string& uri = "") {
    return e.init(uri.empty() ? etcd_->uri() : uri, name, "127.0.0.1", 0, o);
  }
  // A client that connects as `user` (root: the harness's own credentials).
  static etcd::Security security(const std::string& user, const std::string& password) {
    etcd::Security s;
    s.tls = true;
    s.ca_file = certs_->ca;
    s.cert_file = certs_->client_cert;
    s.key_file = certs_->client_key;
    s.user = user;
    s.password = password;
    return s;
  }

  static TempDir* dir_;
  static TlsCerts* certs_;
  static EtcdServer* etcd_;
  static std::string setup_error_;
};

TempDir* EtcdTlsTest::dir_ = nullptr;
TlsCerts* EtcdTlsTest::certs_ = nullptr;
EtcdServer* EtcdTlsTest::etcd_ = nullptr;
std::string EtcdTlsTest::setup_error_;

Status move(TransferEngine& e, OpCode op, void* local, SegmentID seg, uint64_t remote, size_t len) {
  Status submit;
  auto st = runBatch(e, seg, {TransferRequest{op, local, seg, remote, len}}, 20000, &submit);
  if (!submit.ok()) return submit;
  if (st.size() != 1 || st[0].s != TransferState::kCompleted)
    return Status(Code::kIoError, "task did not complete: " + (st.empty() ? std::string() : st[0].error.toString()));
  return Status::OK();
}

TEST_F(EtcdTlsTest, engines_publish_look_up_and_watch_through_tls_and_auth) {
  constexpr size_t kLen = 256 << 10;
  Buffer am(kLen), bm(kLen), later(kLen);
  TransferEngine a, b;
  Status s = init(a, "tls-node-a", good());
  ASSERT_TRUE(s.ok()) << s.toString();
  ASSERT_TRUE((s = init(b, "tls-node-b", good())).ok()) << s.toString();
  fillPattern(bm.p, kLen, 21);
  ASSERT_TRUE(b.registerLocalMemory(bm.p, kLen).ok());
  ASSERT_TRUE(a.registerLocalMemory(am.p, kLen).ok());
  SegmentID seg = kInvalidSegment;
  ASSERT_TRUE((s = a.openSegment("tls-node-b", seg)).ok()) << s.toString();
  ASSERT_TRUE((s = move(a, OpCode::kRead, am.p, seg, reinterpret_cast<uint64_t>(bm.p), kLen)).ok()) << s.toString();
  EXPECT_EQ(checkPattern(am.p, kLen, 21), -1);

  // The watch (through TLS, with the token) tells A that B's descriptor changed.
  SegmentDesc before;
  auto* store = detail::EngineAccess::of(a).store();
  ASSERT_TRUE(store->getSegment("tls-node-b", before).ok());
  ASSERT_FALSE(store->mayHaveChanged("tls-node-b", before.generation));
  fillPattern(later.p, kLen, 22);
  ASSERT_TRUE(b.registerLocalMemory(later.p, kLen).ok());
  EXPECT_TRUE(eventually([&] { return store->mayHaveChanged("tls-node-b", before.generation); }))
      << "the watch did not report B's new descriptor";
  ASSERT_TRUE((s = move(a, OpCode::kRead, am.p, seg, reinterpret_cast<uint64_t>(later.p), kLen)).ok())
      << s.toString();
  EXPECT_EQ(checkPattern(am.p, kLen, 22), -1);

  // The key is where the role may write, read back by root over TLS.
  etcd::Client root({etcd::Endpoint{"127.0.0.1", etcd_->clientPort()}},
                    etcd::Options{.security = security("root", kRootPassword)});
  std::optional<etcd::KeyValue> kv;
  ASSERT_TRUE((s = root.get("hawser/segments/tls-node-b", kv)).ok()) << s.toString();
  ASSERT_TRUE(kv.has_value());
  EXPECT_NE(kv->value.find("\"buffers\""), std::string::npos);
  EXPECT_EQ(root.authentications(), 1u);
}

TEST_F(EtcdTlsTest, an_invalidated_token_is_renewed_and_the_engines_carry_on) {
  constexpr size_t kLen = 64 << 10;
  Buffer am(kLen), bm(kLen), later(kLen);
  etcd::Client c({etcd::Endpoint{"127.0.0.1", etcd_->clientPort()}},
                 etcd::Options{.security = security(kUser, kPassword)});
  Status s = c.put("hawser/renew-probe", "1");
  ASSERT_TRUE(s.ok()) << s.toString();
  EXPECT_EQ(c.authentications(), 1u);
  TransferEngine a, b;
  ASSERT_TRUE((s = init(a, "renew-a", good())).ok()) << s.toString();
  ASSERT_TRUE((s = init(b, "renew-b", good())).ok()) << s.toString();
  ASSERT_TRUE(b.registerLocalMemory(bm.p, kLen).ok());
  ASSERT_TRUE(a.registerLocalMemory(am.p, kLen).ok());
  SegmentID seg = kInvalidSegment;
  ASSERT_TRUE((s = a.openSegment("renew-b", seg)).ok()) << s.toString();

  // etcd keeps its simple tokens in memory: after a restart every token is
  // "invalid auth token".
  ASSERT_TRUE(etcd_->restart()) << etcd_->error();
  std::optional<etcd::KeyValue> kv;
  ASSERT_TRUE((s = c.get("hawser/renew-probe", kv)).ok()) << s.toString();
  ASSERT_TRUE(kv.has_value());
  EXPECT_EQ(c.authentications(), 2u) << "the client should have authenticated once more";

  // The engines' keepalive, watch and lookups authenticate again by themselves.
  SegmentDesc before;
  auto* store = detail::EngineAccess::of(a).store();
  ASSERT_TRUE((s = store->getSegment("renew-b", before)).ok()) << s.toString();
  fillPattern(later.p, kLen, 5);
  ASSERT_TRUE((s = b.registerLocalMemory(later.p, kLen)).ok()) << s.toString();
  EXPECT_TRUE(eventually([&] { return store->mayHaveChanged("renew-b", before.generation); }))
      << "no change seen through the watch after the restart";
  ASSERT_TRUE((s = move(a, OpCode::kRead, am.p, seg, reinterpret_cast<uint64_t>(later.p), kLen)).ok())
      << s.toString();
  EXPECT_EQ(checkPattern(am.p, kLen, 5), -1);
}

TEST_F(EtcdTlsTest, password_from_a_file_or_the_environment) {
  const std::string pw_file = dir_->path + "/password";
  {
    std::ofstream f(pw_file);
    f << kPassword << "\n";
  }
  TransferEngine a;
  Status s = init(a, "pw-file", with(with(good(), "etcd.password", ""), "etcd.password_file", pw_file));
  EXPECT_TRUE(s.ok()) << s.toString();
  ::setenv("HAWSER_ETCD_PASSWORD", kPassword, 1);
  TransferEngine b;
  s = init(b, "pw-env", with(good(), "etcd.password", ""));
  ::unsetenv("HAWSER_ETCD_PASSWORD");
  EXPECT_TRUE(s.ok()) << s.toString();
}

TEST_F(EtcdTlsTest, wrong_password_is_permission_denied_naming_the_user_and_settings_never_the_password) {
  LogCapture logs;
  TransferEngine e;
  const std::string wrong = "not-the-Password-77";
  Status s = init(e, "bad-pw", with(good(), "etcd.password", wrong));
  ASSERT_EQ(s.code(), Code::kPermissionDenied) << s.toString();
  EXPECT_NE(s.message().find("etcd.user ('hawser')"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("etcd.password"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("invalid user ID or password"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find(wrong), std::string::npos) << "the password leaked into the error";
  // Nor in what a successful engine logs, at debug level.
  TransferEngine ok;
  EngineOptions o = with(good(), "log.level", "debug");
  ASSERT_TRUE(init(ok, "good-pw", o).ok());
  const std::string text = logs.text();
  EXPECT_EQ(text.find(wrong), std::string::npos);
  EXPECT_EQ(text.find(kPassword), std::string::npos);
}

TEST_F(EtcdTlsTest, a_ca_that_did_not_sign_etcd_is_permission_denied_naming_etcd_ca_file) {
  TransferEngine e;
  Status s = init(e, "bad-ca", with(good(), "etcd.ca_file", certs_->other_ca));
  ASSERT_EQ(s.code(), Code::kPermissionDenied) << s.toString();
  EXPECT_NE(s.message().find("etcd's TLS certificate is not trusted by etcd.ca_file '" + certs_->other_ca + "'"),
            std::string::npos)
      << s.message();
}

TEST_F(EtcdTlsTest, no_client_certificate_is_permission_denied_naming_etcd_cert_file) {
  TransferEngine e;
  Status s = init(e, "no-cert", with(with(good(), "etcd.cert_file", ""), "etcd.key_file", ""));
  ASSERT_EQ(s.code(), Code::kPermissionDenied) << s.toString();
  EXPECT_NE(s.message().find("etcd requires a client certificate"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("set etcd.cert_file and etcd.key_file"), std::string::npos) << s.message();
}

TEST_F(EtcdTlsTest, a_client_certificate_of_another_ca_is_permission_denied_naming_it) {
  TransferEngine e;
  Status s = init(e, "other-cert",
                  with(with(good(), "etcd.cert_file", certs_->other_client_cert), "etcd.key_file",
                       certs_->other_client_key));
  ASSERT_EQ(s.code(), Code::kPermissionDenied) << s.toString();
  EXPECT_NE(s.message().find("etcd refused the client certificate etcd.cert_file '" + certs_->other_client_cert + "'"),
            std::string::npos)
      << s.message();
}

TEST_F(EtcdTlsTest, a_certificate_refused_after_the_handshake_is_still_permission_denied_naming_it) {
  // Under TLS 1.3 etcd refuses a client certificate after the client has
  // finished its handshake and sent its request; its alert may then lose the
  // race with its close, and the client sees only a broken connection. The
  // relay makes that happen every time. The client then tries one TLS 1.2
  // handshake, where the refusal is part of the handshake, to name the setting.
  TlsResetRelay relay;
  ASSERT_TRUE(relay.start(etcd_->clientPort())) << relay.error();
  const std::string uri = "etcds://127.0.0.1:" + std::to_string(relay.port());
  struct Case {
    EngineOptions options;
    std::string needle;
  };
  const Case cases[] = {
      {with(with(good(), "etcd.cert_file", certs_->other_client_cert), "etcd.key_file", certs_->other_client_key),
       "etcd refused the client certificate etcd.cert_file '" + certs_->other_client_cert + "'"},
      {with(with(good(), "etcd.cert_file", ""), "etcd.key_file", ""),
       "etcd requires a client certificate (etcd --client-cert-auth): set etcd.cert_file and etcd.key_file"},
  };
  for (const Case& c : cases) {
    const uint64_t resets = relay.resets();
    TransferEngine e;
    Status s = init(e, "relay-cert", c.options, uri);
    EXPECT_GT(relay.resets(), resets) << "the relay passed etcd's alert on: not the case under test";
    EXPECT_EQ(s.code(), Code::kPermissionDenied) << s.toString();
    EXPECT_NE(s.message().find(c.needle), std::string::npos) << s.message();
  }
  // The relay itself passes a good client through.
  TransferEngine ok;
  Status s = init(ok, "relay-good", good(), uri);
  EXPECT_TRUE(s.ok()) << s.toString();
}

TEST_F(EtcdTlsTest, a_client_certificate_with_a_common_name_is_permission_denied_saying_why) {
  TransferEngine e;
  Status s = init(e, "cn-cert",
                  with(with(good(), "etcd.cert_file", certs_->cn_client_cert), "etcd.key_file", certs_->cn_client_key));
  ASSERT_EQ(s.code(), Code::kPermissionDenied) << s.toString();
  EXPECT_NE(s.message().find("etcd refuses the client certificate etcd.cert_file '" + certs_->cn_client_cert +
                             "' on its HTTP gateway because it has a CommonName"),
            std::string::npos)
      << s.message();
}

TEST_F(EtcdTlsTest, no_credentials_against_etcd_with_auth_is_permission_denied_saying_what_to_set) {
  TransferEngine e;
  Status s = init(e, "no-user", with(with(good(), "etcd.user", ""), "etcd.password", ""));
  ASSERT_EQ(s.code(), Code::kPermissionDenied) << s.toString();
  EXPECT_NE(s.message().find("set etcd.user and etcd.password"), std::string::npos) << s.message();
}

TEST_F(EtcdTlsTest, a_plain_uri_to_a_tls_etcd_says_to_use_etcds) {
  // etcd closes a plain HTTP request on its TLS port without a reply: that
  // may also be a server going down, so it stays kUnavailable (retried),
  // with the hint.
  TransferEngine e;
  EngineOptions o = with(with(with(good(), "etcd.ca_file", ""), "etcd.cert_file", ""), "etcd.key_file", "");
  Status s = init(e, "plain", o, "etcd://" + etcd_->endpoint());
  ASSERT_EQ(s.code(), Code::kUnavailable) << s.toString();
  EXPECT_NE(s.message().find("if etcd serves TLS on this endpoint, use an etcds:// URI"), std::string::npos)
      << s.message();
}

TEST_F(EtcdTlsTest, bad_settings_are_invalid_argument_naming_the_key) {
  struct Case {
    EngineOptions options;
    std::string uri;
    std::string needle;
  };
  const std::string tls_uri = etcd_->uri();
  const std::string plain_uri = "etcd://" + etcd_->endpoint();
  const std::string missing = dir_->path + "/no-such-ca.pem";
  const std::string pw_file = dir_->path + "/pw2";
  std::ofstream(pw_file) << kPassword << "\n";
  const Case cases[] = {
      {with(good(), "etcd.key_file", ""), tls_uri, "etcd.cert_file (env HAWSER_ETCD_CERT_FILE) is set without etcd.key_file"},
      {with(good(), "etcd.ca_file", missing), tls_uri,
       "etcd.ca_file (env HAWSER_ETCD_CA_FILE) = '" + missing + "': cannot be read"},
      {good(), plain_uri, "etcd.ca_file (env HAWSER_ETCD_CA_FILE) = '" + certs_->ca + "': TLS settings need"},
      {with(good(), "etcd.password", ""), tls_uri, "etcd.user (env HAWSER_ETCD_USER) = 'hawser' has no password"},
      {with(good(), "etcd.user", ""), tls_uri, "an etcd password is set but etcd.user"},
      {with(good(), "etcd.password_file", pw_file), tls_uri, "are both set: keep one"},
  };
  for (const Case& c : cases) {
    TransferEngine e;
    Status s = init(e, "bad-settings", c.options, c.uri);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.toString();
    EXPECT_NE(s.message().find(c.needle), std::string::npos) << s.message();
    EXPECT_EQ(s.message().find(kPassword), std::string::npos) << s.message();
  }
}

TEST(EtcdConfig, hawser_config_shows_the_password_masked) {
  Child c;
  ASSERT_TRUE(c.start({"config", "etcd.password", "etcd.user"},
                      {"HAWSER_ETCD_PASSWORD=abc-Secret-9", "HAWSER_ETCD_USER=someone"}));
  ASSERT_EQ(c.wait(), 0);
  std::ifstream in(c.out_path);
  const std::string out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(out.find("etcd.password = '(set, hidden)' (environment)"), std::string::npos) << out;
  EXPECT_NE(out.find("etcd.user = 'someone' (environment)"), std::string::npos) << out;
  EXPECT_EQ(out.find("abc-Secret-9"), std::string::npos) << out;
}

TEST(EtcdUri, etcds_is_tls_and_other_schemes_are_refused_naming_both) {
  std::vector<etcd::Endpoint> eps;
  bool tls = false;
  ASSERT_TRUE(etcd::parseUri("etcds://a:1,b:2", eps, &tls).ok());
  EXPECT_TRUE(tls);
  EXPECT_EQ(eps.size(), 2u);
  ASSERT_TRUE(etcd::parseUri("etcd://a:1", eps, &tls).ok());
  EXPECT_FALSE(tls);
  Status s = etcd::parseUri("etcdx://a:1", eps, &tls);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("etcds://"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace hawser::test
#else
TEST(EtcdTls, not_built) { GTEST_SKIP() << "built without etcd support (HAWSER_WITH_ETCD=OFF)"; }
#endif
