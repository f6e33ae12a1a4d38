/* A registered huge-page buffer whose pages the application punches out from
 * under the worker: A registers 8 MiB of MAP_HUGETLB memory (the drop-in
 * library moves it onto a hugetlb memfd, which A finds in /proc/self/fd), B
 * keeps 64 KiB WRITEs into it and READs from it going (two at a time, about
 * 200 a second: the abuse is the punch, not the bandwidth), and A punches the whole range
 * out of the memfd (fallocate FALLOC_FL_PUNCH_HOLE) and of its mapping
 * (MADV_REMOVE). With "exhaust", A then takes every free huge page of the
 * system (so a page the worker faults in again cannot be found: the worker's
 * SIGBUS), for 2 s, and gives them back. Exhausting a shared machine's pool
 * hurts everyone on it: the runner asks for it only when told to.
 *
 * Verbs has no word for a hole punched in registered memory; what the RNIC
 * must do is not die: the punch is refused (EPERM: sealed), or traffic on the
 * range completes, successfully or with an error, and never hangs.
 *   hugetlb_punch DEV_A DEV_B DIR SECONDS [exhaust] */
#include "hostile.h"
#include <dirent.h>
#include <linux/falloc.h>
#include <sys/mman.h>


#define HUGE (2u << 20)
#define LEN (4 * HUGE)

/* The descriptor whose file backs the mapping at addr (inode from /proc/self/maps), or -1. */
static int backing_fd(const void* addr) {
  FILE* f = fopen("/proc/self/maps", "r");
  if (!f) return -1;
  char line[512];
  unsigned long ino = 0;
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi, off, inode;
    char perms[8], dev[16];
    if (sscanf(line, "%lx-%lx %7s %lx %15s %lu", &lo, &hi, perms, &off, dev, &inode) == 6 &&
        (uintptr_t)addr >= lo && (uintptr_t)addr < hi) {
      ino = inode;
      break;
    }
  }
  fclose(f);
  if (ino == 0) return -1;
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  int found = -1;
  struct dirent* e;
  while ((e = readdir(d)) != NULL && found < 0) {
    const int fd = atoi(e->d_name);
    struct stat st;
    if (e->d_name[0] != '.' && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_ino == ino) found = fd;
  }
  closedir(d);
  return found;
}

int main(int argc, char** argv) {
  h_init(argc, argv, "hugetlb_punch", 0);
  const int exhaust = argc > 5 && strcmp(argv[5], "exhaust") == 0;
  struct h_end a, b;
  h_end_make(&a, h_open(argv[1]), 256, 64);
  h_end_make(&b, h_open(argv[2]), 256, 64);
  h_pair(&a, &b);
  char* huge = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
  if (huge == MAP_FAILED) {
    h_say("skipped: no huge pages for an 8 MiB MAP_HUGETLB buffer (%s)", strerror(errno));
    h_ready();
    while (!h_stop()) usleep(20000);
    return h_verdict();
  }
  memset(huge, 0x42, LEN);
  struct ibv_mr* hmr = ibv_reg_mr(a.pd, huge, LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
  char* mine = h_alloc(LEN, 0x17);
  struct ibv_mr* bmr = ibv_reg_mr(b.pd, mine, LEN, IBV_ACCESS_LOCAL_WRITE);
  if (!hmr || !bmr) h_die("ibv_reg_mr");
  const int fd = backing_fd(huge);
  h_say("registered 8 MiB of huge pages; backing memfd %s", fd >= 0 ? "found" : "not found");
  uint64_t id = 0;
  int outstanding = 0, ok = 0, failed = 0, punched = 0;
  const double punch_at = h_now() + 0.3;
  double give_back_at = 0;
  char** taken = NULL;
  size_t ntaken = 0;
  h_ready();
  struct ibv_wc wc[16];
  double last_progress = h_now();
  while (!h_stop()) {
    while (outstanding < 2) { /* WRITEs into A's huge pages, READs from them, over every page */
      const size_t off = (size_t)(id % 128) * (LEN / 128);
      const enum ibv_wr_opcode op = id % 2 ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE;
      if (h_post_send(b.qp, op, id, mine + off, LEN / 128, bmr->lkey, (uintptr_t)huge + off, hmr->rkey, 1)) break;
      ++id;
      ++outstanding;
    }
    const int n = ibv_poll_cq(b.cq, 16, wc);
    if (n < 0) {
      h_say("poll_cq failed (worker gone?)");
      break;
    }
    for (int i = 0; i < n; ++i) {
      --outstanding;
      if (wc[i].status == IBV_WC_SUCCESS) ++ok;
      else ++failed;
      last_progress = h_now();
    }
    if (failed && outstanding == 0) { /* the QP went to ERR: a fresh pair, the same MRs */
      ibv_destroy_qp(a.qp);
      ibv_destroy_qp(b.qp);
      a.qp = h_qp(a.pd, a.cq, 64, NULL);
      b.qp = h_qp(b.pd, b.cq, 64, NULL);
      if (!a.qp || !b.qp) h_die("ibv_create_qp");
      h_pair(&a, &b);
    }
    if (!punched && h_now() > punch_at) {
      punched = 1;
      const int pr = fd >= 0 ? fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, LEN) : -1;
      const int pe = pr ? errno : 0;
      const int mr = madvise(huge, LEN, MADV_REMOVE);
      h_say("FALLOC_FL_PUNCH_HOLE on the registered memfd: %s; MADV_REMOVE: %s", pr ? strerror(pe) : "done",
            mr ? strerror(errno) : "done");
      if (exhaust) {
        taken = calloc(65536, sizeof *taken);
        while (taken && ntaken < 65536) {
          char* p = mmap(NULL, HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_POPULATE,
                         -1, 0);
          if (p == MAP_FAILED) break;
          taken[ntaken++] = p;
        }
        h_say("took every free huge page: %zu", ntaken);
        give_back_at = h_now() + 2;
      }
    }
    if (ntaken && h_now() > give_back_at) {
      for (size_t i = 0; i < ntaken; ++i) munmap(taken[i], HUGE);
      h_say("gave the %zu huge pages back", ntaken);
      ntaken = 0;
    }
    if (outstanding && h_now() - last_progress > 10) {
      h_bad("%d WRs on the punched range made no progress for 10 s", outstanding);
      break;
    }
    usleep(n == 0 ? 1000 : 5000);
  }
  for (size_t i = 0; i < ntaken; ++i) munmap(taken[i], HUGE);
  h_say("traffic on the huge pages: %d completed, %d failed", ok, failed);
  return h_verdict();
}
