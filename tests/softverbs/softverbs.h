// hawser software verbs provider (tests only).
//
// libhawser_softverbs.so exports the libibverbs entry points the rdma
// transport calls (ibv_get_device_list, ibv_open_device, ibv_reg_mr,
// ibv_create_qp, ibv_modify_qp, ...) and fills each context's ops table for
// the header-inline ones (ibv_post_send, ibv_poll_cq, ibv_req_notify_cq), so
// the transport runs over it unchanged when HAWSER_RDMA_VERBS_LIB names it.
//
// Model: every process on the host that opens a soft device shares one
// registry (a file mapped MAP_SHARED in HAWSER_SOFTVERBS_DIR) holding the
// devices, the QPs (number, owner pid, state, connected peer, and what the
// wire depends on: path MTU, PSNs, READ depth/resources, GIDs and their
// type, LIDs) and the MRs (key, owner pid, PD, range, access, copies in
// progress). Each opened context runs one "NIC" thread that executes posted
// RDMA READ/WRITE work requests in order per QP: it checks the local lkey,
// the remote QP, that both ends of the RC pair agree (PSNs, path MTU, READ
// depth within the responder's resources, GID type and addresses) and the
// rkey exactly as an RC pair of HCAs does, then moves the bytes with
// process_vm_readv/writev into the target process — whose CPU takes no part
// — and posts the completion. docs/rdma.md lists every rule it enforces.
//
// Environment:
//   HAWSER_SOFTVERBS_DEVICES  comma-separated devices this process opens
//                             (two processes with different lists are two
//                             hosts), each name[:opt...]: numa=N,
//                             mtu=256..4096, ib (InfiniBand link layer: LID
//                             addressing), v1 (RoCE v1 GIDs only), v6 (IPv6
//                             GIDs only), down (port DOWN), rd_atom=N /
//                             init_rd_atom=N (max_qp_rd_atom /
//                             max_qp_init_rd_atom, default 16), slowpost=US /
//                             slowpoll=US (each ibv_post_send / ibv_poll_cq
//                             takes that long). Default: "sv0".
//   HAWSER_SOFTVERBS_DIR      registry + fake sysfs directory
//                             (default /tmp/hawser-softverbs).
//
// Fault injection (any process sharing the registry; affects all of them):
//   int hawser_softverbs_control(const char* command), 0 or an errno:
//     "down <dev>"   the NIC disappears: its contexts get
//                    IBV_EVENT_DEVICE_FATAL, their QPs go to ERR (posted WRs
//                    flush with IBV_WC_WR_FLUSH_ERR), requesters targeting it
//                    get IBV_WC_RETRY_EXC_ERR, it leaves the device list.
//     "fatal <dev>"  as "down", but what it held never completes (no flush).
//     "up <dev>"     lists it again (contexts already dead stay dead).
//     "stall <dev>" / "resume <dev>"  it executes nothing meanwhile.
//     "cqerr <dev>"  its CQs overrun now (IBV_EVENT_CQ_ERR; completions lost).
//     "postfail <dev> <n>"  its next n ibv_post_send calls fail (ENOMEM).
//     "fail <dev> <n> <status>"  the next n WRs executed by <dev> as requester
//                    complete with <status> (IBV_WC_* name or number) and
//                    move their QP to ERR, as a real error completion does.
//     "badkey <dev> <n>"  the next n WRs executed by <dev> as requester
//                    present a corrupted rkey (a requester with a wrong key).
//     "revoke <dev> <key>"  the MR with this key disappears from <dev> while
//                    its owner and its peers still hold the keys (the MR
//                    was deregistered under them).
//     "clear <dev>"  cancels pending "fail"/"badkey"/"postfail" counts.
#pragma once

#include <stdint.h>

extern "C" {
typedef int (*hawser_softverbs_control_fn)(const char* command);

// One ibv_reg_dmabuf_mr call as the provider saw it (the GPU check stops at
// this call: no NIC there). fd_open, fd_size (lseek to its end; -1 when that
// fails) and fd_target (readlink of /proc/self/fd/N: "/dmabuf:" for a
// dma-buf) describe the fd at the moment of the call.
struct hawser_softverbs_dmabuf_call {
  int fd;
  int fd_open;
  int64_t fd_size;
  char fd_target[96];
  uint64_t offset;
  uint64_t length;
  uint64_t iova;
  int access;
  int mapped;  // the provider could map the fd's pages (its soft NIC copies through them)
};
// Fills up to `max` of the calls this process made (oldest first); returns
// how many there were.
typedef int (*hawser_softverbs_dmabuf_calls_fn)(struct hawser_softverbs_dmabuf_call* out, int max);
}
