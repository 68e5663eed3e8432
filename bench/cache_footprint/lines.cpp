// Reads a valgrind lackey --trace-mem=yes trace on stdin and writes, for each
// batch, the distinct cache lines it touched: "I", "R" or "W" (written or
// modified at least once), the line's address and, for data lines, the
// address of the instruction that first touched it (that first wrote it, for
// "W"): lackey prints each access after the instruction that made it. A batch runs from one
// execution of the marker instruction to the next (bench/cache_footprint.sh uses
// the entry of EngineImpl::transferSync: once a batch). The first SKIP
// batches (warm-up) are left out, then KEEP batches are written.
//
//   lines MARKER SKIP KEEP > batches.txt
#include <cstdio>
#include <cstdlib>
#include <unordered_map>

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: lines MARKER SKIP KEEP < lackey-trace\n");
    return 2;
  }
  const unsigned long marker = std::strtoul(argv[1], nullptr, 0);
  const long skip = std::atol(argv[2]), keep = std::atol(argv[3]);
  struct Line {
    char kind = 0;          // I, R or W
    unsigned long ip = 0;   // the instruction that first read it, or first wrote it
  };
  std::unordered_map<unsigned long, Line> lines;
  unsigned long ip = 0;  // the instruction being traced
  long batch = -1;  // none started
  auto flush = [&] {
    if (batch >= skip && batch < skip + keep) {
      std::printf("batch %ld\n", batch);
      for (const auto& [l, v] : lines) {
        if (v.kind == 'I') std::printf("I %lx\n", l << 6);
        else std::printf("%c %lx %lx\n", v.kind, l << 6, v.ip);
      }
    }
    lines.clear();
  };
  char buf[256];
  while (std::fgets(buf, sizeof buf, stdin)) {
    char kind;
    const char* p;
    if (buf[0] == 'I' && buf[1] == ' ') {
      kind = 'I';
      p = buf + 2;
    } else if (buf[0] == ' ' && (buf[1] == 'L' || buf[1] == 'S' || buf[1] == 'M') && buf[2] == ' ') {
      kind = buf[1] == 'L' ? 'R' : 'W';
      p = buf + 3;
    } else {
      continue;  // valgrind's own lines
    }
    char* end;
    const unsigned long addr = std::strtoul(p, &end, 16);
    if (*end != ',') continue;
    const unsigned long size = std::strtoul(end + 1, nullptr, 10);
    if (kind == 'I') {
      ip = addr;
      if (addr == marker) {
        flush();
        ++batch;
      }
    }
    if (batch < 0 || batch >= skip + keep) continue;  // the rest is read, not kept: the run ends as it would
    for (unsigned long l = addr >> 6; l <= (addr + (size ? size : 1) - 1) >> 6; ++l) {
      Line& v = lines[l];
      if (v.kind == 0 || (v.kind == 'R' && kind == 'W')) {
        v.kind = kind;
        v.ip = ip;
      }
    }
  }
  // The batch the trace ends in is left out: it may be cut short.
  return batch >= skip + keep ? 0 : 3;  // 3: fewer batches than asked
}
