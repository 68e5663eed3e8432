// bench/cache_footprint.sh's helper (see pidfd_shim.c): opens a pidfd for PID and
// sends it over socket FD, or one byte, the errno, without a descriptor.
//
//   pidfd_helper PID FD
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  const int sock = atoi(argv[2]);
  const int fd = (int)syscall(434, atol(argv[1]), 0);
  char err = fd < 0 ? (char)errno : 0;
  struct iovec iov = {&err, 1};
  char ctl[CMSG_SPACE(sizeof(int))];
  memset(ctl, 0, sizeof ctl);
  struct msghdr m;
  memset(&m, 0, sizeof m);
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  if (fd >= 0) {
    m.msg_control = ctl;
    m.msg_controllen = sizeof ctl;
    struct cmsghdr* h = CMSG_FIRSTHDR(&m);
    h->cmsg_level = SOL_SOCKET;
    h->cmsg_type = SCM_RIGHTS;
    h->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(h), &fd, sizeof fd);
  }
  return sendmsg(sock, &m, 0) == 1 ? 0 : 1;
}
