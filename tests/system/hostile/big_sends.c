/* 64 MiB SENDs in a loop: B keeps two 64 MiB SENDs outstanding to A, which
 * keeps two 64 MiB receives posted, until stopped. The largest message the
 * port takes (ibv_query_port max_msg_sz), as fast as the worker moves it.
 *
 * Verbs: every SEND and receive completes successfully with all its bytes
 * (the first and last 4 KiB of each are checked).
 *   big_sends DEV_A DEV_B DIR SECONDS */
#include "hostile.h"

#define LEN (64u << 20)

int main(int argc, char** argv) {
  h_init(argc, argv, "big_sends", 0);
  struct h_end a, b;
  h_end_make(&a, h_open(argv[1]), 64, 16);
  h_end_make(&b, h_open(argv[2]), 64, 16);
  h_pair(&a, &b);
  struct ibv_port_attr pa;
  if (ibv_query_port(b.ctx, 1, &pa) == 0 && pa.max_msg_sz < LEN) h_bad("max_msg_sz %u < 64 MiB", pa.max_msg_sz);
  char* src = h_alloc(LEN, 0);
  char* dst = h_alloc(2 * (size_t)LEN, 0);
  for (size_t i = 0; i < LEN; i += 4096) memset(src + i, (int)(i >> 12) & 0xff, 4096);
  struct ibv_mr* smr = ibv_reg_mr(b.pd, src, LEN, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr* dmr = ibv_reg_mr(a.pd, dst, 2 * (size_t)LEN, IBV_ACCESS_LOCAL_WRITE);
  if (!smr || !dmr) h_die("ibv_reg_mr");
  for (uint64_t k = 0; k < 2; ++k)
    if (h_post_recv(a.qp, k, dst + k * LEN, LEN, dmr->lkey)) h_die("ibv_post_recv");
  int sends_out = 0;
  uint64_t sent = 0, received = 0;
  h_ready();
  struct ibv_wc wc;
  double last = h_now();
  while (!h_stop()) {
    while (sends_out < 2) {
      if (h_post_send(b.qp, IBV_WR_SEND, sent + sends_out, src, LEN, smr->lkey, 0, 0, 1)) h_die("ibv_post_send");
      ++sends_out;
    }
    if (ibv_poll_cq(b.cq, 1, &wc) > 0) {
      --sends_out;
      ++sent;
      last = h_now();
      if (wc.status != IBV_WC_SUCCESS) {
        h_bad("a 64 MiB SEND completed with %s", ibv_wc_status_str(wc.status));
        break;
      }
    }
    if (ibv_poll_cq(a.cq, 1, &wc) > 0) {
      char* d = dst + wc.wr_id * LEN;
      if (wc.status != IBV_WC_SUCCESS || wc.byte_len != LEN) {
        h_bad("a 64 MiB receive completed with %s, %u bytes", ibv_wc_status_str(wc.status), wc.byte_len);
        break;
      }
      if (memcmp(d, src, 4096) || memcmp(d + LEN - 4096, src + LEN - 4096, 4096)) h_bad("a 64 MiB SEND arrived wrong");
      memset(d, 0, 4096);
      ++received;
      if (h_post_recv(a.qp, wc.wr_id, dst + wc.wr_id * LEN, LEN, dmr->lkey)) h_die("ibv_post_recv");
    }
    if (h_now() - last > 15) {
      h_bad("no 64 MiB SEND completed for 15 s");
      break;
    }
    usleep(100);
  }
  h_say("%lu x 64 MiB SENDs completed, %lu received (%.2f Gb/s)", (unsigned long)sent, (unsigned long)received,
        sent * (double)LEN * 8 / 1e9 / (h_now() - h_t0));
  return h_verdict();
}
