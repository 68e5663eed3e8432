// HAWSER_TSAN is defined in a ThreadSanitizer build (gcc or clang), for the
// few places that tell it what it cannot see for itself.
#pragma once

#if defined(__SANITIZE_THREAD__)
#define HAWSER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define HAWSER_TSAN 1
#endif
#endif
