// One step of a spin-wait: tells the CPU this thread is polling (x86
// `pause`, arm `yield`), so that its sibling hyperthread runs meanwhile and
// leaving the loop is not mispredicted. Every polling loop uses it.
#pragma once

#include <thread>

namespace hawser {

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#else
  std::this_thread::yield();
#endif
}

}  // namespace hawser
