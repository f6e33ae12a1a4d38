/* A verified RC transfer between two verbs programs, for interop with stacks Tandem did not write
 * (tests/system/interop_rxe_test.py, benchmarks/interop-rxe): plain libibverbs C linked against
 * rdma-core's library, so the same binary runs on Linux's rxe (in the guest) and on Tandem
 * (scripts/tandem-run puts the drop-in in front). perftest checks no data; this does.
 *
 *   rdma_verify [-d DEV] [-g GIDX] [-p PORT] [-n ROUNDS] [-s MAX] [-m MTU] [-t SECONDS] [SERVER]
 *
 * Without SERVER it listens on PORT (TCP, for the QP details), else it connects. Each round both
 * sides in turn WRITE a pattern into the other's buffer, READ the other's (prefilled) buffer and
 * SEND_WITH_IMM a third pattern; the receiver checks all three and the immediate. Message sizes
 * cycle through MAX, 1, 1023, 1025, 4097 and MAX/2+13 (pad bytes, several packets, one short of and
 * one past an MTU). Prints "rdma_verify: ok ..." and exits 0, or names the first differing byte and
 * exits 1; 2 for a setup error; a run longer than SECONDS dies of SIGALRM. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <infiniband/verbs.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

enum { kIn = 0, kOut = 1, kRecv = 2, kSend = 3, kAreas = 4 };

struct wire {  // what the TCP exchange carries (network order where it matters)
  uint32_t qpn, psn, rkey;
  uint64_t addr;
  uint8_t gid[16];
};

static const char* dev_name;
static int gidx, mtu = 1024, is_server;
static uint32_t max_size = 65536;
static struct ibv_context* ctx;
static struct ibv_pd* pd;
static struct ibv_mr* mr;
static struct ibv_cq* cq;
static struct ibv_qp* qp;
static uint8_t* buf;
static struct wire me, peer;

static void die(const char* what) {
  fprintf(stderr, "rdma_verify: %s: %s\n", what, errno ? strerror(errno) : "failed");
  exit(2);
}

static uint8_t* area(int a) { return buf + (size_t)a * max_size; }

/* Byte k of pattern `tag` in round `r`: differs per side, operation, round and offset. */
static uint8_t pat(int tag, int r, uint32_t k) { return (uint8_t)(k * 31u + (uint32_t)r * 7u + (uint32_t)tag * 101u + (k >> 8)); }

static void fill(uint8_t* p, uint32_t n, int tag, int r) {
  for (uint32_t k = 0; k < n; ++k) p[k] = pat(tag, r, k);
}

static void check(const uint8_t* p, uint32_t n, int tag, int r, const char* what) {
  for (uint32_t k = 0; k < n; ++k)
    if (p[k] != pat(tag, r, k)) {
      fprintf(stderr, "rdma_verify: round %d: %s of %u bytes differs at byte %u: 0x%02x, expected 0x%02x\n", r, what, n,
              k, p[k], pat(tag, r, k));
      exit(1);
    }
}

static uint32_t size_of(int r) {
  const uint32_t s[] = {max_size, 1, 1023, 1025, 4097, max_size / 2 + 13};
  uint32_t v = s[r % 6];
  return v > max_size ? max_size : v;
}

static void open_dev(void) {
  int n = 0;
  struct ibv_device** l = ibv_get_device_list(&n);
  if (!l || n == 0) die("no verbs device");
  struct ibv_device* d = l[0];
  for (int i = 0; dev_name && i < n; ++i)
    if (strcmp(ibv_get_device_name(l[i]), dev_name) == 0) d = l[i];
  if (dev_name && strcmp(ibv_get_device_name(d), dev_name) != 0) die("device not found");
  ctx = ibv_open_device(d);
  ibv_free_device_list(l);
  if (!ctx) die("ibv_open_device");
}

static void setup(void) {
  open_dev();
  if (!(pd = ibv_alloc_pd(ctx))) die("ibv_alloc_pd");
  if (posix_memalign((void**)&buf, 4096, (size_t)max_size * kAreas)) die("posix_memalign");
  memset(buf, 0, (size_t)max_size * kAreas);
  mr = ibv_reg_mr(pd, buf, (size_t)max_size * kAreas,
                  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
  if (!mr) die("ibv_reg_mr");
  if (!(cq = ibv_create_cq(ctx, 16, NULL, NULL, 0))) die("ibv_create_cq");
  struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
                                .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1}};
  if (!(qp = ibv_create_qp(pd, &ia))) die("ibv_create_qp");
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
                          .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ};
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    die("modify_qp INIT");
  union ibv_gid g;
  if (ibv_query_gid(ctx, 1, gidx, &g)) die("ibv_query_gid");
  memcpy(me.gid, g.raw, 16);
  me.qpn = htonl(qp->qp_num);
  me.psn = htonl((uint32_t)(getpid() * 2654435761u) & 0xFFFFFF);
  me.rkey = htonl(mr->rkey);
  me.addr = htobe64((uint64_t)(uintptr_t)buf);
}

static void connect_qp(void) {
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR, .dest_qp_num = ntohl(peer.qpn), .rq_psn = ntohl(peer.psn),
                          .max_dest_rd_atomic = 1, .min_rnr_timer = 12};
  a.path_mtu = mtu == 4096 ? IBV_MTU_4096 : mtu == 2048 ? IBV_MTU_2048 : mtu == 512 ? IBV_MTU_512
             : mtu == 256 ? IBV_MTU_256 : IBV_MTU_1024;
  a.ah_attr.is_global = 1;
  memcpy(a.ah_attr.grh.dgid.raw, peer.gid, 16);
  a.ah_attr.grh.sgid_index = (uint8_t)gidx;
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.port_num = 1;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                               IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    die("modify_qp RTR");
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = ntohl(me.psn);
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 1;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                               IBV_QP_MAX_QP_RD_ATOMIC))
    die("modify_qp RTS");
}

static int read_all(int fd, void* p, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, (char*)p + got, n - got);
    if (r <= 0) return -1;
    got += (size_t)r;
  }
  return 0;
}

static void exchange(const char* server, int port) {
  if (!server) {
    int l = socket(AF_INET, SOCK_STREAM, 0), one = 1, fd;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(l, (struct sockaddr*)&sa, sizeof sa) || listen(l, 1)) die("listen");
    for (;;) {  /* a forwarder (QEMU's user network) may connect and drop before the client is there */
      if ((fd = accept(l, NULL, NULL)) < 0) die("accept");
      if (write(fd, &me, sizeof me) == sizeof me && read_all(fd, &peer, sizeof peer) == 0) break;
      close(fd);
    }
    close(fd);
    close(l);
    return;
  }
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res;
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port);
  if (getaddrinfo(server, ps, &hints, &res)) die("getaddrinfo");
  /* The server may not listen yet; through a forwarder that shows as a reset, not a refusal. */
  for (int i = 0; i < 600; ++i) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, res->ai_addr, res->ai_addrlen) == 0 && write(fd, &me, sizeof me) == sizeof me &&
        read_all(fd, &peer, sizeof peer) == 0) {
      close(fd);
      freeaddrinfo(res);
      return;
    }
    close(fd);
    usleep(100000);
  }
  die("no server answered");
}

static void post_recv(void) {
  struct ibv_sge s = {.addr = (uintptr_t)area(kRecv), .length = max_size, .lkey = mr->lkey};
  struct ibv_recv_wr w = {.wr_id = 1, .sg_list = &s, .num_sge = 1}, *bad;
  if (ibv_post_recv(qp, &w, &bad)) die("ibv_post_recv");
}

static void post(enum ibv_wr_opcode op, int a, uint32_t n, uint64_t remote, uint32_t imm, int signaled) {
  struct ibv_sge s = {.addr = (uintptr_t)area(a), .length = n, .lkey = mr->lkey};
  struct ibv_send_wr w = {.wr_id = (uint64_t)op, .sg_list = &s, .num_sge = 1, .opcode = op,
                          .send_flags = signaled ? IBV_SEND_SIGNALED : 0, .imm_data = htonl(imm)}, *bad;
  w.wr.rdma.remote_addr = remote;
  w.wr.rdma.rkey = ntohl(peer.rkey);
  if (ibv_post_send(qp, &w, &bad)) die("ibv_post_send");
}

/* Waits for one completion of `want` (IBV_WC_RECV or a send opcode); returns it. */
static struct ibv_wc wait_wc(int want_recv) {
  struct ibv_wc wc;
  for (;;) {
    int n = ibv_poll_cq(cq, 1, &wc);
    if (n < 0) die("ibv_poll_cq");
    if (n == 0) continue;
    if (wc.status != IBV_WC_SUCCESS) {
      fprintf(stderr, "rdma_verify: completion %s (opcode %d, vendor_err %u)\n", ibv_wc_status_str(wc.status),
              wc.opcode, wc.vendor_err);
      exit(1);
    }
    if (!!(wc.opcode & IBV_WC_RECV) == want_recv) return wc;
  }
}

/* My turn of round r: WRITE into the peer's in-area, READ its out-area, SEND_IMM. */
static void active(int r, int tag) {
  const uint32_t n = size_of(r);
  const uint64_t base = be64toh(peer.addr);
  /* What the peer reads in its next turn: the server's comes in this round, the client's in the next. */
  fill(area(kOut), max_size, tag + 10, is_server ? r + 1 : r);
  fill(area(kSend), n, tag + 1, r);
  fill(area(kIn), n, 0xEE, 0);
  post(IBV_WR_RDMA_WRITE, kSend, n, base + (uint64_t)kIn * max_size, 0, 0);
  post(IBV_WR_RDMA_READ, kIn, n, base + (uint64_t)kOut * max_size, 0, 1);
  wait_wc(0);
  check(area(kIn), n, (1 - tag) + 10, r, "RDMA READ data");
  fill(area(kSend), n, tag + 2, r);
  post(IBV_WR_SEND_WITH_IMM, kSend, n, 0, 0xC0DE0000u | (uint32_t)r, 1);
  wait_wc(0);
}

/* The peer's turn: its SEND_IMM arrives after its WRITE landed (RC order). */
static void passive(int r, int tag) {
  const uint32_t n = size_of(r);
  struct ibv_wc wc = wait_wc(1);
  if (!(wc.wc_flags & IBV_WC_WITH_IMM) || ntohl(wc.imm_data) != (0xC0DE0000u | (uint32_t)r) || wc.byte_len != n) {
    fprintf(stderr, "rdma_verify: round %d: SEND_IMM completion imm %s0x%08x, %u bytes (expected 0x%08x, %u)\n", r,
            (wc.wc_flags & IBV_WC_WITH_IMM) ? "" : "(none) ", ntohl(wc.imm_data), wc.byte_len,
            0xC0DE0000u | (uint32_t)r, n);
    exit(1);
  }
  check(area(kIn), n, tag + 1, r, "RDMA WRITE data");
  check(area(kRecv), n, tag + 2, r, "SEND data");
  post_recv();
}

int main(int argc, char** argv) {
  int port = 18515, rounds = 12, secs = 60, c;
  while ((c = getopt(argc, argv, "d:g:p:n:s:m:t:")) != -1) switch (c) {
      case 'd': dev_name = optarg; break;
      case 'g': gidx = atoi(optarg); break;
      case 'p': port = atoi(optarg); break;
      case 'n': rounds = atoi(optarg); break;
      case 's': max_size = (uint32_t)strtoul(optarg, NULL, 0); break;
      case 'm': mtu = atoi(optarg); break;
      case 't': secs = atoi(optarg); break;
      default: fprintf(stderr, "usage: rdma_verify [-d DEV] [-g GIDX] [-p PORT] [-n ROUNDS] [-s MAX] [-m MTU] [-t S] [SERVER]\n"); return 2;
    }
  if (max_size < 16) max_size = 16;
  const char* server = optind < argc ? argv[optind] : NULL;
  is_server = server == NULL;
  alarm((unsigned)secs);
  setup();
  const int tag = is_server ? 0 : 1;  /* the client goes first in each round */
  fill(area(kOut), max_size, tag + 10, 0);
  post_recv();
  exchange(server, port);
  connect_qp();
  for (int r = 0; r < rounds; ++r) {
    if (!is_server) { active(r, tag); passive(r, 1 - tag); }
    else { passive(r, 1 - tag); active(r, tag); }
  }
  printf("rdma_verify: ok: %d rounds of RDMA WRITE, RDMA READ and SEND_WITH_IMM each way, up to %u bytes, mtu %d\n",
         rounds, max_size, mtu);
  return 0;
}
