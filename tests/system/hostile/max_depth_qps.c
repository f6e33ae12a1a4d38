/* Max-depth QPs until refused: on A, RC QPs of the device's max_qp_wr send
 * and receive entries (32K x 32K: ~24 MiB of the worker's memory each) are
 * created until the worker refuses one, then 9 more are tried; they are held
 * until stopped while the victim runs.
 *
 * Verbs: the refusal is a clean errno: ENOMEM (the vNIC's queue memory,
 * queue_bytes, or the worker's tables) or EAGAIN (its QP count); the 9 more
 * fail alike, and freeing one lets one more in.
 *   max_depth_qps DEV_A DEV_B DIR SECONDS */
#include "hostile.h"

#define CAP 4096
#define EXTRA 9

int main(int argc, char** argv) {
  h_init(argc, argv, "max_depth_qps", 0);
  struct ibv_context* ca = h_open(argv[1]);
  struct ibv_device_attr da;
  if (ibv_query_device(ca, &da)) h_die("ibv_query_device");
  struct ibv_pd* pd = ibv_alloc_pd(ca);
  struct ibv_cq* cq = ibv_create_cq(ca, 64, NULL, NULL, 0);
  if (!pd || !cq) h_die("pd/cq");
  static struct ibv_qp* qps[CAP];
  int n = 0, refused = 0, first_errno = 0, same = 1;
  for (int i = 0; i < CAP && refused <= EXTRA; ++i) {
    errno = 0;
    struct ibv_qp* q = h_qp(pd, cq, (uint32_t)da.max_qp_wr, NULL);
    if (q) {
      if (refused) h_bad("a QP was created after the first refusal");
      qps[n++] = q;
      continue;
    }
    if (refused++ == 0) first_errno = errno;
    else same = same && errno == first_errno;
  }
  h_say("%d QPs of %d x %d entries created, then %d refused with %s%s", n, da.max_qp_wr, da.max_qp_wr, refused,
        h_errno_name(first_errno), same ? "" : " (then other errnos)");
  if (refused == 0) h_bad("%d max-depth QPs and no refusal", n);
  if (refused && first_errno != ENOMEM && first_errno != EAGAIN)
    h_bad("refused with %s, not ENOMEM or EAGAIN", h_errno_name(first_errno));
  if (!same) h_bad("later refusals had another errno");
  if (n > 0) {
    ibv_destroy_qp(qps[--n]);
    struct ibv_qp* again = h_qp(pd, cq, (uint32_t)da.max_qp_wr, NULL);
    h_say("freed one, one more: %s", again ? "created" : h_errno_name(errno));
    if (!again) h_bad("freeing one max-depth QP did not let one more in");
    else qps[n++] = again;
  }
  h_ready();
  while (!h_stop()) usleep(20000);
  for (int i = 0; i < n; ++i) ibv_destroy_qp(qps[i]);
  return h_verdict();
}
