/* 1,024 silent connections: connects to a worker's host socket 1,024 times and
 * never says hello, holding every connection until the worker closes it or the
 * program is stopped. With --as-uid UID (root only) it drops to that uid first,
 * as a tenant who is not the victim's user (DIR must then be writable by it).
 *   silent_connections SOCKET DIR SECONDS [--as-uid UID]
 * No verbs here (a hello is the first verb): what the worker owes is that the
 * victim still attaches and runs; this prints how many connections the worker
 * closed (timed out or evicted) and how many it kept. */
#include "hostile.h"
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>


#define N 1024

static int dial(const char* path) {
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  struct sockaddr_un sa;
  memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
  if (fd >= 0 && connect(fd, (struct sockaddr*)&sa, sizeof sa) == 0) return fd;
  if (fd >= 0) close(fd);
  return -1;
}

int main(int argc, char** argv) {
  h_prog = "silent_connections";
  if (argc < 4) {
    fprintf(stderr, "usage: silent_connections SOCKET DIR SECONDS [--as-uid UID]\n");
    return 2;
  }
  h_dir = argv[2];
  h_seconds = atof(argv[3]);
  h_t0 = h_now();
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc > 5 && strcmp(argv[4], "--as-uid") == 0) {
    const uid_t uid = (uid_t)atoi(argv[5]);
    if (setresgid(uid, uid, uid) || setresuid(uid, uid, uid)) h_die("setresuid");
    h_say("running as uid %u", (unsigned)uid);
  }
  static struct pollfd fds[N];
  int open_now = 0, refused = 0;
  unsigned long closed = 0, dials = 0;
  for (int i = 0; i < N; ++i) {
    fds[i].fd = dial(argv[1]);
    fds[i].events = POLLIN;
    ++dials;
    if (fds[i].fd < 0) {
      if (refused++ == 0) h_say("connect %d refused: %s", i, strerror(errno));
    } else {
      ++open_now;
    }
  }
  h_say("%d of %d connections made, none will say hello", open_now, N);
  if (open_now == 0) h_die("connect");
  h_ready();
  while (!h_stop()) {
    const int n = poll(fds, N, 100);
    for (int i = 0; n > 0 && i < N; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char b;
      if (recv(fds[i].fd, &b, 1, MSG_DONTWAIT) <= 0) { /* the worker closed it */
        close(fds[i].fd);
        fds[i].fd = -1;
        ++closed;
      }
    }
  }
  open_now = 0;
  for (int i = 0; i < N; ++i)
    if (fds[i].fd >= 0) {
      ++open_now;
      close(fds[i].fd);
    }
  h_say("%lu dials, the worker closed %lu silent connections, %d still open at the end", dials, closed, open_now);
  return h_verdict();
}
