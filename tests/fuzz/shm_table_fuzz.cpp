// The shm transport's registration table (src/transport/shm/shm_table.h),
// which an initiator maps from its peer: the peer writes every byte of it.
// The input is a query (addr, len) and the start of the table's bytes (the
// rest stays zero). Invariants: the lookup reads only inside the table;
// `in` is true only when an entry in use (count clamped to the capacity)
// holds the range, and the entry it answers (with its generation) is one.
#include <cstdint>
#include <cstring>
#include <memory>

#include "fuzz_util.h"
#include "transport/shm/shm_table.h"

using namespace hawser;
using namespace hawser::shm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const size_t bytes = tableBytes(kTableCapacity);
  // A separate allocation of exactly the table's size, so that ASan sees a
  // read past it.
  static uint64_t* table = new uint64_t[bytes / sizeof(uint64_t)]();
  fuzz::Input in(data, size);
  const uint64_t addr = in.take<uint64_t>();
  const uint64_t len = in.take<uint64_t>();
  const uint64_t nonce = in.take<uint64_t>();
  std::string_view raw = in.bytes(bytes);
  std::memcpy(table, raw.data(), raw.size());
  (void)tableHeaderMatches(table, nonce);
  bool in_table = false;
  uint64_t seq = 0;
  TableEntry found{};
  const auto* h = reinterpret_cast<const TableHeader*>(table);
  const auto* e = reinterpret_cast<const TableEntry*>(reinterpret_cast<const char*>(table) + sizeof(TableHeader));
  if (lookupOnce(table, addr, len, in_table, found, seq)) {
    FUZZ_CHECK(seq == h->seq && (seq & 1) == 0);
    if (in_table) {
      bool held = false;
      const uint64_t n = h->count < kTableCapacity ? h->count : kTableCapacity;
      for (uint64_t i = 0; i < n && !held; ++i)
        held = addr >= e[i].addr && len <= e[i].length && addr - e[i].addr <= e[i].length - len &&
               found.addr == e[i].addr && found.length == e[i].length && found.gen == e[i].gen;
      FUZZ_CHECK(held);
    }
  } else {
    FUZZ_CHECK(h->seq & 1);
  }
  std::memset(table, 0, raw.size());
  return 0;
}
