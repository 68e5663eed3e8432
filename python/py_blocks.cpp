// Block requests and transfer plans of the Python TransferEngine (py_blocks.h).
#include "py_blocks.h"

#include <pybind11/stl.h>

#include <fmt/format.h>

#include <cstring>
#include <mutex>
#include <unordered_map>

#include "py_engine.h"

namespace py = pybind11;

namespace hawser::pymod {

namespace {

// One array argument: a view of 8-byte integers (zero-copy when the buffer
// is contiguous), or a copy (strided buffers, lists).
struct U64Array {
  std::vector<uint64_t> copy;
  py::buffer_info info;
  const uint64_t* data = nullptr;
  size_t size = 0;
};

Status arrayOf(const py::handle& obj, const char* name, U64Array& out) {
  if (PyObject_CheckBuffer(obj.ptr())) {
    py::buffer b = py::reinterpret_borrow<py::buffer>(obj);
    out.info = b.request();
    const std::string& f = out.info.format;
    // Native 8-byte integers: numpy uint64/int64 ("L"/"l" or "Q"/"q"), array('Q').
    const char c = f.empty() ? '?' : f.back();
    const bool ok_fmt = (f.size() == 1 || (f.size() == 2 && (f[0] == '<' || f[0] == '@' || f[0] == '='))) &&
                        (c == 'Q' || c == 'q' || c == 'L' || c == 'l') && out.info.itemsize == 8;
    if (!ok_fmt || out.info.ndim != 1)
      return {Code::kInvalidArgument,
              fmt::format("{}: a 1-D array of 8-byte integers is needed (numpy uint64/int64, array('Q')); got format "
                          "'{}', item size {}, {} dimension(s)",
                          name, f, out.info.itemsize, out.info.ndim)};
    out.size = static_cast<size_t>(out.info.shape[0]);
    if (out.info.strides[0] == 8) {
      out.data = static_cast<const uint64_t*>(out.info.ptr);
    } else {
      out.copy.resize(out.size);
      const char* p = static_cast<const char*>(out.info.ptr);
      for (size_t i = 0; i < out.size; ++i) std::memcpy(&out.copy[i], p + i * out.info.strides[0], 8);
      out.data = out.copy.data();
    }
    return Status::OK();
  }
  if (py::isinstance<py::sequence>(obj) && !py::isinstance<py::str>(obj)) {
    try {
      out.copy = obj.cast<std::vector<uint64_t>>();
    } catch (const py::cast_error&) {
      return {Code::kInvalidArgument, fmt::format("{}: a sequence of non-negative integers is needed", name)};
    }
    out.data = out.copy.data();
    out.size = out.copy.size();
    return Status::OK();
  }
  return {Code::kInvalidArgument,
          fmt::format("{}: an array (buffer protocol) or a sequence of integers is needed, not {}", name,
                      std::string(py::str(py::type::handle_of(obj).attr("__name__"))))};
}

// The three arrays of a block list; `lengths` may be one int for every block.
struct BlockArgs {
  U64Array local, remote, lengths;
  uint64_t block_length = 0;
  BlockArrays arrays() const {
    return BlockArrays{local.data, remote.data, lengths.data, block_length, local.size};
  }
  uint64_t bytes() const {
    if (!lengths.data) return block_length * local.size;
    uint64_t n = 0;
    for (size_t i = 0; i < lengths.size; ++i) n += lengths.data[i];
    return n;
  }
};

Status parseBlocks(const py::handle& local, const py::handle& remote, const py::handle& lengths, BlockArgs& out) {
  Status s = arrayOf(local, "local_addresses", out.local);
  if (s.ok()) s = arrayOf(remote, "remote_addresses", out.remote);
  if (!s.ok()) return s;
  if (py::isinstance<py::int_>(lengths)) {
    const auto v = lengths.cast<int64_t>();
    if (v < 0) return {Code::kInvalidArgument, fmt::format("lengths: {} is negative", v)};
    out.block_length = static_cast<uint64_t>(v);
  } else {
    s = arrayOf(lengths, "lengths", out.lengths);
    if (!s.ok()) return s;
    if (out.lengths.size != out.local.size)
      return {Code::kInvalidArgument, fmt::format("local_addresses ({}) and lengths ({}) differ in length",
                                                  out.local.size, out.lengths.size)};
  }
  if (out.local.size != out.remote.size)
    return {Code::kInvalidArgument, fmt::format("local_addresses ({}) and remote_addresses ({}) differ in length",
                                                out.local.size, out.remote.size)};
  return Status::OK();
}

bool opOf(int op, OpCode& out) {
  if (op != 0 && op != 1) return false;
  out = op == 0 ? OpCode::kRead : OpCode::kWrite;
  return true;
}

Status badOp(const char* what, int op) {
  return {Code::kInvalidArgument,
          fmt::format("{}: opcode {} is neither TransferOpcode.Read (0) nor TransferOpcode.Write (1)", what, op)};
}

}  // namespace

// The engine's internals the block methods use (PyEngine befriends it).
struct BlocksAccess {
  // Plans by id, with what their outcome needs.
  struct PlanRec {
    std::string target;
    uint64_t bytes = 0;
  };
  static std::mutex& planMu() {
    static std::mutex mu;
    return mu;
  }
  static std::unordered_map<const PyEngine*, std::unordered_map<PlanID, PlanRec>>& plans() {
    static std::unordered_map<const PyEngine*, std::unordered_map<PlanID, PlanRec>> p;
    return p;
  }

  static Status engine(PyEngine& pe, TransferEngine*& e) { return pe.engine(e); }

  static Status target(PyEngine& pe, const char* what, const std::string& name, TransferEngine*& e, SegmentID& seg) {
    Status s = pe.engine(e);
    if (!s.ok()) return context(s, what);
    s = pe.segment(e, name, seg);
    return s.ok() ? s : context(s, what);
  }

  static Submitted submitted(PyEngine& pe, const char* what, const std::string& target, uint64_t bytes) {
    Submitted sub;
    sub.tasks = 1;
    sub.bytes = bytes;
    sub.what = what;
    sub.target = target;
    double ms = static_cast<double>(pe.limits_.sync_timeout_ms) +
                static_cast<double>(bytes) * static_cast<double>(pe.limits_.ns_per_byte) / 1e6;
    sub.deadline = Clock::now() + Millis(static_cast<int64_t>(std::min(ms, 1e12)));
    return sub;
  }

  // Allocates a batch of one task, runs `submit` on it; on success the batch
  // is waited for (sync) or tracked for get_batch_transfer_status (async).
  template <class F>
  static int64_t run(PyEngine& pe, const char* what, const std::string& target, uint64_t bytes, bool sync, F&& submit) {
    Status s;
    Submitted sub = submitted(pe, what, target, bytes);
    {
      py::gil_scoped_release nogil;
      pe.reap();
      TransferEngine* e = nullptr;
      s = pe.engine(e);
      BatchID b = kInvalidBatch;
      if (s.ok()) s = e->allocateBatchID(1, b);
      if (s.ok()) {
        s = submit(e, b);
        if (!s.ok()) (void)e->freeBatchID(b);
      }
      if (!s.ok()) {
        s = context(s, fmt::format("{} to '{}'", what, target));
      } else {
        sub.id = b;
        if (sync) s = pe.finish(sub);
        else pe.batches_.track(sub);
      }
    }
    if (!s.ok()) return pe.ret(s);
    return sync ? 0 : static_cast<int64_t>(sub.id);
  }
};

void defineBlocks(py::class_<PyEngine>& cls) {
  using A = BlocksAccess;
  auto blocks = [](PyEngine& pe, const char* what, bool sync, const std::string& target, const py::object& local,
                   const py::object& remote, const py::object& lengths, int op) -> int64_t {
    OpCode o;
    if (!opOf(op, o)) return pe.ret(badOp(what, op));
    BlockArgs args;
    Status s = parseBlocks(local, remote, lengths, args);
    TransferEngine* e = nullptr;
    SegmentID seg = kInvalidSegment;
    if (s.ok()) s = A::target(pe, what, target, e, seg);
    if (!s.ok()) return pe.ret(context(s, what));
    BlockArrays arrays = args.arrays();
    arrays.route = pe.routeContract();  // set_route_contract
    return A::run(pe, what, target, args.bytes(), sync, [&](TransferEngine* eng, BatchID b) {
      return eng->submitBlocks(b, o, seg, arrays);
    });
  };
  auto strided = [](PyEngine& pe, const char* what, bool sync, const std::string& target, uint64_t local_base,
                    uint64_t remote_base, uint64_t block_length, uint64_t local_stride, uint64_t remote_stride,
                    uint64_t count, int op) -> int64_t {
    OpCode o;
    if (!opOf(op, o)) return pe.ret(badOp(what, op));
    TransferEngine* e = nullptr;
    SegmentID seg = kInvalidSegment;
    Status s = A::target(pe, what, target, e, seg);
    if (!s.ok()) return pe.ret(s);
    StridedBlocks sb{reinterpret_cast<void*>(local_base), remote_base, block_length, local_stride, remote_stride, count,
                     pe.routeContract()};
    return A::run(pe, what, target, block_length * count, sync,
                  [&](TransferEngine* eng, BatchID b) { return eng->submitStrided(b, o, seg, sb); });
  };
  cls.def(
         "transfer_blocks_sync",
         [blocks](PyEngine& pe, const std::string& t, const py::object& l, const py::object& r, const py::object& n,
                  int op) { return blocks(pe, "transfer_blocks_sync", true, t, l, r, n, op); },
         py::arg("target_hostname"), py::arg("local_addresses"), py::arg("remote_addresses"), py::arg("lengths"),
         py::arg("opcode"),
         "Moves many blocks as one request and waits: block i is lengths[i] (or lengths, an int, for all) bytes "
         "between local_addresses[i] and remote_addresses[i]. Arrays: numpy uint64/int64, array('Q') or lists. "
         "0 or a negative code; an error names the bad block.")
      .def(
          "transfer_blocks_async",
          [blocks](PyEngine& pe, const std::string& t, const py::object& l, const py::object& r, const py::object& n,
                   int op) { return blocks(pe, "transfer_blocks_async", false, t, l, r, n, op); },
          py::arg("target_hostname"), py::arg("local_addresses"), py::arg("remote_addresses"), py::arg("lengths"),
          py::arg("opcode"),
          "As transfer_blocks_sync without waiting: a batch id for get_batch_transfer_status / "
          "transfer_check_status, or a negative code.")
      .def(
          "transfer_strided_sync",
          [strided](PyEngine& pe, const std::string& t, uint64_t lb, uint64_t rb, uint64_t len, uint64_t ls,
                    uint64_t rs, uint64_t count, int op) {
            return strided(pe, "transfer_strided_sync", true, t, lb, rb, len, ls, rs, count, op);
          },
          py::arg("target_hostname"), py::arg("local_base"), py::arg("remote_base"), py::arg("block_length"),
          py::arg("local_stride"), py::arg("remote_stride"), py::arg("count"), py::arg("opcode"),
          "count blocks of block_length bytes, block i at local_base + i*local_stride and remote_base + "
          "i*remote_stride, as one request; waits. 0 or a negative code.")
      .def(
          "transfer_strided_async",
          [strided](PyEngine& pe, const std::string& t, uint64_t lb, uint64_t rb, uint64_t len, uint64_t ls,
                    uint64_t rs, uint64_t count, int op) {
            return strided(pe, "transfer_strided_async", false, t, lb, rb, len, ls, rs, count, op);
          },
          py::arg("target_hostname"), py::arg("local_base"), py::arg("remote_base"), py::arg("block_length"),
          py::arg("local_stride"), py::arg("remote_stride"), py::arg("count"), py::arg("opcode"),
          "As transfer_strided_sync without waiting: a batch id, or a negative code.")
      .def(
          "prepare_blocks",
          [](PyEngine& pe, const std::string& t, const py::object& l, const py::object& r, const py::object& n,
             int op) -> int64_t {
            OpCode o;
            if (!opOf(op, o)) return pe.ret(badOp("prepare_blocks", op));
            BlockArgs args;
            Status s = parseBlocks(l, r, n, args);
            TransferEngine* e = nullptr;
            SegmentID seg = kInvalidSegment;
            if (s.ok()) s = A::target(pe, "prepare_blocks", t, e, seg);
            PlanID plan = kInvalidPlan;
            if (s.ok()) {
              py::gil_scoped_release nogil;
              BlockArrays arrays = args.arrays();
              arrays.route = pe.routeContract();
              s = e->prepareBlocks(o, seg, arrays, plan);
            }
            if (!s.ok()) return pe.ret(context(s, "prepare_blocks"));
            std::lock_guard lk(A::planMu());
            A::plans()[&pe][plan] = A::PlanRec{t, args.bytes()};
            return static_cast<int64_t>(plan);
          },
          py::arg("target_hostname"), py::arg("local_addresses"), py::arg("remote_addresses"), py::arg("lengths"),
          py::arg("opcode"),
          "Checks the blocks once and keeps them as a plan: a positive plan id for post_plan / "
          "transfer_plan_sync, or a negative code (the error names the bad block).")
      .def(
          "prepare_strided",
          [](PyEngine& pe, const std::string& t, uint64_t lb, uint64_t rb, uint64_t len, uint64_t ls, uint64_t rs,
             uint64_t count, int op) -> int64_t {
            OpCode o;
            if (!opOf(op, o)) return pe.ret(badOp("prepare_strided", op));
            TransferEngine* e = nullptr;
            SegmentID seg = kInvalidSegment;
            Status s = A::target(pe, "prepare_strided", t, e, seg);
            PlanID plan = kInvalidPlan;
            if (s.ok()) {
              py::gil_scoped_release nogil;
              s = e->prepareStrided(o, seg, {reinterpret_cast<void*>(lb), rb, len, ls, rs, count, pe.routeContract()},
                                    plan);
            }
            if (!s.ok()) return pe.ret(context(s, "prepare_strided"));
            std::lock_guard lk(A::planMu());
            A::plans()[&pe][plan] = A::PlanRec{t, len * count};
            return static_cast<int64_t>(plan);
          },
          py::arg("target_hostname"), py::arg("local_base"), py::arg("remote_base"), py::arg("block_length"),
          py::arg("local_stride"), py::arg("remote_stride"), py::arg("count"), py::arg("opcode"),
          "A strided layout as a plan: a positive plan id, or a negative code.")
      .def(
          "post_plan",
          [](PyEngine& pe, int64_t plan) -> int64_t {
            A::PlanRec rec;
            {
              std::lock_guard lk(A::planMu());
              auto& m = A::plans()[&pe];
              if (auto it = m.find(static_cast<PlanID>(plan)); it != m.end()) rec = it->second;
            }
            return A::run(pe, "post_plan", rec.target, rec.bytes, false, [&](TransferEngine* e, BatchID b) {
              return e->postPlan(b, static_cast<PlanID>(plan));
            });
          },
          py::arg("plan_id"),
          "Posts a prepared plan (no per-block work): a batch id for get_batch_transfer_status / "
          "transfer_check_status, or a negative code.")
      .def(
          "transfer_plan_sync",
          [](PyEngine& pe, int64_t plan) -> int64_t {
            A::PlanRec rec;
            {
              std::lock_guard lk(A::planMu());
              auto& m = A::plans()[&pe];
              if (auto it = m.find(static_cast<PlanID>(plan)); it != m.end()) rec = it->second;
            }
            return A::run(pe, "transfer_plan_sync", rec.target, rec.bytes, true, [&](TransferEngine* e, BatchID b) {
              return e->postPlan(b, static_cast<PlanID>(plan));
            });
          },
          py::arg("plan_id"), "Posts a prepared plan and waits: 0 or a negative code.")
      .def(
          "plan_info",
          [](PyEngine& pe, int64_t plan) -> py::object {
            TransferEngine* e = nullptr;
            Status s = A::engine(pe, e);
            PlanInfo info;
            if (s.ok()) s = e->planInfo(static_cast<PlanID>(plan), info);
            if (!s.ok()) {
              pe.fail(context(s, "plan_info"));
              return py::none();
            }
            py::dict d;
            d["blocks"] = info.blocks;
            d["runs"] = info.runs;
            d["bytes"] = info.bytes;
            return d;
          },
          py::arg("plan_id"),
          "{'blocks': as given, 'runs': after merging blocks contiguous on both sides, 'bytes': ...}, or None "
          "(last_error() says why).")
      .def(
          "release_plan",
          [](PyEngine& pe, int64_t plan) -> int {
            TransferEngine* e = nullptr;
            Status s = A::engine(pe, e);
            if (s.ok()) s = e->releasePlan(static_cast<PlanID>(plan));
            if (s.ok()) {
              std::lock_guard lk(A::planMu());
              A::plans()[&pe].erase(static_cast<PlanID>(plan));
            }
            return pe.ret(s.ok() ? s : context(s, "release_plan"));
          },
          py::arg("plan_id"), "Releases a plan; batches posted from it are not affected. 0 or a negative code.");
}

}  // namespace hawser::pymod
