// The software verbs provider enforces what an RC NIC enforces. These tests
// drive it through the same function table the rdma transport uses
// (verbs_api.h) and the header-inline ibv_post_send / ibv_poll_cq.
#include <gtest/gtest.h>

#if HAWSER_TEST_RDMA

#include <poll.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <thread>

#include "common/util.h"
#include "softverbs/soft_env.h"
#include "transport/rdma/rdma_context.h"
#include "transport/rdma/rdma_endpoint.h"
#include "transport/rdma/rdma_nic.h"
#include "transport/rdma/verbs_api.h"

using namespace hawser;
using namespace hawser::rdma;
using hawser::test::SoftVerbsEnv;

namespace {

struct Nic {
  ibv_context* ctx = nullptr;
  NicInfo info;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
};

class SoftVerbs : public ::testing::Test {
 protected:
  void SetUp() override {
    env_ = std::make_unique<SoftVerbsEnv>("sv0,sv1");
    ASSERT_TRUE(loadVerbs(test::softVerbsLib(), v_).ok());
  }
  void TearDown() override {
    for (auto& n : nics_) {
      if (n.cq) v_->destroy_cq(n.cq);
      if (n.pd) v_->dealloc_pd(n.pd);
      if (n.ctx) v_->close_device(n.ctx);
    }
    nics_.clear();
    env_.reset();
  }

  Nic& open(const std::string& name) {
    int n = 0;
    ibv_device** list = v_->get_device_list(&n);
    EXPECT_NE(list, nullptr);
    Nic nic;
    for (int i = 0; i < n; ++i) {
      if (name != v_->get_device_name(list[i])) continue;
      NicReport rep;
      Tunables t;
      Status s = inspectNic(*v_, list[i], t, nic.ctx, nic.info, rep);
      EXPECT_TRUE(s.ok()) << s.toString();
    }
    v_->free_device_list(list);
    EXPECT_NE(nic.ctx, nullptr) << name;
    nic.pd = v_->alloc_pd(nic.ctx);
    nic.cq = v_->create_cq(nic.ctx, 256, nullptr, nullptr, 0);
    nics_.push_back(nic);
    return nics_.back();
  }

  ibv_qp* makeQp(Nic& n, uint32_t max_wr = 64) {
    ibv_qp_init_attr ia{};
    ia.send_cq = n.cq;
    ia.recv_cq = n.cq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = max_wr;
    ia.cap.max_recv_wr = 1;
    ia.cap.max_send_sge = 1;
    ia.cap.max_recv_sge = 1;
    ibv_qp* q = v_->create_qp(n.pd, &ia);
    EXPECT_NE(q, nullptr);
    return q;
  }

  // a <-> b connected and in RTS.
  void connect(Nic& na, ibv_qp* a, Nic& nb, ibv_qp* b) {
    ASSERT_TRUE(qpToInit(*v_, a, na.info).ok());
    ASSERT_TRUE(qpToInit(*v_, b, nb.info).ok());
    RtrParams p;
    p.max_dest_rd_atomic = 16;
    p.mtu = IBV_MTU_4096;
    p.remote_qpn = b->qp_num;
    p.remote_psn = 7;
    p.remote_gid = nb.info.gid;
    p.remote_lid = nb.info.lid;
    ASSERT_TRUE(qpToRtr(*v_, a, na.info, p).ok());
    p.remote_qpn = a->qp_num;
    p.remote_psn = 9;
    p.remote_gid = na.info.gid;
    p.remote_lid = na.info.lid;
    ASSERT_TRUE(qpToRtr(*v_, b, nb.info, p).ok());
    ASSERT_TRUE(qpToRts(*v_, a, na.info, 9, 14, 7, 7, 16).ok());
    ASSERT_TRUE(qpToRts(*v_, b, nb.info, 7, 14, 7, 7, 16).ok());
  }

  int post(ibv_qp* qp, bool read, void* local, uint32_t len, uint32_t lkey, uint64_t raddr, uint32_t rkey,
           uint64_t id = 1) {
    ibv_sge sge{reinterpret_cast<uint64_t>(local), len, lkey};
    ibv_send_wr wr{};
    wr.wr_id = id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = read ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = rkey;
    ibv_send_wr* bad = nullptr;
    return ibv_post_send(qp, &wr, &bad);
  }

  // Waits (bounded) for `n` completions.
  std::vector<ibv_wc> reap(ibv_cq* cq, size_t n, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
    std::vector<ibv_wc> out;
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (out.size() < n && std::chrono::steady_clock::now() < deadline) {
      ibv_wc wc[8];
      int got = ibv_poll_cq(cq, 8, wc);
      for (int i = 0; i < got; ++i) out.push_back(wc[i]);
      if (got == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return out;
  }

  uint32_t state(ibv_qp* qp) {
    ibv_qp_attr a{};
    ibv_qp_init_attr ia{};
    v_->query_qp(qp, &a, IBV_QP_STATE, &ia);
    return a.qp_state;
  }

  // Raw bring-up with every wire attribute chosen by the test: RESET ->
  // INIT -> RTR towards `remote` (its QPN, the GID at `dgid_index` of its
  // NIC, the PSN it sends first) -> RTS with `sq_psn`.
  struct Wire {
    ibv_mtu mtu = IBV_MTU_4096;
    uint32_t rq_psn = 0, sq_psn = 0;
    uint8_t max_dest_rd_atomic = 16, max_rd_atomic = 16;
    int sgid_index = -1;  // -1: the NIC's chosen index
    ibv_gid dgid{};
  };
  int bringUp(Nic& n, ibv_qp* q, uint32_t remote_qpn, const Wire& w) {
    if (!qpToInit(*v_, q, n.info).ok()) return -1;
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = w.mtu;
    a.dest_qp_num = remote_qpn;
    a.rq_psn = w.rq_psn;
    a.max_dest_rd_atomic = w.max_dest_rd_atomic;
    a.min_rnr_timer = 12;
    a.ah_attr.port_num = 1;
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = w.dgid;
    a.ah_attr.grh.sgid_index = static_cast<uint8_t>(w.sgid_index >= 0 ? w.sgid_index : n.info.gid_index);
    a.ah_attr.grh.hop_limit = 64;
    int rc = v_->modify_qp(q, &a,
                           IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                               IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (rc != 0) return rc;
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.sq_psn = w.sq_psn;
    a.max_rd_atomic = w.max_rd_atomic;
    return v_->modify_qp(q, &a,
                         IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                             IBV_QP_MAX_QP_RD_ATOMIC);
  }
  // Both ends of a pair, each end's wire attributes as given (dgid filled
  // with the other NIC's chosen GID unless the test set one).
  void pair(Nic& na, ibv_qp* a, Wire wa, Nic& nb, ibv_qp* b, Wire wb) {
    if (gidZero(wa.dgid)) wa.dgid = nb.info.gid;
    if (gidZero(wb.dgid)) wb.dgid = na.info.gid;
    ASSERT_EQ(bringUp(na, a, b->qp_num, wa), 0);
    ASSERT_EQ(bringUp(nb, b, a->qp_num, wb), 0);
  }
  static bool gidZero(const ibv_gid& g) {
    for (uint8_t x : g.raw)
      if (x) return false;
    return true;
  }
  ibv_gid gidAt(Nic& n, int index) {
    ibv_gid g{};
    EXPECT_EQ(v_->query_gid(n.ctx, 1, index, &g), 0);
    return g;
  }
  // Wire attributes of a correct pair: crossed PSNs, one MTU.
  static std::pair<Wire, Wire> agreed(uint32_t psn_a = 100, uint32_t psn_b = 200) {
    Wire a, b;
    a.sq_psn = psn_a;
    b.rq_psn = psn_a;
    b.sq_psn = psn_b;
    a.rq_psn = psn_b;
    return {a, b};
  }
  // One WR from `a` to `b`'s memory: its completion status (-1: none).
  int one(Nic& na, ibv_qp* a, bool read, void* local, uint32_t len, uint32_t lkey, uint64_t raddr, uint32_t rkey) {
    if (post(a, read, local, len, lkey, raddr, rkey) != 0) return -2;
    auto wc = reap(na.cq, 1);
    return wc.empty() ? -1 : static_cast<int>(wc[0].status);
  }

  std::unique_ptr<SoftVerbsEnv> env_;
  const VerbsApi* v_ = nullptr;
  std::deque<Nic> nics_;  // references stay valid as NICs are added
};

TEST_F(SoftVerbs, device_list_follows_the_configured_devices) {
  int n = 0;
  ibv_device** list = v_->get_device_list(&n);
  ASSERT_EQ(n, 2);
  EXPECT_STREQ(v_->get_device_name(list[0]), "sv0");
  EXPECT_STREQ(v_->get_device_name(list[1]), "sv1");
  v_->free_device_list(list);
  SoftVerbsEnv none("");
  list = v_->get_device_list(&n);
  EXPECT_EQ(n, 0);
  v_->free_device_list(list);
}

TEST_F(SoftVerbs, write_then_read_between_two_nics_moves_the_bytes) {
  Nic& a = open("sv0");
  Nic& b = open("sv1");
  test::Buffer src(1 << 20), dst(1 << 20), back(1 << 20);
  test::fillPattern(src.p, src.n, 11);
  std::memset(dst.p, 0, dst.n);
  std::memset(back.p, 0, back.n);
  const int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
  ibv_mr* ms = v_->reg_mr(a.pd, src.p, src.n, rw);
  ibv_mr* mb = v_->reg_mr(a.pd, back.p, back.n, rw);
  ibv_mr* md = v_->reg_mr(b.pd, dst.p, dst.n, rw);
  ASSERT_TRUE(ms && mb && md);
  ibv_qp* qa = makeQp(a);
  ibv_qp* qb = makeQp(b);
  connect(a, qa, b, qb);
  ASSERT_EQ(post(qa, false, src.p, src.n, ms->lkey, reinterpret_cast<uint64_t>(dst.p), md->rkey, 1), 0);
  ASSERT_EQ(post(qa, true, back.p, back.n, mb->lkey, reinterpret_cast<uint64_t>(dst.p), md->rkey, 2), 0);
  auto wc = reap(a.cq, 2);
  ASSERT_EQ(wc.size(), 2u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc[0].wr_id, 1u);
  EXPECT_EQ(wc[0].opcode, IBV_WC_RDMA_WRITE);
  EXPECT_EQ(wc[1].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc[1].opcode, IBV_WC_RDMA_READ);
  EXPECT_EQ(wc[1].byte_len, back.n);
  EXPECT_EQ(test::checkPattern(dst.p, dst.n, 11), -1);
  EXPECT_EQ(test::checkPattern(back.p, back.n, 11), -1);
  v_->destroy_qp(qa);
  v_->destroy_qp(qb);
  v_->dereg_mr(ms);
  v_->dereg_mr(mb);
  v_->dereg_mr(md);
}

TEST_F(SoftVerbs, qp_state_machine_rejects_skipped_states_and_missing_attributes) {
  Nic& a = open("sv0");
  ibv_qp* q = makeQp(a);
  ibv_qp_attr attr{};
  // RESET -> RTR skips INIT.
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = IBV_MTU_1024;
  EXPECT_EQ(v_->modify_qp(q, &attr, IBV_QP_STATE | IBV_QP_PATH_MTU), EINVAL);
  // RESET -> INIT without the port.
  attr = {};
  attr.qp_state = IBV_QPS_INIT;
  attr.qp_access_flags = IBV_ACCESS_REMOTE_READ;
  EXPECT_EQ(v_->modify_qp(q, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_ACCESS_FLAGS), EINVAL);
  // An attribute INIT does not take (a timeout) is refused too.
  attr.port_num = 1;
  EXPECT_EQ(v_->modify_qp(q, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS |
                                        IBV_QP_TIMEOUT),
            EINVAL);
  EXPECT_EQ(state(q), IBV_QPS_RESET);
  ASSERT_TRUE(qpToInit(*v_, q, a.info).ok());
  EXPECT_EQ(state(q), IBV_QPS_INIT);
  // Posting before RTS is refused at the call.
  char buf[64];
  EXPECT_EQ(post(q, false, buf, sizeof(buf), 0, 0, 0), EINVAL);
  // RoCE RTR needs a GRH (is_global) with a valid source GID index.
  attr = {};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = IBV_MTU_1024;
  attr.dest_qp_num = 1234;
  attr.max_dest_rd_atomic = 1;
  attr.min_rnr_timer = 12;
  attr.ah_attr.port_num = 1;
  attr.ah_attr.is_global = 0;
  const int rtr = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  EXPECT_EQ(v_->modify_qp(q, &attr, rtr), EINVAL);
  attr.ah_attr.is_global = 1;
  attr.ah_attr.grh.sgid_index = 7;  // an empty entry
  EXPECT_EQ(v_->modify_qp(q, &attr, rtr), EINVAL);
  // RTS requires the retry attributes.
  attr.ah_attr.grh.sgid_index = static_cast<uint8_t>(a.info.gid_index);
  ASSERT_EQ(v_->modify_qp(q, &attr, rtr), 0);
  attr = {};
  attr.qp_state = IBV_QPS_RTS;
  EXPECT_EQ(v_->modify_qp(q, &attr, IBV_QP_STATE | IBV_QP_SQ_PSN), EINVAL);
  EXPECT_EQ(state(q), IBV_QPS_RTR);
  // Any state -> ERR -> RESET is allowed.
  attr.qp_state = IBV_QPS_ERR;
  EXPECT_EQ(v_->modify_qp(q, &attr, IBV_QP_STATE), 0);
  attr.qp_state = IBV_QPS_RESET;
  EXPECT_EQ(v_->modify_qp(q, &attr, IBV_QP_STATE), 0);
  v_->destroy_qp(q);
}

TEST_F(SoftVerbs, wrong_rkey_completes_with_remote_access_error_and_flushes_the_rest) {
  Nic& a = open("sv0");
  Nic& b = open("sv1");
  test::Buffer src(8192), dst(8192);
  const int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
  ibv_mr* ms = v_->reg_mr(a.pd, src.p, src.n, rw);
  ibv_mr* md = v_->reg_mr(b.pd, dst.p, dst.n, rw);
  ibv_qp* qa = makeQp(a);
  ibv_qp* qb = makeQp(b);
  connect(a, qa, b, qb);
  ASSERT_EQ(post(qa, false, src.p, 4096, ms->lkey, reinterpret_cast<uint64_t>(dst.p), md->rkey + 1, 1), 0);
  ASSERT_EQ(post(qa, false, src.p, 4096, ms->lkey, reinterpret_cast<uint64_t>(dst.p), md->rkey, 2), 0);
  auto wc = reap(a.cq, 2);
  ASSERT_EQ(wc.size(), 2u);
  EXPECT_EQ(wc[0].status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(wc[1].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(state(qa), IBV_QPS_ERR);
  EXPECT_EQ(state(qb), IBV_QPS_ERR);  // the responder NAKed and went to ERR too
  v_->destroy_qp(qa);
  v_->destroy_qp(qb);
  v_->dereg_mr(ms);
  v_->dereg_mr(md);
}

TEST_F(SoftVerbs, bounds_access_flags_and_deregistration_are_enforced_remotely) {
  Nic& a = open("sv0");
  Nic& b = open("sv1");
  test::Buffer src(8192), dst(8192);
  const int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
  ibv_mr* ms = v_->reg_mr(a.pd, src.p, src.n, rw);
  ibv_mr* ro = v_->reg_mr(b.pd, dst.p, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  ibv_mr* md = v_->reg_mr(b.pd, dst.p + 4096, 4096, rw);
  auto one = [&](bool read, uint64_t raddr, uint32_t rkey, uint32_t len) {
    ibv_qp* qa = makeQp(a);
    ibv_qp* qb = makeQp(b);
    connect(a, qa, b, qb);
    EXPECT_EQ(post(qa, read, src.p, len, ms->lkey, raddr, rkey), 0);
    auto wc = reap(a.cq, 1);
    v_->destroy_qp(qa);
    v_->destroy_qp(qb);
    return wc.empty() ? -1 : static_cast<int>(wc[0].status);
  };
  const uint64_t d = reinterpret_cast<uint64_t>(dst.p);
  EXPECT_EQ(one(true, d, ro->rkey, 4096), IBV_WC_SUCCESS);
  EXPECT_EQ(one(false, d, ro->rkey, 4096), IBV_WC_REM_ACCESS_ERR);          // no REMOTE_WRITE
  EXPECT_EQ(one(false, d + 4096 + 1, md->rkey, 4096), IBV_WC_REM_ACCESS_ERR);  // one byte past the end
  EXPECT_EQ(one(false, d + 4095, md->rkey, 16), IBV_WC_REM_ACCESS_ERR);       // starts before the MR
  EXPECT_EQ(one(false, d + 4096, md->rkey, 4096), IBV_WC_SUCCESS);
  const uint32_t old = md->rkey;
  v_->dereg_mr(md);
  EXPECT_EQ(one(false, d + 4096, old, 4096), IBV_WC_REM_ACCESS_ERR);  // deregistered
  v_->dereg_mr(ro);
  v_->dereg_mr(ms);
}

TEST_F(SoftVerbs, bad_lkey_is_a_local_protection_error) {
  Nic& a = open("sv0");
  Nic& b = open("sv1");
  test::Buffer src(4096), dst(4096);
  const int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
  ibv_mr* ms = v_->reg_mr(a.pd, src.p, src.n, 0);  // local read only
  ibv_mr* md = v_->reg_mr(b.pd, dst.p, dst.n, rw);
  ASSERT_NE(ms, nullptr);
  ibv_qp* qa = makeQp(a);
  ibv_qp* qb = makeQp(b);
  connect(a, qa, b, qb);
  // A READ lands in local memory: the local MR needs LOCAL_WRITE.
  ASSERT_EQ(post(qa, true, src.p, 4096, ms->lkey, reinterpret_cast<uint64_t>(dst.p), md->rkey), 0);
  auto wc = reap(a.cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_LOC_PROT_ERR);
  v_->destroy_qp(qa);
  v_->destroy_qp(qb);
  v_->dereg_mr(ms);
  v_->dereg_mr(md);
}

TEST_F(SoftVerbs, registration_rejects_what_hardware_rejects) {
  Nic& a = open("sv0");
  test::Buffer buf(4096);
  errno = 0;
  EXPECT_EQ(v_->reg_mr(a.pd, buf.p, 0, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(errno, EINVAL);
  // REMOTE_WRITE without LOCAL_WRITE is invalid.
  EXPECT_EQ(v_->reg_mr(a.pd, buf.p, buf.n, IBV_ACCESS_REMOTE_WRITE), nullptr);
  EXPECT_EQ(errno, EINVAL);
  // Unmapped memory cannot be pinned.
  EXPECT_EQ(v_->reg_mr(a.pd, reinterpret_cast<void*>(0x1000), 4096, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(errno, EFAULT);
  // No device memory here.
  EXPECT_EQ(v_->reg_dmabuf_mr(a.pd, 0, 4096, 0, 3, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
}

TEST_F(SoftVerbs, send_queue_depth_is_enforced) {
  Nic& a = open("sv0");
  Nic& b = open("sv1");
  test::Buffer src(4096), dst(4096);
  const int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
  ibv_mr* ms = v_->reg_mr(a.pd, src.p, src.n, rw);
  ibv_mr* md = v_->reg_mr(b.pd, dst.p, dst.n, rw);
  ibv_qp* qa = makeQp(a, 4);
  ibv_qp* qb = makeQp(b, 4);
  connect(a, qa, b, qb);
  // Slots free only when completions are polled: the 5th post must fail.
  int rc = 0;
  int posted = 0;
  for (int i = 0; i < 5 && rc == 0; ++i) {
    rc = post(qa, false, src.p, 64, ms->lkey, reinterpret_cast<uint64_t>(dst.p), md->rkey, i);
    if (rc == 0) ++posted;
  }
  EXPECT_EQ(posted, 4);
  EXPECT_EQ(rc, ENOMEM);
  EXPECT_EQ(reap(a.cq, 4).size(), 4u);
  EXPECT_EQ(post(qa, false, src.p, 64, ms->lkey, reinterpret_cast<uint64_t>(dst.p), md->rkey), 0);
  EXPECT_EQ(reap(a.cq, 1).size(), 1u);
  v_->destroy_qp(qa);
  v_->destroy_qp(qb);
  v_->dereg_mr(ms);
  v_->dereg_mr(md);
}

TEST_F(SoftVerbs, injected_error_completion_then_normal_service) {
  Nic& a = open("sv0");
  Nic& b = open("sv1");
  test::Buffer src(4096), dst(4096);
  const int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
  ibv_mr* ms = v_->reg_mr(a.pd, src.p, src.n, rw);
  ibv_mr* md = v_->reg_mr(b.pd, dst.p, dst.n, rw);
  ASSERT_EQ(SoftVerbsEnv::control("fail sv0 1 IBV_WC_RETRY_EXC_ERR"), 0);
  EXPECT_NE(SoftVerbsEnv::control("fail sv0 1 NOT_A_STATUS"), 0);
  for (int round = 0; round < 2; ++round) {
    ibv_qp* qa = makeQp(a);
    ibv_qp* qb = makeQp(b);
    connect(a, qa, b, qb);
    ASSERT_EQ(post(qa, false, src.p, 64, ms->lkey, reinterpret_cast<uint64_t>(dst.p), md->rkey), 0);
    auto wc = reap(a.cq, 1);
    ASSERT_EQ(wc.size(), 1u);
    EXPECT_EQ(wc[0].status, round == 0 ? IBV_WC_RETRY_EXC_ERR : IBV_WC_SUCCESS);
    v_->destroy_qp(qa);
    v_->destroy_qp(qb);
  }
  v_->dereg_mr(ms);
  v_->dereg_mr(md);
}

TEST_F(SoftVerbs, nic_that_disappears_raises_device_fatal_and_leaves_the_list) {
  Nic& a = open("sv0");
  Nic& b = open("sv1");
  test::Buffer src(4096), dst(4096);
  const int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
  ibv_mr* ms = v_->reg_mr(a.pd, src.p, src.n, rw);
  ibv_mr* md = v_->reg_mr(b.pd, dst.p, dst.n, rw);
  ibv_qp* qa = makeQp(a);
  ibv_qp* qb = makeQp(b);
  connect(a, qa, b, qb);
  ASSERT_EQ(SoftVerbsEnv::control("down sv1"), 0);
  // The requester on sv0 gets no answer from the vanished responder NIC.
  ASSERT_EQ(post(qa, false, src.p, 64, ms->lkey, reinterpret_cast<uint64_t>(dst.p), md->rkey), 0);
  auto wc = reap(a.cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_RETRY_EXC_ERR);
  // sv1's own context learns through an async event.
  pollfd pfd{b.ctx->async_fd, POLLIN, 0};
  ASSERT_EQ(::poll(&pfd, 1, 5000), 1);
  bool fatal = false;
  ibv_async_event ev;
  for (int i = 0; i < 2 && v_->get_async_event(b.ctx, &ev) == 0; ++i) {
    fatal |= ev.event_type == IBV_EVENT_DEVICE_FATAL;
    v_->ack_async_event(&ev);
  }
  EXPECT_TRUE(fatal);
  ibv_port_attr pa{};
  ASSERT_EQ(v_->queryPort(b.ctx, 1, &pa), 0);
  EXPECT_EQ(pa.state, IBV_PORT_DOWN);
  int n = 0;
  ibv_device** list = v_->get_device_list(&n);
  EXPECT_EQ(n, 1);
  v_->free_device_list(list);
  ASSERT_EQ(SoftVerbsEnv::control("up sv1"), 0);
  v_->destroy_qp(qa);
  v_->destroy_qp(qb);
  v_->dereg_mr(ms);
  v_->dereg_mr(md);
}

// Two NICs' MRs over one buffer each, for the wire-rule tests.
struct Mem {
  test::Buffer src{64 << 10}, dst{64 << 10};
  ibv_mr* ms = nullptr;
  ibv_mr* md = nullptr;
};

TEST_F(SoftVerbs, psns_must_match_at_both_ends_of_the_pair) {
  Nic& a = open("sv0");
  Nic& b = open("sv1");
  Mem m;
  const int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
  m.ms = v_->reg_mr(a.pd, m.src.p, m.src.n, rw);
  m.md = v_->reg_mr(b.pd, m.dst.p, m.dst.n, rw);
  ASSERT_TRUE(m.ms && m.md);
  std::memset(m.src.p, 0x5a, m.src.n);
  const uint64_t d = reinterpret_cast<uint64_t>(m.dst.p);
  // Crossed PSNs: the pair works, and keeps working as the PSNs advance
  // (8 KiB at MTU 4096 is two packets per WRITE).
  {
    ibv_qp* qa = makeQp(a);
    ibv_qp* qb = makeQp(b);
    auto [wa, wb] = agreed(0xfffffe, 7);  // wraps past 2^24
    pair(a, qa, wa, b, qb, wb);
    for (int i = 0; i < 3; ++i) {
      std::memset(m.dst.p, 0, 8192);
      EXPECT_EQ(one(a, qa, false, m.src.p, 8192, m.ms->lkey, d, m.md->rkey), IBV_WC_SUCCESS) << i;
      EXPECT_EQ(m.dst.p[8191], 0x5a) << i;
    }
    ibv_qp_attr qa_attr{}, qb_attr{};
    ibv_qp_init_attr ia{};
    ASSERT_EQ(v_->query_qp(qa, &qa_attr, IBV_QP_SQ_PSN, &ia), 0);
    ASSERT_EQ(v_->query_qp(qb, &qb_attr, IBV_QP_RQ_PSN, &ia), 0);
    EXPECT_EQ(qa_attr.sq_psn, 4u) << "0xfffffe + 3 WRITEs of 2 packets, modulo 2^24";
    EXPECT_EQ(qb_attr.rq_psn, qa_attr.sq_psn);
    v_->destroy_qp(qa);
    v_->destroy_qp(qb);
  }
  // The requester starts later than the responder expects: sequence errors
  // until the retries run out; nothing lands.
  {
    ibv_qp* qa = makeQp(a);
    ibv_qp* qb = makeQp(b);
    auto [wa, wb] = agreed(100, 7);
    wb.rq_psn = 50;
    pair(a, qa, wa, b, qb, wb);
    std::memset(m.dst.p, 0, 8192);
    EXPECT_EQ(one(a, qa, false, m.src.p, 8192, m.ms->lkey, d, m.md->rkey), IBV_WC_RETRY_EXC_ERR);
    EXPECT_EQ(m.dst.p[0], 0);
    v_->destroy_qp(qa);
    v_->destroy_qp(qb);
  }
  // Earlier than expected: a duplicate. The WRITE is acknowledged and never
  // executed; a READ is served again.
  {
    ibv_qp* qa = makeQp(a);
    ibv_qp* qb = makeQp(b);
    auto [wa, wb] = agreed(100, 7);
    wb.rq_psn = 150;
    pair(a, qa, wa, b, qb, wb);
    std::memset(m.dst.p, 0, 8192);
    EXPECT_EQ(one(a, qa, false, m.src.p, 8192, m.ms->lkey, d, m.md->rkey), IBV_WC_SUCCESS);
    EXPECT_EQ(m.dst.p[0], 0) << "a duplicate WRITE was executed";
    std::memset(m.dst.p, 0x33, 4096);
    EXPECT_EQ(one(a, qa, true, m.src.p, 4096, m.ms->lkey, d, m.md->rkey), IBV_WC_SUCCESS);
    EXPECT_EQ(m.src.p[4095], 0x33);
    v_->destroy_qp(qa);
    v_->destroy_qp(qb);
  }
  v_->dereg_mr(m.ms);
  v_->dereg_mr(m.md);
}

TEST_F(SoftVerbs, path_mtu_must_match_at_both_ends_of_the_pair) {
  Nic& a = open("sv0");
  Nic& b = open("sv1");
  Mem m;
  const int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
  m.ms = v_->reg_mr(a.pd, m.src.p, m.src.n, rw);
  m.md = v_->reg_mr(b.pd, m.dst.p, m.dst.n, rw);
  const uint64_t d = reinterpret_cast<uint64_t>(m.dst.p);
  auto run = [&](ibv_mtu ma, ibv_mtu mb, bool read) {
    ibv_qp* qa = makeQp(a);
    ibv_qp* qb = makeQp(b);
    auto [wa, wb] = agreed();
    wa.mtu = ma;
    wb.mtu = mb;
    pair(a, qa, wa, b, qb, wb);
    int st = one(a, qa, read, m.src.p, 16384, m.ms->lkey, d, m.md->rkey);
    uint32_t responder = state(qb);
    v_->destroy_qp(qa);
    v_->destroy_qp(qb);
    return std::make_pair(st, responder);
  };
  EXPECT_EQ(run(IBV_MTU_1024, IBV_MTU_1024, false).first, IBV_WC_SUCCESS);
  // The responder refuses a WRITE's packets cut for another MTU.
  auto w = run(IBV_MTU_4096, IBV_MTU_1024, false);
  EXPECT_EQ(w.first, IBV_WC_REM_INV_REQ_ERR);
  EXPECT_EQ(w.second, IBV_QPS_ERR);
  // A READ's responses are dropped by the requester until it gives up.
  EXPECT_EQ(run(IBV_MTU_1024, IBV_MTU_2048, true).first, IBV_WC_RETRY_EXC_ERR);
  // Above the port's active MTU: refused at RTR.
  SoftVerbsEnv small("sv0:mtu=1024");
  Nic& c = open("sv0");
  ibv_qp* qc = makeQp(c);
  Wire wc;
  wc.dgid = c.info.gid;
  EXPECT_EQ(bringUp(c, qc, 1, wc), EINVAL);
  v_->destroy_qp(qc);
  v_->dereg_mr(m.ms);
  v_->dereg_mr(m.md);
}

TEST_F(SoftVerbs, read_depth_is_bounded_by_the_device_and_by_the_responders_resources) {
  SoftVerbsEnv env("sv0:rd_atom=16:init_rd_atom=4,sv1:rd_atom=2:init_rd_atom=16");
  Nic& a = open("sv0");
  Nic& b = open("sv1");
  EXPECT_EQ(a.info.dev_attr.max_qp_init_rd_atom, 4);
  EXPECT_EQ(b.info.dev_attr.max_qp_rd_atom, 2);
  Mem m;
  const int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
  m.ms = v_->reg_mr(a.pd, m.src.p, m.src.n, rw);
  m.md = v_->reg_mr(b.pd, m.dst.p, m.dst.n, rw);
  const uint64_t d = reinterpret_cast<uint64_t>(m.dst.p);
  // Device limits at modify time: initiator depth <= max_qp_init_rd_atom,
  // responder resources <= max_qp_rd_atom.
  {
    ibv_qp* qa = makeQp(a);
    ibv_qp* qb = makeQp(b);
    auto [wa, wb] = agreed();
    wa.dgid = b.info.gid;
    wb.dgid = a.info.gid;
    wa.max_rd_atomic = 8;
    EXPECT_EQ(bringUp(a, qa, qb->qp_num, wa), EINVAL);
    wb.max_dest_rd_atomic = 4;
    EXPECT_EQ(bringUp(b, qb, qa->qp_num, wb), EINVAL);
    v_->destroy_qp(qa);
    v_->destroy_qp(qb);
  }
  auto run = [&](uint8_t depth, uint8_t resources, bool read) {
    ibv_qp* qa = makeQp(a);
    ibv_qp* qb = makeQp(b);
    auto [wa, wb] = agreed();
    wa.max_rd_atomic = depth;
    wb.max_dest_rd_atomic = resources;
    pair(a, qa, wa, b, qb, wb);
    int st = one(a, qa, read, m.src.p, 4096, m.ms->lkey, d, m.md->rkey);
    v_->destroy_qp(qa);
    v_->destroy_qp(qb);
    return st;
  };
  EXPECT_EQ(run(2, 2, true), IBV_WC_SUCCESS);
  EXPECT_EQ(run(4, 2, true), IBV_WC_REM_INV_REQ_ERR) << "more READs in flight than the responder serves";
  EXPECT_EQ(run(4, 2, false), IBV_WC_SUCCESS) << "WRITEs use no read resources";
  EXPECT_EQ(run(0, 2, true), IBV_WC_LOC_QP_OP_ERR) << "a QP of depth 0 issues no READ";
  v_->dereg_mr(m.ms);
  v_->dereg_mr(m.md);
}

TEST_F(SoftVerbs, gid_type_and_addresses_must_agree_at_both_ends) {
  SoftVerbsEnv env("sv0,sv1,sv2:v1,sv3:v6");
  Nic& a = open("sv0");
  Nic& b = open("sv1");
  Nic& v1 = open("sv2");
  Nic& v6 = open("sv3");
  // sv0/sv1: 0 link-local v1, 1 link-local v2, 2 IPv4 v1, 3 IPv4 v2;
  // sv2: 0 link-local v1, 1 IPv4 v1; sv3: link-local v1/v2, IPv6 v1/v2.
  Mem m;
  const int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
  m.ms = v_->reg_mr(a.pd, m.src.p, m.src.n, rw);
  const uint64_t d = reinterpret_cast<uint64_t>(m.dst.p);
  auto run = [&](Nic& nb, int sgid_a, int sgid_b, int dgid_a = -1) {
    ibv_mr* md = v_->reg_mr(nb.pd, m.dst.p, m.dst.n, rw);
    ibv_qp* qa = makeQp(a);
    ibv_qp* qb = makeQp(nb);
    auto [wa, wb] = agreed();
    wa.sgid_index = sgid_a;
    wb.sgid_index = sgid_b;
    wa.dgid = gidAt(nb, dgid_a >= 0 ? dgid_a : sgid_b);
    wb.dgid = gidAt(a, sgid_a);
    pair(a, qa, wa, nb, qb, wb);
    int st = one(a, qa, false, m.src.p, 4096, m.ms->lkey, d, md->rkey);
    v_->destroy_qp(qa);
    v_->destroy_qp(qb);
    v_->dereg_mr(md);
    return st;
  };
  EXPECT_EQ(run(b, 3, 3), IBV_WC_SUCCESS);
  EXPECT_EQ(run(v1, 2, 1), IBV_WC_SUCCESS) << "RoCE v1 at both ends";
  EXPECT_EQ(run(v1, 3, 1), IBV_WC_RETRY_EXC_ERR) << "RoCE v2 packets to a RoCE v1 QP";
  EXPECT_EQ(run(b, 3, 3, 1), IBV_WC_RETRY_EXC_ERR) << "addressed to a GID the responder does not send from";
  EXPECT_EQ(run(v6, 1, 1), IBV_WC_SUCCESS) << "link-local RoCE v2 at both ends";
  EXPECT_EQ(run(v6, 3, 3), IBV_WC_RETRY_EXC_ERR) << "an IPv4 source and an IPv6 destination";
  v_->dereg_mr(m.ms);
}

TEST_F(SoftVerbs, qp_takes_only_cqs_of_its_own_context) {
  Nic& a = open("sv0");
  Nic& b = open("sv1");
  ibv_qp_init_attr ia{};
  ia.send_cq = b.cq;  // another context's CQ
  ia.recv_cq = a.cq;
  ia.qp_type = IBV_QPT_RC;
  ia.cap.max_send_wr = 4;
  ia.cap.max_recv_wr = 1;
  ia.cap.max_send_sge = 1;
  ia.cap.max_recv_sge = 1;
  errno = 0;
  EXPECT_EQ(v_->create_qp(a.pd, &ia), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ia.send_cq = a.cq;
  ia.recv_cq = b.cq;
  EXPECT_EQ(v_->create_qp(a.pd, &ia), nullptr);
  ia.recv_cq = a.cq;
  ibv_qp* q = v_->create_qp(a.pd, &ia);
  ASSERT_NE(q, nullptr);
  v_->destroy_qp(q);
}

TEST_F(SoftVerbs, keys_of_another_nic_or_protection_domain_are_refused) {
  Nic& a = open("sv0");
  Nic& b = open("sv1");
  test::Buffer src(8192), dst(8192);
  const int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
  ibv_mr* ms = v_->reg_mr(a.pd, src.p, src.n, rw);
  ibv_mr* md = v_->reg_mr(b.pd, dst.p, dst.n, rw);
  // The same buffers registered on the other NIC, and in another PD.
  ibv_mr* ms_b = v_->reg_mr(b.pd, src.p, src.n, rw);
  ibv_mr* md_a = v_->reg_mr(a.pd, dst.p, dst.n, rw);
  ibv_pd* other = v_->alloc_pd(b.ctx);
  ibv_mr* md_other = v_->reg_mr(other, dst.p, dst.n, rw);
  ASSERT_TRUE(ms && md && ms_b && md_a && md_other);
  const uint64_t d = reinterpret_cast<uint64_t>(dst.p);
  auto run = [&](uint32_t lkey, uint32_t rkey) {
    ibv_qp* qa = makeQp(a);
    ibv_qp* qb = makeQp(b);
    connect(a, qa, b, qb);
    int st = one(a, qa, false, src.p, 4096, lkey, d, rkey);
    v_->destroy_qp(qa);
    v_->destroy_qp(qb);
    return st;
  };
  EXPECT_EQ(run(ms->lkey, md->rkey), IBV_WC_SUCCESS);
  EXPECT_EQ(run(ms_b->lkey, md->rkey), IBV_WC_LOC_PROT_ERR) << "an lkey of the other NIC";
  EXPECT_EQ(run(ms->lkey, md_a->rkey), IBV_WC_REM_ACCESS_ERR) << "an rkey of the requester's own NIC";
  EXPECT_EQ(run(ms->lkey, md_other->rkey), IBV_WC_REM_ACCESS_ERR) << "an rkey of another PD of the responder's NIC";
  for (ibv_mr* mr : {ms, md, ms_b, md_a, md_other}) v_->dereg_mr(mr);
  v_->dealloc_pd(other);
}

TEST_F(SoftVerbs, unsignaled_work_requests_keep_their_slots_until_a_later_completion_is_polled) {
  Nic& a = open("sv0");
  Nic& b = open("sv1");
  test::Buffer src(4096), dst(4096);
  const int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
  ibv_mr* ms = v_->reg_mr(a.pd, src.p, src.n, rw);
  ibv_mr* md = v_->reg_mr(b.pd, dst.p, dst.n, rw);
  ibv_qp* qa = makeQp(a, 4);
  ibv_qp* qb = makeQp(b, 4);
  connect(a, qa, b, qb);
  const uint64_t d = reinterpret_cast<uint64_t>(dst.p);
  auto postUnsignaled = [&](uint64_t id, uint32_t off) {
    ibv_sge sge{reinterpret_cast<uint64_t>(src.p) + off, 64, ms->lkey};
    ibv_send_wr wr{};
    wr.wr_id = id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.wr.rdma.remote_addr = d + off;
    wr.wr.rdma.rkey = md->rkey;
    ibv_send_wr* bad = nullptr;
    return ibv_post_send(qa, &wr, &bad);
  };
  std::memset(src.p, 0x77, src.n);
  std::memset(dst.p, 0, dst.n);
  for (uint32_t i = 0; i < 3; ++i) ASSERT_EQ(postUnsignaled(i, i * 64), 0);
  // They run (their bytes land) but free nothing: one slot is left.
  ASSERT_TRUE(test::eventually([&] { return dst.p[2 * 64] == 0x77; }));
  EXPECT_EQ(post(qa, false, src.p + 1024, 64, ms->lkey, d + 1024, md->rkey, 9), 0);
  EXPECT_EQ(postUnsignaled(10, 2048), ENOMEM) << "the SQ is full until a completion is polled";
  auto wc = reap(a.cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].wr_id, 9u);
  // That one completion freed its slot and the three before it.
  for (uint32_t i = 0; i < 3; ++i) EXPECT_EQ(postUnsignaled(20 + i, 2048 + i * 64), 0) << i;
  EXPECT_EQ(post(qa, false, src.p, 64, ms->lkey, d, md->rkey, 30), 0);
  EXPECT_EQ(postUnsignaled(31, 3072), ENOMEM);
  EXPECT_EQ(reap(a.cq, 1).size(), 1u);
  v_->destroy_qp(qa);
  v_->destroy_qp(qb);
  v_->dereg_mr(ms);
  v_->dereg_mr(md);
}

TEST_F(SoftVerbs, cq_overrun_is_a_fatal_cq_error_with_an_async_event) {
  Nic& a = open("sv0");
  Nic& b = open("sv1");
  ibv_cq* small = v_->create_cq(a.ctx, 4, nullptr, nullptr, 0);
  ASSERT_NE(small, nullptr);
  test::Buffer src(4096), dst(4096);
  const int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
  ibv_mr* ms = v_->reg_mr(a.pd, src.p, src.n, rw);
  ibv_mr* md = v_->reg_mr(b.pd, dst.p, dst.n, rw);
  ibv_qp_init_attr ia{};
  ia.send_cq = small;
  ia.recv_cq = small;
  ia.qp_type = IBV_QPT_RC;
  ia.cap.max_send_wr = 16;
  ia.cap.max_recv_wr = 1;
  ia.cap.max_send_sge = 1;
  ia.cap.max_recv_sge = 1;
  ibv_qp* qa = v_->create_qp(a.pd, &ia);
  ibv_qp* qb = makeQp(b);
  connect(a, qa, b, qb);
  const uint64_t d = reinterpret_cast<uint64_t>(dst.p);
  // Six completions into a CQ of four: the fifth overruns it.
  for (int i = 0; i < 6; ++i) ASSERT_EQ(post(qa, false, src.p, 64, ms->lkey, d, md->rkey, i), 0);
  pollfd pfd{a.ctx->async_fd, POLLIN, 0};
  ASSERT_EQ(::poll(&pfd, 1, 5000), 1) << "no async event";
  ibv_async_event ev;
  ASSERT_EQ(v_->get_async_event(a.ctx, &ev), 0);
  EXPECT_EQ(ev.event_type, IBV_EVENT_CQ_ERR);
  EXPECT_EQ(ev.element.cq, small);
  v_->ack_async_event(&ev);
  ASSERT_TRUE(test::eventually([&] { return state(qa) == IBV_QPS_ERR; }));
  // (All six ran: the last two completions were lost, nothing more comes.)
  EXPECT_EQ(reap(small, 6, std::chrono::milliseconds(300)).size(), 4u)
      << "what was written before the overrun stays readable";
  EXPECT_EQ(state(qa), IBV_QPS_ERR) << "the QP whose completion was lost";
  // The CQ stays in error: nothing completes into it any more.
  ibv_qp* qc = v_->create_qp(a.pd, &ia);
  ibv_qp* qd = makeQp(b);
  connect(a, qc, b, qd);
  ASSERT_EQ(post(qc, false, src.p, 64, ms->lkey, d, md->rkey, 7), 0);
  ASSERT_TRUE(test::eventually([&] { return state(qc) == IBV_QPS_ERR; }));
  EXPECT_EQ(reap(small, 1, std::chrono::milliseconds(300)).size(), 0u);
  for (ibv_qp* q : {qa, qb, qc, qd}) v_->destroy_qp(q);
  v_->destroy_cq(small);
  v_->dereg_mr(ms);
  v_->dereg_mr(md);
}

TEST_F(SoftVerbs, destroying_a_qp_removes_its_unpolled_completions) {
  Nic& a = open("sv0");
  Nic& b = open("sv1");
  test::Buffer src(4096), dst(4096);
  const int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
  ibv_mr* ms = v_->reg_mr(a.pd, src.p, src.n, rw);
  ibv_mr* md = v_->reg_mr(b.pd, dst.p, dst.n, rw);
  ibv_qp* q1 = makeQp(a);
  ibv_qp* q2 = makeQp(a);
  ibv_qp* r1 = makeQp(b);
  ibv_qp* r2 = makeQp(b);
  connect(a, q1, b, r1);
  connect(a, q2, b, r2);
  const uint64_t d = reinterpret_cast<uint64_t>(dst.p);
  std::memset(src.p, 0x42, 64);
  std::memset(dst.p, 0, 4096);
  ASSERT_EQ(post(q1, false, src.p, 64, ms->lkey, d, md->rkey, 1), 0);
  ASSERT_EQ(post(q2, false, src.p, 64, ms->lkey, d + 64, md->rkey, 2), 0);
  ASSERT_TRUE(test::eventually([&] { return dst.p[0] == 0x42 && dst.p[64] == 0x42; })) << "the WRITEs ran";
  v_->destroy_qp(q1);
  auto wc = reap(a.cq, 2, std::chrono::milliseconds(300));
  ASSERT_EQ(wc.size(), 1u) << "the destroyed QP's completion is still in the CQ";
  EXPECT_EQ(wc[0].wr_id, 2u);
  for (ibv_qp* q : {q2, r1, r2}) v_->destroy_qp(q);
  v_->dereg_mr(ms);
  v_->dereg_mr(md);
}

TEST_F(SoftVerbs, error_completions_define_only_status_wr_id_qp_and_vendor_error) {
  Nic& a = open("sv0");
  Nic& b = open("sv1");
  test::Buffer src(4096), dst(4096);
  const int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
  ibv_mr* ms = v_->reg_mr(a.pd, src.p, src.n, rw);
  ibv_mr* md = v_->reg_mr(b.pd, dst.p, dst.n, rw);
  ibv_qp* qa = makeQp(a);
  ibv_qp* qb = makeQp(b);
  connect(a, qa, b, qb);
  ASSERT_EQ(post(qa, true, src.p, 4096, ms->lkey, reinterpret_cast<uint64_t>(dst.p), md->rkey + 1, 77), 0);
  auto wc = reap(a.cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(wc[0].wr_id, 77u);
  EXPECT_EQ(wc[0].qp_num, qa->qp_num);
  EXPECT_NE(wc[0].vendor_err, 0u);
  // Undefined on an error completion: not what a success would carry. The
  // poisoned opcode need not be an enumerator: read its bytes, not the enum.
  uint32_t opcode = 0;
  static_assert(sizeof(wc[0].opcode) == sizeof(opcode));
  std::memcpy(&opcode, &wc[0].opcode, sizeof(opcode));
  EXPECT_NE(opcode, static_cast<uint32_t>(IBV_WC_RDMA_READ));
  EXPECT_NE(wc[0].byte_len, 4096u);
  for (ibv_qp* q : {qa, qb}) v_->destroy_qp(q);
  v_->dereg_mr(ms);
  v_->dereg_mr(md);
}

TEST_F(SoftVerbs, read_only_memory_is_refused_for_local_write) {
  Nic& a = open("sv0");
  const size_t len = 64 << 10;
  void* ro = ::mmap(nullptr, len, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(ro, MAP_FAILED);
  errno = 0;
  EXPECT_EQ(v_->reg_mr(a.pd, ro, len, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(errno, EFAULT);
  EXPECT_EQ(v_->reg_mr(a.pd, ro, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE), nullptr);
  EXPECT_EQ(errno, EFAULT);
  // Read access alone pins it fine (a WRITE source, a READ target of peers).
  ibv_mr* mr = v_->reg_mr(a.pd, ro, len, IBV_ACCESS_REMOTE_READ);
  ASSERT_NE(mr, nullptr);
  v_->dereg_mr(mr);
  // A range that is writable only in part is refused too.
  ASSERT_EQ(::mprotect(ro, 4096, PROT_READ | PROT_WRITE), 0);
  EXPECT_EQ(v_->reg_mr(a.pd, ro, len, IBV_ACCESS_LOCAL_WRITE), nullptr);
  mr = v_->reg_mr(a.pd, ro, 4096, IBV_ACCESS_LOCAL_WRITE);
  EXPECT_NE(mr, nullptr);
  if (mr) v_->dereg_mr(mr);
  ::munmap(ro, len);
}

TEST_F(SoftVerbs, no_byte_lands_after_deregistration_returns) {
  Nic& a = open("sv0");
  Nic& b = open("sv1");
  const size_t len = 128u << 20;
  test::Buffer src(len), dst(len);
  std::memset(src.p, 0xab, len);
  const int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
  ibv_mr* ms = v_->reg_mr(a.pd, src.p, len, rw);
  ASSERT_NE(ms, nullptr);
  bool caught = false;
  // Deregister the target MR while one big WRITE is copying into it; then
  // clear the memory: nothing may land after the clear.
  for (int attempt = 0; attempt < 5 && !caught; ++attempt) {
    std::memset(dst.p, 0, len);
    ibv_mr* md = v_->reg_mr(b.pd, dst.p, len, rw);
    ASSERT_NE(md, nullptr);
    ibv_qp* qa = makeQp(a);
    ibv_qp* qb = makeQp(b);
    connect(a, qa, b, qb);
    volatile char* first = dst.p;
    volatile char* last = dst.p + len - 1;
    ASSERT_EQ(post(qa, false, src.p, static_cast<uint32_t>(len), ms->lkey, reinterpret_cast<uint64_t>(dst.p),
                   md->rkey),
              0);
    ASSERT_TRUE(test::eventually([&] { return *first != 0; }, std::chrono::seconds(10))) << "the copy never started";
    caught = *last == 0;  // deregistering mid-copy (else try again)
    ASSERT_EQ(v_->dereg_mr(md), 0);
    std::memset(dst.p, 0, len);
    auto wc = reap(a.cq, 1);
    ASSERT_EQ(wc.size(), 1u);
    for (size_t i = 0; i < len; i += 4096)
      ASSERT_EQ(dst.p[i], 0) << "byte " << i << " landed after ibv_dereg_mr returned";
    v_->destroy_qp(qa);
    v_->destroy_qp(qb);
  }
  EXPECT_TRUE(caught) << "never deregistered while the copy ran";
  v_->dereg_mr(ms);
}

TEST_F(SoftVerbs, one_sided_write_lands_in_another_process_without_its_cpu) {
  // The child registers memory and connects a QP, then blocks in read():
  // it executes nothing while the parent's RDMA WRITE and READ run.
  int to_child[2], to_parent[2];
  ASSERT_EQ(pipe(to_child), 0);
  ASSERT_EQ(pipe(to_parent), 0);
  const size_t len = 4 << 20;
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(to_child[1]);
    close(to_parent[0]);
    const VerbsApi* v = nullptr;
    if (!loadVerbs(test::softVerbsLib(), v).ok()) _exit(2);
    int n = 0;
    ibv_device** list = v->get_device_list(&n);
    ibv_context* ctx = nullptr;
    NicInfo info;
    NicReport rep;
    Tunables t;
    if (n < 2 || !inspectNic(*v, list[1], t, ctx, info, rep).ok()) _exit(3);
    ibv_pd* pd = v->alloc_pd(ctx);
    ibv_cq* cq = v->create_cq(ctx, 16, nullptr, nullptr, 0);
    auto* mem = static_cast<char*>(aligned_alloc(4096, len));
    std::memset(mem, 0, len);
    ibv_mr* mr = v->reg_mr(pd, mem, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE);
    ibv_qp_init_attr ia{};
    ia.send_cq = cq;
    ia.recv_cq = cq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = 4;
    ia.cap.max_recv_wr = 1;
    ia.cap.max_send_sge = 1;
    ia.cap.max_recv_sge = 1;
    ibv_qp* qp = v->create_qp(pd, &ia);
    if (!mr || !qp || !qpToInit(*v, qp, info).ok()) _exit(4);
    uint64_t msg[3] = {qp->qp_num, reinterpret_cast<uint64_t>(mem), mr->rkey};
    if (write(to_parent[1], msg, sizeof(msg)) != sizeof(msg)) _exit(5);
    uint64_t peer_qpn = 0;
    if (read(to_child[0], &peer_qpn, sizeof(peer_qpn)) != sizeof(peer_qpn)) _exit(6);
    RtrParams p;
    p.max_dest_rd_atomic = 16;
    p.remote_qpn = static_cast<uint32_t>(peer_qpn);
    p.remote_psn = 1;
    NicInfo peer_info = info;
    ibv_device* d0 = list[0];
    ibv_context* c0 = nullptr;
    NicReport r0;
    if (!inspectNic(*v, d0, t, c0, peer_info, r0).ok()) _exit(7);
    v->close_device(c0);
    p.remote_gid = peer_info.gid;
    p.mtu = IBV_MTU_4096;
    if (!qpToRtr(*v, qp, info, p).ok() || !qpToRts(*v, qp, info, 1, 14, 7, 7, 16).ok()) _exit(8);
    char ok = 'r';
    if (write(to_parent[1], &ok, 1) != 1) _exit(9);
    char cmd = 0;
    if (read(to_child[0], &cmd, 1) != 1) _exit(10);  // blocked here during the transfers
    _exit(test::checkPattern(mem, len, 77) == -1 ? 0 : 11);
  }
  close(to_child[0]);
  close(to_parent[1]);
  Nic& a = open("sv0");
  uint64_t msg[3];
  ASSERT_EQ(read(to_parent[0], msg, sizeof(msg)), static_cast<ssize_t>(sizeof(msg)));
  ibv_qp* qa = makeQp(a);
  ASSERT_TRUE(qpToInit(*v_, qa, a.info).ok());
  uint64_t mine = qa->qp_num;
  ASSERT_EQ(write(to_child[1], &mine, sizeof(mine)), static_cast<ssize_t>(sizeof(mine)));
  char ready = 0;
  ASSERT_EQ(read(to_parent[0], &ready, 1), 1);
  // sv1's GID: the second device of the list.
  int n = 0;
  ibv_device** list = v_->get_device_list(&n);
  ibv_context* c1 = nullptr;
  NicInfo i1;
  NicReport r1;
  Tunables t;
  ASSERT_TRUE(inspectNic(*v_, list[1], t, c1, i1, r1).ok());
  v_->close_device(c1);
  v_->free_device_list(list);
  RtrParams p;
  p.max_dest_rd_atomic = 16;
  p.remote_qpn = static_cast<uint32_t>(msg[0]);
  p.remote_psn = 1;
  p.remote_gid = i1.gid;
  p.mtu = IBV_MTU_4096;
  ASSERT_TRUE(qpToRtr(*v_, qa, a.info, p).ok());
  ASSERT_TRUE(qpToRts(*v_, qa, a.info, 1, 14, 7, 7, 16).ok());
  test::Buffer src(len), back(len);
  test::fillPattern(src.p, len, 77);
  std::memset(back.p, 0, len);
  const int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
  ibv_mr* ms = v_->reg_mr(a.pd, src.p, len, rw);
  ibv_mr* mb = v_->reg_mr(a.pd, back.p, len, rw);
  ASSERT_EQ(post(qa, false, src.p, static_cast<uint32_t>(len), ms->lkey, msg[1], static_cast<uint32_t>(msg[2]), 1), 0);
  ASSERT_EQ(post(qa, true, back.p, static_cast<uint32_t>(len), mb->lkey, msg[1], static_cast<uint32_t>(msg[2]), 2), 0);
  auto wc = reap(a.cq, 2);
  ASSERT_EQ(wc.size(), 2u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc[1].status, IBV_WC_SUCCESS);
  EXPECT_EQ(test::checkPattern(back.p, len, 77), -1);
  char go = 'x';
  ASSERT_EQ(write(to_child[1], &go, 1), 1);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child's memory does not hold the written pattern";
  // The child is gone: the requester now times out (retry exceeded).
  ASSERT_EQ(post(qa, false, src.p, 64, ms->lkey, msg[1], static_cast<uint32_t>(msg[2]), 3), 0);
  wc = reap(a.cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_RETRY_EXC_ERR);
  v_->destroy_qp(qa);
  v_->dereg_mr(ms);
  v_->dereg_mr(mb);
  close(to_child[1]);
  close(to_parent[0]);
}

}  // namespace

#else
TEST(SoftVerbs, skipped) { GTEST_SKIP() << "rdma transport not built (no infiniband/verbs.h)"; }
#endif
