// The ibverbs entry points the rdma transport calls, resolved at run time.
//
// The transport is written against <infiniband/verbs.h> exactly as for a
// ConnectX NIC, but the non-inline entry points (ibv_open_device,
// ibv_reg_mr, ibv_create_qp, ...) are reached through this table, filled by
// dlopen()/dlsym() of a verbs library: "libibverbs.so.1" by default, or the
// library named by config "rdma.verbs_lib" (HAWSER_RDMA_VERBS_LIB), e.g. the
// test-only software provider. The data-path calls ibv_post_send,
// ibv_poll_cq and ibv_req_notify_cq stay the header's static inline
// functions: they dispatch through the device context's ops table, which
// whichever library opened the device has filled.
//
// Loading the library at run time also means a host without rdma-core runs
// the engine fine; the rdma transport then reports why it is not offered.
#pragma once

#include <infiniband/verbs.h>

#include <string>

#include "hawser/status.h"

namespace hawser::rdma {

struct VerbsApi {
  std::string path;  // library this table was resolved from

  // Required.
  ibv_device** (*get_device_list)(int*) = nullptr;
  void (*free_device_list)(ibv_device**) = nullptr;
  const char* (*get_device_name)(ibv_device*) = nullptr;
  ibv_context* (*open_device)(ibv_device*) = nullptr;
  int (*close_device)(ibv_context*) = nullptr;
  int (*query_device)(ibv_context*, ibv_device_attr*) = nullptr;
  int (*query_port_compat)(ibv_context*, uint8_t, struct _compat_ibv_port_attr*) = nullptr;
  int (*query_gid)(ibv_context*, uint8_t, int, ibv_gid*) = nullptr;
  ibv_pd* (*alloc_pd)(ibv_context*) = nullptr;
  int (*dealloc_pd)(ibv_pd*) = nullptr;
  ibv_mr* (*reg_mr)(ibv_pd*, void*, size_t, int) = nullptr;
  int (*dereg_mr)(ibv_mr*) = nullptr;
  ibv_comp_channel* (*create_comp_channel)(ibv_context*) = nullptr;
  int (*destroy_comp_channel)(ibv_comp_channel*) = nullptr;
  ibv_cq* (*create_cq)(ibv_context*, int, void*, ibv_comp_channel*, int) = nullptr;
  int (*destroy_cq)(ibv_cq*) = nullptr;
  int (*get_cq_event)(ibv_comp_channel*, ibv_cq**, void**) = nullptr;
  void (*ack_cq_events)(ibv_cq*, unsigned int) = nullptr;
  ibv_qp* (*create_qp)(ibv_pd*, ibv_qp_init_attr*) = nullptr;
  int (*modify_qp)(ibv_qp*, ibv_qp_attr*, int) = nullptr;
  int (*query_qp)(ibv_qp*, ibv_qp_attr*, int, ibv_qp_init_attr*) = nullptr;
  int (*destroy_qp)(ibv_qp*) = nullptr;
  int (*get_async_event)(ibv_context*, ibv_async_event*) = nullptr;
  void (*ack_async_event)(ibv_async_event*) = nullptr;

  // Optional (null when the library is older than the verb).
  ibv_mr* (*reg_mr_iova2)(ibv_pd*, void*, size_t, uint64_t, unsigned int) = nullptr;   // 1.8
  ibv_mr* (*reg_dmabuf_mr)(ibv_pd*, uint64_t, size_t, uint64_t, int, int) = nullptr;  // 1.12
  int (*query_gid_ex)(ibv_context*, uint32_t, uint32_t, ibv_gid_entry*, uint32_t,
                      size_t) = nullptr;  // 1.11 (_ibv_query_gid_ex)
  const char* (*wc_status_str)(ibv_wc_status) = nullptr;
  const char* (*event_type_str)(ibv_event_type) = nullptr;

  // ibv_query_port as the header's inline wrapper does it: the extended
  // context op when the provider has one, else the exported compat entry.
  int queryPort(ibv_context* ctx, uint8_t port, ibv_port_attr* attr) const;
  // ibv_reg_mr, going through ibv_reg_mr_iova2 when an optional access flag
  // (RELAXED_ORDERING) is asked for, as the header's macro does.
  ibv_mr* regMr(ibv_pd* pd, void* addr, size_t len, unsigned int access) const;
};

// Loads (once per path; never unloaded) and returns the table for `path`.
// kNotSupported naming the library and dlerror() when it cannot be loaded or
// lacks a required entry point.
Status loadVerbs(const std::string& path, const VerbsApi*& out);

// "IBV_WC_REM_ACCESS_ERR" etc.; "IBV_WC_<n>" for unknown values.
const char* wcStatusName(int status);

}  // namespace hawser::rdma
