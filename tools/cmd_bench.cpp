// `hawser bench`: the subcommand's options and which mode runs them: READ /
// WRITE batches (bench_batches.h), block requests (--blocks N,
// bench_blocks.h) or a paged KV cache (--layout kv, bench_kv.h).
#include <fmt/format.h>

#include <memory>
#include <string>

#include "tools/bench_batches.h"
#include "tools/bench_blocks.h"
#include "tools/bench_kv.h"
#include "tools/commands.h"

namespace hawser::tools {

void addBench(CLI::App& app, Commands& cmds) {
  auto o = std::make_shared<BenchOpts>();
  auto* sub = app.add_subcommand("bench", "Drive READ/WRITE batches against a segment and report throughput");
  sub->add_option("--target", o->target, "segment: HOST:PORT (p2p), a name (etcd), file:///path or a file segment")
      ->required();
  sub->add_option("--op", o->op, "read or write")->capture_default_str();
  auto* block_size = sub->add_option("--block-size", o->block_size,
                                     "bytes per request (K/M/G); with --layout kv, per block (default there 32K)")
                         ->capture_default_str();
  sub->add_option("--batch-size", o->batch_size, "requests per batch")->capture_default_str();
  sub->add_option("--threads", o->threads, "initiator threads")->capture_default_str();
  sub->add_option("--depth", o->depth,
                  "batches in flight per thread (1: transferSync, one after another; more: submit, then wait for "
                  "the oldest and submit it again, so the queue never drains)")
      ->capture_default_str();
  auto* span = sub->add_option(
      "--span", o->span,
      "memory (K/M/G) each thread's requests cycle through, on each side; a multiple of --block-size, at most "
      "--batch-size x --depth blocks (the default: every request in flight has a block of its own). Equal to "
      "--block-size: one block per thread, the working set of iperf3's one -l buffer");
  sub->add_flag("--huge-pages", o->huge_pages,
                "local buffers on reserved 2 MiB huge pages (MAP_HUGETLB; see /proc/sys/vm/nr_hugepages) "
                "instead of transparent huge pages");
  sub->add_option("--cpu-pid", o->cpu_pid,
                  "also report the CPU time this local process (the target) spent over the timed run");
  auto* secs = sub->add_option("--seconds", o->seconds, "run this long (default 5 when --total is not given)");
  auto* tot = sub->add_option("--total", o->total, "move this many bytes (K/M/G), then stop");
  secs->excludes(tot);
  sub->add_flag("--json", o->json, "print the summary as one JSON object on the last line");
  sub->add_flag("--no-verify", o->no_verify, "skip the data check");
  sub->add_option("--metadata", o->metadata,
                  "metadata: p2p, etcd://host:port[,host:port], etcds://... (TLS: etcd.* config keys) or "
                  "http://host:port/metadata")
      ->capture_default_str();
  sub->add_option("--name", o->name, "this engine's server name");
  sub->add_option("--host", o->host, "local address to listen on / advertise")->capture_default_str();
  sub->add_option("--local-location", o->local_location,
                  "where the initiator's buffers live: cpu, or cuda:N (GPU memory; data checked through a host copy)")
      ->capture_default_str();
  sub->add_option("--target-offset", o->target_offset, "start of the target range inside the segment")
      ->capture_default_str();
  sub->add_option("--blocks", o->blocks,
                  "block requests: N blocks of --block-size as one request (a plan posted each round), against "
                  "1 MiB requests, one block alone and one request per block, in interleaved rounds")
      ->excludes(span);
  sub->add_option("--layout", o->layout,
                  "with --blocks: contiguous, scattered or strided; kv (without --blocks): a paged KV cache, layers x "
                  "K/V x blocks scattered differently on both sides, as one block request against the same bytes "
                  "contiguous")
      ->capture_default_str();
  sub->add_option("--rounds", o->rounds, "with --blocks or --layout kv: interleaved rounds (medians are reported)")
      ->capture_default_str();
  auto* layers = sub->add_option("--layers", o->layers, "with --layout kv: layers (each a K and a V tensor)")
                     ->capture_default_str();
  auto* kv_blocks = sub->add_option("--kv-blocks", o->kv_blocks, "with --layout kv: blocks of the request per tensor")
                        ->capture_default_str();
  auto* kv_pool = sub->add_option("--kv-pool", o->kv_pool,
                                  "with --layout kv: blocks in each side's pool per tensor, the block tables' choice "
                                  "(default 2 x --kv-blocks)");
  auto* kv_plan = sub->add_flag("--kv-plan", o->kv_plan,
                                "with --layout kv: prepare the KV block request once and post it each round "
                                "(default: submitBlocks each round)");
  auto* kv_repeat = sub->add_option("--kv-repeat", o->kv_repeat,
                                    "with --layout kv: transfers of each way timed one after another in a round, "
                                    "each waited for before the next is posted (1: each a request issued alone)")
                        ->capture_default_str();
  sub->callback([o, &cmds, block_size, layers, kv_blocks, kv_pool, kv_plan, kv_repeat] {
    const bool kv_options =
        layers->count() || kv_blocks->count() || kv_pool->count() || kv_plan->count() || kv_repeat->count();
    const bool block_size_given = block_size->count() > 0;
    cmds.run = [o, kv_options, block_size_given] {
      if (o->layout == "kv") {
        if (o->blocks != 0) {
          fmt::print(stderr, "hawser bench: --layout kv takes --kv-blocks, not --blocks\n");
          return 2;
        }
        if (o->no_verify) {
          fmt::print(stderr, "hawser bench: --layout kv verifies every byte of every transfer: drop --no-verify\n");
          return 2;
        }
        KvBenchOpts k;
        const std::string kv_block_size = k.block_size;
        static_cast<BenchBasics&>(k) = *o;
        if (!block_size_given) k.block_size = kv_block_size;
        k.layers = o->layers;
        k.kv_blocks = o->kv_blocks;
        k.kv_pool = o->kv_pool;
        k.plan = o->kv_plan;
        k.repeat = o->kv_repeat;
        k.local_location = o->local_location;
        return runKvBench(k);
      }
      if (kv_options) {
        fmt::print(stderr, "hawser bench: --layers, --kv-blocks, --kv-pool and --kv-plan need --layout kv\n");
        return 2;
      }
      if (o->blocks == 0) return runBench(*o);
      BlockBenchOpts b;
      static_cast<BenchBasics&>(b) = *o;
      b.blocks = o->blocks;
      b.layout = o->layout;
      b.no_verify = o->no_verify;
      return runBlockBench(b);
    };
  });
}

}  // namespace hawser::tools
