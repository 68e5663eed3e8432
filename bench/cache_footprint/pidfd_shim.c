// Preloaded into a program run under valgrind 3.19, which does not know
// pidfd_open (Linux 5.3; it answers ENOSYS, and the engine refuses shm):
// glibc's syscall() for pidfd_open is answered by a helper run outside
// valgrind (an exec'd child is not traced), which opens the pidfd and passes
// it back over a socket pair (SCM_RIGHTS). Every other call goes through.
// Only for bench/cache_footprint.sh; never part of the engine.
//
//   cc -O2 -shared -fPIC -o pidfd_shim.so pidfd_shim.c -ldl
//   PIDFD_HELPER=/path/to/pidfd_helper LD_PRELOAD=./pidfd_shim.so valgrind ...
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define PIDFD_OPEN 434

static long via_helper(long pid) {
  const char* helper = getenv("PIDFD_HELPER");
  if (!helper) {
    errno = ENOSYS;
    return -1;
  }
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) return -1;
  const pid_t child = fork();
  if (child == 0) {
    char a[32], b[32];
    snprintf(a, sizeof a, "%d", (int)pid);  // pid_t: the upper half of the register is not the caller's
    snprintf(b, sizeof b, "%d", sv[1]);
    if (fcntl(sv[1], F_SETFD, 0) < 0) _exit(126);
    unsetenv("LD_PRELOAD");
    execl(helper, helper, a, b, (char*)NULL);
    _exit(127);
  }
  close(sv[1]);
  char err = 0;
  struct iovec iov = {&err, 1};
  char ctl[CMSG_SPACE(sizeof(int))];
  struct msghdr m;
  memset(&m, 0, sizeof m);
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = ctl;
  m.msg_controllen = sizeof ctl;
  long fd = -1;
  int saved = ESRCH;
  if (child > 0 && recvmsg(sv[0], &m, MSG_CMSG_CLOEXEC) == 1) {
    struct cmsghdr* h = CMSG_FIRSTHDR(&m);
    if (h && h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS) {
      int got;
      memcpy(&got, CMSG_DATA(h), sizeof got);
      fd = got;
    } else {
      saved = err ? err : ESRCH;
    }
  }
  close(sv[0]);
  if (child > 0) waitpid(child, NULL, 0);
  if (fd < 0) errno = saved;
  return fd;
}

long syscall(long n, ...) {
  va_list ap;
  va_start(ap, n);
  long a[6];
  for (int i = 0; i < 6; ++i) a[i] = va_arg(ap, long);
  va_end(ap);
  if (n == PIDFD_OPEN && a[1] == 0) return via_helper(a[0]);
  static long (*real)(long, ...);
  if (!real) real = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
  return real(n, a[0], a[1], a[2], a[3], a[4], a[5]);
}
