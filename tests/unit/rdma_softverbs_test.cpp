// The software verbs provider enforces what an RC NIC enforces. These tests
// drive it through the same function table the rdma transport uses
// (verbs_api.h) and the header-inline ibv_post_send / ibv_poll_cq.
#include <gtest/gtest.h>

#if HAWSER_TEST_RDMA

#include <poll.h>
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
    ASSERT_TRUE(qpToRts(*v_, a, na.info, 9, 14, 7, 7).ok());
    ASSERT_TRUE(qpToRts(*v_, b, nb.info, 7, 14, 7, 7).ok());
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
  std::vector<ibv_wc> reap(ibv_cq* cq, size_t n) {
    std::vector<ibv_wc> out;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
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
    if (!qpToRtr(*v, qp, info, p).ok() || !qpToRts(*v, qp, info, 1, 14, 7, 7).ok()) _exit(8);
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
  p.remote_qpn = static_cast<uint32_t>(msg[0]);
  p.remote_psn = 1;
  p.remote_gid = i1.gid;
  p.mtu = IBV_MTU_4096;
  ASSERT_TRUE(qpToRtr(*v_, qa, a.info, p).ok());
  ASSERT_TRUE(qpToRts(*v_, qa, a.info, 1, 14, 7, 7).ok());
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
