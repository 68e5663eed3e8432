// The C API's block requests and plans (hawser/c_api.h, "Block requests"):
// the same checks and errors as the C++ calls they forward to.
#include <span>

#include "engine/c_api_util.h"

using namespace hawser;
using namespace hawser::capi;

static_assert(sizeof(hawser_block_t) == sizeof(Block) && offsetof(hawser_block_t, remote) == offsetof(Block, remote) &&
              offsetof(hawser_block_t, length) == offsetof(Block, length));
// Every field but the route contract (C: the *_routed calls).
static_assert(sizeof(hawser_strided_t) == offsetof(StridedBlocks, route));

namespace {

int checkOp(int opcode, OpCode& out) {
  if (opcode != HAWSER_OP_READ && opcode != HAWSER_OP_WRITE)
    return fail(Code::kInvalidArgument, "opcode " + std::to_string(opcode) + " is neither HAWSER_OP_READ nor HAWSER_OP_WRITE");
  out = static_cast<OpCode>(opcode);
  return 0;
}

std::span<const Block> blocksOf(const hawser_block_t* b, size_t count) {
  return {reinterpret_cast<const Block*>(b), count};
}

// The request's contract: `c`, or unset (the engine's) when null.
RouteContract routeOf(const hawser_route_contract_t* c) {
  return c ? RouteContract{true, c->transports, c->require} : RouteContract{};
}

StridedBlocks stridedOf(const hawser_strided_t& s, const hawser_route_contract_t* c) {
  return {s.local_base, s.remote_base, s.block_length, s.local_stride, s.remote_stride, s.count, routeOf(c)};
}

}  // namespace

extern "C" {

int hawser_submit_blocks_routed(hawser_engine_t* engine, hawser_batch_id_t batch, int opcode,
                                hawser_segment_id_t target, const hawser_block_t* blocks, size_t count,
                                const hawser_route_contract_t* contract, size_t* task_id) {
  return guarded([&] {
    if (!engine) return nullArg("engine");
    if (!blocks && count) return nullArg("blocks");
    OpCode op;
    if (int rc = checkOp(opcode, op)) return rc;
    return ret(engine->engine.submitBlocks(batch, op, target, blocksOf(blocks, count), routeOf(contract), task_id));
  });
}

int hawser_submit_block_arrays_routed(hawser_engine_t* engine, hawser_batch_id_t batch, int opcode,
                                      hawser_segment_id_t target, const uint64_t* local, const uint64_t* remote,
                                      const uint64_t* lengths, uint64_t block_length, size_t count,
                                      const hawser_route_contract_t* contract, size_t* task_id) {
  return guarded([&] {
    if (!engine) return nullArg("engine");
    OpCode op;
    if (int rc = checkOp(opcode, op)) return rc;
    return ret(engine->engine.submitBlocks(
        batch, op, target, BlockArrays{local, remote, lengths, block_length, count, routeOf(contract)}, task_id));
  });
}

int hawser_submit_strided_routed(hawser_engine_t* engine, hawser_batch_id_t batch, int opcode,
                                 hawser_segment_id_t target, const hawser_strided_t* blocks,
                                 const hawser_route_contract_t* contract, size_t* task_id) {
  return guarded([&] {
    if (!engine) return nullArg("engine");
    if (!blocks) return nullArg("blocks");
    OpCode op;
    if (int rc = checkOp(opcode, op)) return rc;
    return ret(engine->engine.submitStrided(batch, op, target, stridedOf(*blocks, contract), task_id));
  });
}

int hawser_prepare_blocks_routed(hawser_engine_t* engine, int opcode, hawser_segment_id_t target,
                                 const hawser_block_t* blocks, size_t count, const hawser_route_contract_t* contract,
                                 hawser_plan_id_t* out) {
  return guarded([&] {
    if (!engine) return nullArg("engine");
    if (!out) return nullArg("out");
    if (!blocks && count) return nullArg("blocks");
    OpCode op;
    if (int rc = checkOp(opcode, op)) return rc;
    return ret(engine->engine.prepareBlocks(op, target, blocksOf(blocks, count), routeOf(contract), *out));
  });
}

int hawser_prepare_block_arrays_routed(hawser_engine_t* engine, int opcode, hawser_segment_id_t target,
                                       const uint64_t* local, const uint64_t* remote, const uint64_t* lengths,
                                       uint64_t block_length, size_t count, const hawser_route_contract_t* contract,
                                       hawser_plan_id_t* out) {
  return guarded([&] {
    if (!engine) return nullArg("engine");
    if (!out) return nullArg("out");
    OpCode op;
    if (int rc = checkOp(opcode, op)) return rc;
    return ret(engine->engine.prepareBlocks(
        op, target, BlockArrays{local, remote, lengths, block_length, count, routeOf(contract)}, *out));
  });
}

int hawser_prepare_strided_routed(hawser_engine_t* engine, int opcode, hawser_segment_id_t target,
                                  const hawser_strided_t* blocks, const hawser_route_contract_t* contract,
                                  hawser_plan_id_t* out) {
  return guarded([&] {
    if (!engine) return nullArg("engine");
    if (!blocks) return nullArg("blocks");
    if (!out) return nullArg("out");
    OpCode op;
    if (int rc = checkOp(opcode, op)) return rc;
    return ret(engine->engine.prepareStrided(op, target, stridedOf(*blocks, contract), *out));
  });
}

// Without a contract of their own: the engine's.
int hawser_submit_blocks(hawser_engine_t* engine, hawser_batch_id_t batch, int opcode, hawser_segment_id_t target,
                         const hawser_block_t* blocks, size_t count, size_t* task_id) {
  return hawser_submit_blocks_routed(engine, batch, opcode, target, blocks, count, nullptr, task_id);
}

int hawser_submit_block_arrays(hawser_engine_t* engine, hawser_batch_id_t batch, int opcode,
                               hawser_segment_id_t target, const uint64_t* local, const uint64_t* remote,
                               const uint64_t* lengths, uint64_t block_length, size_t count, size_t* task_id) {
  return hawser_submit_block_arrays_routed(engine, batch, opcode, target, local, remote, lengths, block_length,
                                           count, nullptr, task_id);
}

int hawser_submit_strided(hawser_engine_t* engine, hawser_batch_id_t batch, int opcode, hawser_segment_id_t target,
                          const hawser_strided_t* blocks, size_t* task_id) {
  return hawser_submit_strided_routed(engine, batch, opcode, target, blocks, nullptr, task_id);
}

int hawser_prepare_blocks(hawser_engine_t* engine, int opcode, hawser_segment_id_t target,
                          const hawser_block_t* blocks, size_t count, hawser_plan_id_t* out) {
  return hawser_prepare_blocks_routed(engine, opcode, target, blocks, count, nullptr, out);
}

int hawser_prepare_block_arrays(hawser_engine_t* engine, int opcode, hawser_segment_id_t target,
                                const uint64_t* local, const uint64_t* remote, const uint64_t* lengths,
                                uint64_t block_length, size_t count, hawser_plan_id_t* out) {
  return hawser_prepare_block_arrays_routed(engine, opcode, target, local, remote, lengths, block_length, count,
                                            nullptr, out);
}

int hawser_prepare_strided(hawser_engine_t* engine, int opcode, hawser_segment_id_t target,
                           const hawser_strided_t* blocks, hawser_plan_id_t* out) {
  return hawser_prepare_strided_routed(engine, opcode, target, blocks, nullptr, out);
}

int hawser_post_plan(hawser_engine_t* engine, hawser_batch_id_t batch, hawser_plan_id_t plan, size_t* task_id) {
  return guarded([&] {
    if (!engine) return nullArg("engine");
    return ret(engine->engine.postPlan(batch, plan, task_id));
  });
}

int hawser_plan_info(hawser_engine_t* engine, hawser_plan_id_t plan, hawser_plan_info_t* out) {
  return guarded([&] {
    if (!engine) return nullArg("engine");
    if (!out) return nullArg("out");
    PlanInfo info;
    int rc = ret(engine->engine.planInfo(plan, info));
    if (rc == 0) *out = hawser_plan_info_t{info.blocks, info.runs, info.bytes};
    return rc;
  });
}

int hawser_release_plan(hawser_engine_t* engine, hawser_plan_id_t plan) {
  return guarded([&] {
    if (!engine) return nullArg("engine");
    return ret(engine->engine.releasePlan(plan));
  });
}

}  // extern "C"
