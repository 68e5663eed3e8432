// Block requests, checked once: every block against local registered memory
// and the target's buffers (an error names the block), destinations that
// overlap refused, one route for the whole request, and blocks contiguous
// on both sides merged into runs. The result is a BlockPlan
// (block_plan.h); block_api.cpp submits and posts plans.
#include <algorithm>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/log.h"
#include "engine/engine_impl.h"

namespace hawser {

namespace {

Status at(size_t i, Code c, const std::string& what) { return {c, fmt::format("blocks[{}]: {}", i, what)}; }

const char* destinationSide(OpCode op) { return op == OpCode::kRead ? "local memory (READ)" : "the target (WRITE)"; }

// A block's destination and its index in the request.
struct Dest {
  uint64_t addr;
  uint64_t index;
};

// Sorts by address: a least-significant-digit radix sort over the bits the
// addresses differ in (11 bits a pass; a KV cache's blocks lie within a few
// GiB: 3 or 4 passes), which costs a few ns a block where a comparison sort
// of a block table costs tens.
void sortDests(std::vector<Dest>& v) {
  if (v.size() < 256) {
    std::sort(v.begin(), v.end(), [](const Dest& a, const Dest& b) { return a.addr < b.addr; });
    return;
  }
  uint64_t lo = UINT64_MAX, hi = 0;
  for (const Dest& d : v) {
    lo = std::min(lo, d.addr);
    hi = std::max(hi, d.addr);
  }
  const int bits = hi == lo ? 0 : 64 - __builtin_clzll(hi - lo);
  constexpr int kDigit = 11;
  constexpr size_t kBuckets = size_t(1) << kDigit;
  std::vector<Dest> tmp(v.size());
  std::vector<size_t> count(kBuckets);
  for (int shift = 0; shift < bits; shift += kDigit) {
    std::fill(count.begin(), count.end(), 0);
    for (const Dest& d : v) ++count[((d.addr - lo) >> shift) & (kBuckets - 1)];
    size_t sum = 0;
    for (size_t& c : count) {
      const size_t k = c;
      c = sum;
      sum += k;
    }
    for (const Dest& d : v) tmp[count[((d.addr - lo) >> shift) & (kBuckets - 1)]++] = d;
    v.swap(tmp);
  }
}

}  // namespace

Status EngineImpl::blockRoute(const SegmentView& view, uint32_t local_kind, uint32_t remote_kind, int buffer,
                              const RouteContract& rc, RouteChoice& out) {
  RouteQuery q;
  q.local_kind = local_kind;
  q.remote_kind = remote_kind;
  q.buffer = buffer;
  const char* source = nullptr;
  const Contract contract = contractOf(rc, &source);
  out = selectRoute(view, q, forced_transport_, contract);
  if (out.route) return Status::OK();
  if (contract.any())
    if (const Route* would = selectRoute(view, q, forced_transport_))
      return contractRefusal(view, q, contract, *would, source);
  std::string why;
  (void)selectRoute(view, q, forced_transport_, &why);
  const Status& only = view.routes.size() == 1 ? view.routes[0].refusal : Status::OK();
  if (!only.ok() && only.code() != Code::kNotSupported)
    return {only.code(), fmt::format("segment '{}': {}", view.desc->name, only.message())};
  return {Code::kNoTransport, fmt::format("no installed transport ({}) can serve it to segment '{}': {}",
                                          fmt::join(transportNames(), ","), view.desc->name, why)};
}

Status EngineImpl::routeBlock(const SegmentView& view, const RouteQuery& q, const RouteContract& rc,
                              const std::string& loc, std::vector<RouteQuery>* routed, const Route*& route,
                              BlockPlan& plan) {
  RouteChoice choice;
  Status s = blockRoute(view, q.local_kind, q.remote_kind, q.buffer, rc, choice);
  if (!s.ok()) return s;
  if (!route) {
    route = choice.route;
    plan.fallback = choice.fallback;
    plan.fallback_why = choice.fallback_why;
  } else if (choice.route->transport != route->transport) {
    if (!routed || !joinRoutes(view, *routed, q, *choice.route, rc, route, plan))
      return {Code::kInvalidArgument,
              fmt::format("local {} would go through transport {}, the blocks before it through {}: one block request "
                          "moves through one transport (split it by kind of memory)",
                          loc, choice.route->name, route->name)};
  } else if (choice.fallback && !plan.fallback) {
    plan.fallback = choice.fallback;
    plan.fallback_why = choice.fallback_why;
  }
  if (routed) routed->push_back(q);
  return Status::OK();
}

Status EngineImpl::routeBuffers(const BlockSource& src, BlockPlan& plan, const Route*& route) {
  // The runs' remote buffers in order, each new one (with each kind of
  // local memory) checked once (blocks are many, buffers few): the route
  // the first run chose must serve it, or a costlier one must serve them
  // all (joinRoutes).
  const SegmentDesc& d = *plan.view->desc;
  std::vector<uint8_t> seen(2 * d.buffers.size());
  std::vector<RouteQuery> routed;
  for (size_t k = 0; k < plan.run_buffer.size(); ++k) {
    const int b = plan.run_buffer[k];
    const LocalRegion& lr = plan.regions[plan.run_region.empty() ? 0 : plan.run_region[k]];
    if (b < 0 || std::exchange(seen[2 * static_cast<size_t>(b) + (lr.gpu >= 0)], uint8_t{1})) continue;
    const RouteQuery q{lr.gpu >= 0 ? kGpuMemory : kHostMemory, memoryKindOf(d.buffers[static_cast<size_t>(b)].location),
                       b};
    if (routed.empty()) {
      routed.push_back(q);  // the first run's: the route was chosen by it
      continue;
    }
    Status s = routeBlock(*plan.view, q, src.arrays.route, lr.gpu >= 0 ? "GPU memory" : "host memory", &routed, route,
                          plan);
    if (s.ok()) continue;
    // Name the first block in that buffer.
    const Run r = plan.list[k];
    size_t i = 0;
    while (i < src.count && !(src.at(i).remote == r.remote && src.at(i).local == r.local)) ++i;
    return at(i, s.code(), s.message());
  }
  return Status::OK();
}

bool EngineImpl::joinRoutes(const SegmentView& view, const std::vector<RouteQuery>& before, const RouteQuery& q,
                            const Route& chosen, const RouteContract& rc, const Route*& route, BlockPlan& plan) {
  // The blocks before took `route`, these take `chosen`: the costlier
  // of the two serves them all when it serves both sides and the cheaper
  // one fails some of them only by declining their remote buffer (nvlink: a
  // buffer without an IPC handle). That is a fallback from the cheaper one.
  const Contract contract = contractOf(rc, nullptr);
  const bool now_costlier = cheaperRoute(*route, chosen);
  const Route* costly = now_costlier ? &chosen : route;
  const Route* cheap = now_costlier ? route : &chosen;
  RouteDecline declined;
  auto take = [&](const RouteQuery& x) {
    if (!routeServes(view, *costly, x, forced_transport_, contract)) return false;
    RouteDecline d;
    if (routeServes(view, *cheap, x, forced_transport_, contract, &d)) return true;
    if (!d.declined()) return false;
    if (!declined.declined()) declined = std::move(d);
    return true;
  };
  bool ok = take(q);
  for (size_t k = 0; ok && k < before.size(); ++k) ok = take(before[k]);
  if (!ok || !declined.declined()) return false;
  if (now_costlier) {
    route = costly;
    plan.fallback = cheap;
    plan.fallback_why = std::move(declined);
  }
  return true;
}

Status EngineImpl::startPlan(OpCode op, SegmentID target, BlockPlan& plan) {
  Status s = checkInit();
  if (!s.ok()) return s;
  if (op != OpCode::kRead && op != OpCode::kWrite)
    return {Code::kInvalidArgument, fmt::format("opcode {} is neither READ nor WRITE", int(op))};
  plan.op = op;
  plan.target = target;
  plan.view = currentView(target);
  if (!plan.view) return {Code::kSegmentNotFound, fmt::format("target_id {} is not an open segment", target)};
  plan.removals = registry_.removals();
  return Status::OK();
}

Status EngineImpl::buildBlocks(OpCode op, SegmentID target, const BlockSource& src, BlockPlan& plan) {
  Status s = startPlan(op, target, plan);
  if (!s.ok()) return s;
  bool refreshed = false;
  s = checkBlocks(src, plan, refreshed);
  if (s.code() == Code::kOutOfRange && refreshed) {
    // A block outside the target's buffers as this engine knew them: the
    // owner may have registered it since. Check again with its descriptor
    // fetched anew (buffer indices change with it).
    if (auto fresh = refreshSegment(target)) {
      plan = BlockPlan{};
      s = startPlan(op, target, plan);
      if (!s.ok()) return s;
      plan.view = fresh;
      bool again = false;
      s = checkBlocks(src, plan, again);
    }
  }
  return s;
}

Status EngineImpl::checkBlocks(const BlockSource& src, BlockPlan& plan, bool& refresh) {
  Status s;
  const OpCode op = plan.op;
  const size_t n = src.count;
  if (n == 0) return {Code::kInvalidArgument, "blocks is empty (count 0)"};
  if (!src.blocks && (!src.arrays.local || !src.arrays.remote))
    return {Code::kInvalidArgument, fmt::format("blocks.{} is null with count {}", src.arrays.local ? "remote" : "local", n)};
  const bool file = plan.view->desc->kind == SegmentDesc::Kind::kFile;
  const uint64_t file_span = file ? plan.view->desc->fileSpan() : 0;
  const bool read = op == OpCode::kRead;

  // Caches: consecutive blocks mostly lie in the region / buffer of the one before.
  uint64_t reg_start = 0, reg_end = 0;
  std::string loc;
  int buf = -1;
  uint64_t buf_start = 0, buf_end = 0;
  uint32_t local_kind = 0, remote_kind = kHostMemory;
  const Route* route = nullptr;
  int run_buf = -1;  // buffer of the open run
  uint64_t run_reg = 0;
  bool one_buffer = true;
  // Destinations in order so far: overlap is found in the same pass.
  bool sorted = true;
  uint64_t prev_dest = 0, max_end = 0;
  size_t max_end_block = 0;

  uint32_t cur_region = 0;  // index of the current region in plan.regions
  plan.list.clear();
  plan.regions.clear();
  plan.run_region.clear();
  plan.run_buffer.clear();
  plan.list.reserve(n);  // no copies while growing (at most 24 bytes a block; fewer runs are trimmed below)
  for (size_t i = 0; i < n; ++i) {
    const Run b = src.at(i);
    if (b.length == 0) return at(i, Code::kInvalidArgument, "length is 0");
    if (b.local == 0) return at(i, Code::kInvalidArgument, "local address is null");
    if (b.local + b.length < b.local) return at(i, Code::kInvalidArgument, "local + length wraps around");
    if (b.remote + b.length < b.remote) return at(i, Code::kOutOfRange, "remote + length wraps around");
    bool kinds_changed = false;
    if (b.local < reg_start || b.local + b.length > reg_end) {
      LocalRegion lr;
      std::string where;
      s = registry_.regionAt(b.local, b.length, lr, &where);
      if (!s.ok()) return at(i, s.code(), s.message());
      reg_start = lr.addr;
      reg_end = lr.addr + lr.length;
      cur_region = 0;
      while (cur_region < plan.regions.size() && plan.regions[cur_region].addr != lr.addr) ++cur_region;
      if (cur_region == plan.regions.size()) plan.regions.push_back(std::move(lr));
      const uint32_t kind = memoryKindOf(where);
      kinds_changed = kind != local_kind;
      local_kind = kind;
      loc = std::move(where);
    }
    if (file) {
      if (b.remote + b.length > file_span)
        return at(i, Code::kOutOfRange,
                  fmt::format("range [{:#x}, +{}) lies past the end of file segment '{}' ({} bytes)", b.remote,
                              b.length, plan.view->desc->name, file_span));
    } else if (b.remote < buf_start || b.remote + b.length > buf_end || buf < 0) {
      buf = plan.view->desc->findBuffer(b.remote, b.length);
      if (buf < 0) {
        refresh = true;
        return at(i, Code::kOutOfRange,
                  fmt::format("remote range [{:#x}, +{}) is not inside one registered buffer of segment '{}'",
                              b.remote, b.length, plan.view->desc->name));
      }
      const BufferDesc& bd = plan.view->desc->buffers[static_cast<size_t>(buf)];
      buf_start = bd.addr;
      buf_end = bd.addr + bd.length;
      const uint32_t kind = memoryKindOf(bd.location);
      kinds_changed |= kind != remote_kind;
      remote_kind = kind;
    }
    // One request takes one route: chosen by the first block, checked again
    // where the kinds of memory change (a block whose kinds would take
    // another transport is refused: split the request by kind) and, after
    // this loop, against every other remote buffer (routeBuffers).
    if (kinds_changed || !route) {
      const Route* r = route;  // `route` itself stays out of memory: the loop reads it every block
      s = routeBlock(*plan.view, RouteQuery{local_kind, remote_kind, file ? -1 : buf}, src.arrays.route, loc, nullptr,
                     r, plan);
      if (!s.ok()) return at(i, s.code(), s.message());
      route = r;
    }
    // Destinations overlapping: the bytes would depend on the order of the copies.
    const uint64_t dest = read ? b.local : b.remote;
    if (i > 0 && sorted) {
      if (dest < prev_dest) {
        sorted = false;
      } else if (dest < max_end) {
        return at(i, Code::kAddressOverlapped,
                  fmt::format("destination [{:#x}, +{}) in {} overlaps blocks[{}]'s", dest, b.length,
                              destinationSide(op), max_end_block));
      }
    }
    prev_dest = dest;
    if (dest + b.length > max_end) {
      max_end = dest + b.length;
      max_end_block = i;
    }
    // Merge with the open run when contiguous on both sides, in the same
    // local region and remote buffer, and short enough.
    const int this_buf = file ? -1 : buf;
    if (!plan.list.empty()) {
      Run& last = plan.list.back();
      if (last.local + last.length == b.local && last.remote + last.length == b.remote && run_reg == reg_start &&
          run_buf == this_buf && last.length + b.length <= block_settings_.max_run) {
        last.length += b.length;
        plan.bytes += b.length;
        continue;
      }
    }
    if (!plan.list.empty() && this_buf != run_buf && one_buffer) {
      one_buffer = false;
      plan.run_buffer.assign(plan.list.size(), run_buf);
    }
    if (!one_buffer) plan.run_buffer.push_back(this_buf);
    if (cur_region != 0 && plan.run_region.empty()) plan.run_region.assign(plan.list.size(), 0);
    if (!plan.run_region.empty()) plan.run_region.push_back(cur_region);
    plan.list.push_back(b);
    plan.bytes += b.length;
    run_reg = reg_start;
    run_buf = this_buf;
  }
  if (!sorted) {
    // Out of order: sort the destinations (16 bytes a block, for the check).
    std::vector<Dest> order(n);
    for (size_t i = 0; i < n; ++i) {
      const Run b = src.at(i);
      order[i] = Dest{read ? b.local : b.remote, i};
    }
    sortDests(order);
    for (size_t k = 1; k < n; ++k) {
      const Run prev = src.at(order[k - 1].index);
      const uint64_t pd = order[k - 1].addr, d = order[k].addr;
      if (d < pd + prev.length) {
        const size_t later = std::max(order[k - 1].index, order[k].index),
                     earlier = std::min(order[k - 1].index, order[k].index);
        const Run lb = src.at(later);
        return at(later, Code::kAddressOverlapped,
                  fmt::format("destination [{:#x}, +{}) in {} overlaps blocks[{}]'s", read ? lb.local : lb.remote,
                              lb.length, destinationSide(op), earlier));
      }
    }
  }
  if (!one_buffer) {
    const Route* r = route;
    if (!(s = routeBuffers(src, plan, r)).ok()) return s;
    route = r;
  }
  if (plan.list.size() > UINT32_MAX)
    return {Code::kInvalidArgument,
            fmt::format("{} blocks make {} runs; one block request holds at most {}", n, plan.list.size(), UINT32_MAX)};
  if (plan.list.size() < plan.list.capacity() / 2) plan.list.shrink_to_fit();
  if (plan.run_region.size() < plan.run_region.capacity() / 2) plan.run_region.shrink_to_fit();
  if (plan.run_buffer.size() < plan.run_buffer.capacity() / 2) plan.run_buffer.shrink_to_fit();
  plan.blocks = n;
  plan.runs = plan.list.size();
  plan.route = route;
  for (LocalRegion& r : plan.regions) r.pick(route->transport);
  plan.buffer = file ? -1 : (one_buffer ? run_buf : BlockPlan::kPerRun);
  return Status::OK();
}

Status EngineImpl::buildStrided(OpCode op, SegmentID target, const StridedBlocks& sb, BlockPlan& plan) {
  Status s = startPlan(op, target, plan);
  if (!s.ok()) return s;
  if (sb.count == 0) return {Code::kInvalidArgument, "strided blocks: count is 0"};
  if (sb.block_length == 0) return {Code::kInvalidArgument, "strided blocks: block_length is 0"};
  if (sb.local_base == nullptr) return {Code::kInvalidArgument, "strided blocks: local_base is null"};
  const uint64_t n = sb.count, len = sb.block_length;
  const uint64_t lbase = reinterpret_cast<uint64_t>(sb.local_base), rbase = sb.remote_base;
  // The span each side covers: base to the end of the last block.
  uint64_t lspan = 0, rspan = 0;
  if (__builtin_mul_overflow(n - 1, uint64_t(sb.local_stride), &lspan) || __builtin_add_overflow(lspan, len, &lspan) ||
      lbase + lspan < lbase)
    return {Code::kInvalidArgument, fmt::format("strided blocks: the local span of {} blocks wraps around", n)};
  if (__builtin_mul_overflow(n - 1, uint64_t(sb.remote_stride), &rspan) ||
      __builtin_add_overflow(rspan, len, &rspan) || rbase + rspan < rbase)
    return {Code::kOutOfRange, fmt::format("strided blocks: the remote span of {} blocks wraps around", n)};
  if (n > 1) {
    const size_t dstride = op == OpCode::kRead ? sb.local_stride : sb.remote_stride;
    if (dstride < len)
      return at(1, Code::kAddressOverlapped,
                fmt::format("destination in {} overlaps blocks[0]'s: {} stride {} is less than block_length {}",
                            destinationSide(op), op == OpCode::kRead ? "local" : "remote", dstride, len));
  }
  // One local region and one remote buffer hold the whole span: every block
  // is valid, checked in O(1). Otherwise each block is checked (and listed).
  LocalRegion region;
  std::string loc;
  const SegmentDesc& d = *plan.view->desc;
  const bool file = d.kind == SegmentDesc::Kind::kFile;
  int buf = -1;
  bool fast = registry_.regionAt(lbase, lspan, region, &loc).ok();
  if (fast && file) {
    fast = rbase + rspan <= d.fileSpan();
  } else if (fast) {
    buf = d.findBuffer(rbase, rspan);
    if (buf < 0) {
      if (auto fresh = refreshSegment(target)) plan.view = fresh;
      buf = plan.view->desc->findBuffer(rbase, rspan);
    }
    fast = buf >= 0;
  }
  if (!fast) {
    // Slow path: the blocks span several regions or buffers, or one is bad
    // (and the error must name it).
    struct Gen {
      const StridedBlocks& sb;
      Run operator()(size_t i) const {
        return Run{reinterpret_cast<uint64_t>(sb.local_base) + i * sb.local_stride, sb.remote_base + i * sb.remote_stride,
                   sb.block_length};
      }
    };
    std::vector<Block> blocks(n);
    for (size_t i = 0; i < n; ++i) {
      Run r = Gen{sb}(i);
      blocks[i] = Block{reinterpret_cast<void*>(r.local), r.remote, r.length};
    }
    BlockSource src = BlockSource::of(std::span<const Block>(blocks));
    src.arrays.route = sb.route;  // the strided request's contract
    return buildBlocks(op, target, src, plan);
  }
  const uint32_t remote_kind = file ? kHostMemory : memoryKindOf(plan.view->desc->buffers[size_t(buf)].location);
  RouteChoice choice;
  s = blockRoute(*plan.view, memoryKindOf(loc), remote_kind, file ? -1 : buf, sb.route, choice);
  if (!s.ok()) return s;
  plan.route = choice.route;
  plan.fallback = choice.fallback;
  plan.fallback_why = choice.fallback_why;
  plan.strided = true;
  region.pick(plan.route->transport);
  plan.regions = {std::move(region)};
  plan.blocks = n;
  plan.bytes = n * len;
  plan.buffer = file ? -1 : buf;
  plan.local_base = lbase;
  plan.remote_base = rbase;
  if (sb.local_stride == len && sb.remote_stride == len) {
    // Contiguous on both sides: runs of block.max_run (the last shorter).
    const uint64_t run = std::min<uint64_t>(plan.bytes, std::max<uint64_t>(block_settings_.max_run, len));
    plan.runs = (plan.bytes + run - 1) / run;
    plan.length = plan.local_stride = plan.remote_stride = run;
    plan.tail = plan.bytes - (plan.runs - 1) * run;
  } else {
    plan.runs = n;
    plan.length = plan.tail = len;
    plan.local_stride = sb.local_stride;
    plan.remote_stride = sb.remote_stride;
  }
  if (plan.runs > UINT32_MAX)
    return {Code::kInvalidArgument,
            fmt::format("{} strided blocks make {} runs; one block request holds at most {}", n, plan.runs, UINT32_MAX)};
  return Status::OK();
}

Status EngineImpl::refreshLocal(PlanID id, std::shared_ptr<const BlockPlan>& plan) {
  const uint64_t removals = registry_.removals();
  // Every region still the registration it was: every run is still inside one.
  bool same = true;
  for (const LocalRegion& r : plan->regions) {
    LocalRegion now;
    same &= registry_.regionAt(r.addr, r.length, now).ok() && now.seq == r.seq;
    if (!same) break;
  }
  if (same) return Status::OK();
  // Some region went: find every run's region anew. The registrations the
  // plan holds are not used again (the transport may have torn them down).
  auto fresh = std::make_shared<BlockPlan>(*plan);
  fresh->removals = removals;
  fresh->regions.clear();
  fresh->run_region.clear();
  uint32_t cur = 0;
  for (size_t i = 0; i < plan->runs; ++i) {
    const Run r = plan->run(i);
    if (fresh->regions.empty() || !fresh->regions[cur].contains(r.local, r.length)) {
      LocalRegion lr;
      Status s = registry_.regionAt(r.local, r.length, lr);
      if (!s.ok())
        return {s.code(), fmt::format("the plan's run {} (local [{:#x}, +{})) is no longer registered: {}", i,
                                      r.local, r.length, s.message())};
      cur = 0;
      while (cur < fresh->regions.size() && fresh->regions[cur].addr != lr.addr) ++cur;
      if (cur == fresh->regions.size()) {
        lr.pick(fresh->route->transport);
        fresh->regions.push_back(std::move(lr));
      }
    }
    if (cur != 0 && fresh->run_region.empty()) fresh->run_region.assign(i, 0);
    if (!fresh->run_region.empty()) fresh->run_region.push_back(cur);
  }
  // Later posts take the refreshed plan (unless it was released meanwhile).
  (void)plans_.replace(id, plan, fresh);
  plan = std::move(fresh);
  return Status::OK();
}

}  // namespace hawser
