#include "transport/rdma/verbs_api.h"

#include <dlfcn.h>

#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include <fmt/format.h>

namespace hawser::rdma {

int VerbsApi::queryPort(ibv_context* ctx, uint8_t port, ibv_port_attr* attr) const {
  // Same dispatch as ___ibv_query_port in <infiniband/verbs.h>.
  struct verbs_context* vctx = verbs_get_ctx_op(ctx, query_port);
  if (vctx) return vctx->query_port(ctx, port, attr, sizeof(*attr));
  std::memset(attr, 0, sizeof(*attr));
  return query_port_compat(ctx, port, reinterpret_cast<struct _compat_ibv_port_attr*>(attr));
}

ibv_mr* VerbsApi::regMr(ibv_pd* pd, void* addr, size_t len, unsigned int access) const {
  if ((access & IBV_ACCESS_OPTIONAL_RANGE) != 0) {
    if (reg_mr_iova2) return reg_mr_iova2(pd, addr, len, reinterpret_cast<uintptr_t>(addr), access);
    access &= ~static_cast<unsigned int>(IBV_ACCESS_OPTIONAL_RANGE);
  }
  return reg_mr(pd, addr, len, static_cast<int>(access));
}

namespace {

template <typename F>
bool resolve(void* handle, const char* name, F& fn, bool required, std::string& missing) {
  void* sym = dlsym(handle, name);
  fn = reinterpret_cast<F>(sym);
  if (!sym && required) {
    if (!missing.empty()) missing += ", ";
    missing += name;
  }
  return sym != nullptr;
}

std::mutex g_mu;
std::map<std::string, std::unique_ptr<VerbsApi>>& tables() {
  static auto* m = new std::map<std::string, std::unique_ptr<VerbsApi>>();
  return *m;
}

}  // namespace

Status loadVerbs(const std::string& path, const VerbsApi*& out) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = tables().find(path);
  if (it != tables().end()) {
    out = it->second.get();
    return Status::OK();
  }
  // Never dlclose(): a provider may keep threads that outlive any one user,
  // and libibverbs itself is not meant to be unloaded.
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* err = dlerror();
    return Status(Code::kNotSupported,
                  fmt::format("rdma.verbs_lib '{}' cannot be loaded: {}", path, err ? err : "?"));
  }
  auto api = std::make_unique<VerbsApi>();
  api->path = path;
  std::string missing;
  resolve(h, "ibv_get_device_list", api->get_device_list, true, missing);
  resolve(h, "ibv_free_device_list", api->free_device_list, true, missing);
  resolve(h, "ibv_get_device_name", api->get_device_name, true, missing);
  resolve(h, "ibv_open_device", api->open_device, true, missing);
  resolve(h, "ibv_close_device", api->close_device, true, missing);
  resolve(h, "ibv_query_device", api->query_device, true, missing);
  resolve(h, "ibv_query_port", api->query_port_compat, true, missing);
  resolve(h, "ibv_query_gid", api->query_gid, true, missing);
  resolve(h, "ibv_alloc_pd", api->alloc_pd, true, missing);
  resolve(h, "ibv_dealloc_pd", api->dealloc_pd, true, missing);
  resolve(h, "ibv_reg_mr", api->reg_mr, true, missing);
  resolve(h, "ibv_dereg_mr", api->dereg_mr, true, missing);
  resolve(h, "ibv_create_comp_channel", api->create_comp_channel, true, missing);
  resolve(h, "ibv_destroy_comp_channel", api->destroy_comp_channel, true, missing);
  resolve(h, "ibv_create_cq", api->create_cq, true, missing);
  resolve(h, "ibv_destroy_cq", api->destroy_cq, true, missing);
  resolve(h, "ibv_get_cq_event", api->get_cq_event, true, missing);
  resolve(h, "ibv_ack_cq_events", api->ack_cq_events, true, missing);
  resolve(h, "ibv_create_qp", api->create_qp, true, missing);
  resolve(h, "ibv_modify_qp", api->modify_qp, true, missing);
  resolve(h, "ibv_query_qp", api->query_qp, true, missing);
  resolve(h, "ibv_destroy_qp", api->destroy_qp, true, missing);
  resolve(h, "ibv_get_async_event", api->get_async_event, true, missing);
  resolve(h, "ibv_ack_async_event", api->ack_async_event, true, missing);
  resolve(h, "ibv_reg_mr_iova2", api->reg_mr_iova2, false, missing);
  resolve(h, "ibv_reg_dmabuf_mr", api->reg_dmabuf_mr, false, missing);
  resolve(h, "_ibv_query_gid_ex", api->query_gid_ex, false, missing);
  resolve(h, "ibv_wc_status_str", api->wc_status_str, false, missing);
  resolve(h, "ibv_event_type_str", api->event_type_str, false, missing);
  if (!missing.empty()) {
    return Status(Code::kNotSupported,
                  fmt::format("rdma.verbs_lib '{}' lacks entry points: {}", path, missing));
  }
  out = api.get();
  tables().emplace(path, std::move(api));
  return Status::OK();
}

const char* wcStatusName(int status) {
  switch (status) {
    case IBV_WC_SUCCESS: return "IBV_WC_SUCCESS";
    case IBV_WC_LOC_LEN_ERR: return "IBV_WC_LOC_LEN_ERR";
    case IBV_WC_LOC_QP_OP_ERR: return "IBV_WC_LOC_QP_OP_ERR";
    case IBV_WC_LOC_EEC_OP_ERR: return "IBV_WC_LOC_EEC_OP_ERR";
    case IBV_WC_LOC_PROT_ERR: return "IBV_WC_LOC_PROT_ERR";
    case IBV_WC_WR_FLUSH_ERR: return "IBV_WC_WR_FLUSH_ERR";
    case IBV_WC_MW_BIND_ERR: return "IBV_WC_MW_BIND_ERR";
    case IBV_WC_BAD_RESP_ERR: return "IBV_WC_BAD_RESP_ERR";
    case IBV_WC_LOC_ACCESS_ERR: return "IBV_WC_LOC_ACCESS_ERR";
    case IBV_WC_REM_INV_REQ_ERR: return "IBV_WC_REM_INV_REQ_ERR";
    case IBV_WC_REM_ACCESS_ERR: return "IBV_WC_REM_ACCESS_ERR";
    case IBV_WC_REM_OP_ERR: return "IBV_WC_REM_OP_ERR";
    case IBV_WC_RETRY_EXC_ERR: return "IBV_WC_RETRY_EXC_ERR";
    case IBV_WC_RNR_RETRY_EXC_ERR: return "IBV_WC_RNR_RETRY_EXC_ERR";
    case IBV_WC_LOC_RDD_VIOL_ERR: return "IBV_WC_LOC_RDD_VIOL_ERR";
    case IBV_WC_REM_INV_RD_REQ_ERR: return "IBV_WC_REM_INV_RD_REQ_ERR";
    case IBV_WC_REM_ABORT_ERR: return "IBV_WC_REM_ABORT_ERR";
    case IBV_WC_INV_EECN_ERR: return "IBV_WC_INV_EECN_ERR";
    case IBV_WC_INV_EEC_STATE_ERR: return "IBV_WC_INV_EEC_STATE_ERR";
    case IBV_WC_FATAL_ERR: return "IBV_WC_FATAL_ERR";
    case IBV_WC_RESP_TIMEOUT_ERR: return "IBV_WC_RESP_TIMEOUT_ERR";
    case IBV_WC_GENERAL_ERR: return "IBV_WC_GENERAL_ERR";
    case IBV_WC_TM_ERR: return "IBV_WC_TM_ERR";
    case IBV_WC_TM_RNDV_INCOMPLETE: return "IBV_WC_TM_RNDV_INCOMPLETE";
    default: return "IBV_WC_UNKNOWN";
  }
}

}  // namespace hawser::rdma
