/* An rdma_cm client for the CM system test, against the drop-in librdmacm
 * (-b SRC: from that vNIC address, else whichever vNIC first has a route):
 *   cm_client_app connect IP PORT       connects, prints the first event after
 *                                       rdma_connect ("EVENT <name> <status>"),
 *                                       exit 0 if ESTABLISHED
 *   cm_client_app halfopen IP PORT SECS connects and then reads no event for
 *                                       SECS: like rdma-core's librdmacm, the RTU
 *                                       goes out only when the application takes
 *                                       the CONNECT_RESPONSE, so the server holds
 *                                       a half-open connection */
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int expect(struct rdma_event_channel *ch, enum rdma_cm_event_type want) {
  struct rdma_cm_event *e;
  if (rdma_get_cm_event(ch, &e)) {
    perror("rdma_get_cm_event");
    return -1;
  }
  int ok = e->event == want && e->status == 0;
  if (!ok) printf("EVENT %s %d\n", rdma_event_str(e->event), e->status);
  rdma_ack_cm_event(e);
  return ok ? 0 : -1;
}

int main(int argc, char **argv) {
  struct sockaddr_in src = {.sin_family = AF_INET};
  int bound = 0;
  if (argc > 2 && strcmp(argv[1], "-b") == 0) {
    bound = inet_pton(AF_INET, argv[2], &src.sin_addr) == 1;
    argc -= 2;
    argv += 2;
  }
  if (argc < 4) {
    fprintf(stderr, "usage: cm_client_app [-b SRC] connect|halfopen IP PORT [SECS]\n");
    return 2;
  }
  struct rdma_event_channel *ch = rdma_create_event_channel();
  struct rdma_cm_id *id;
  if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP)) return perror("create"), 1;
  struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[3]))};
  inet_pton(AF_INET, argv[2], &dst.sin_addr);
  if (rdma_resolve_addr(id, bound ? (struct sockaddr *)&src : NULL, (struct sockaddr *)&dst, 2000) || expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED))
    return printf("resolve failed\n"), 1;
  if (rdma_resolve_route(id, 2000) || expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED)) return printf("route failed\n"), 1;
  struct ibv_qp_init_attr qa = {.cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1},
                                .qp_type = IBV_QPT_RC};
  if (rdma_create_qp(id, NULL, &qa)) return perror("rdma_create_qp"), 1;
  struct rdma_conn_param p = {.private_data = "tandem", .private_data_len = 6, .responder_resources = 1,
                              .initiator_depth = 1, .retry_count = 7, .rnr_retry_count = 7};
  if (rdma_connect(id, &p)) return perror("rdma_connect"), 1;
  if (strcmp(argv[1], "halfopen") == 0) {
    sleep(argc > 4 ? (unsigned)atoi(argv[4]) : 5);
    printf("HALFOPEN done\n");
    return 0;
  }
  struct rdma_cm_event *e;
  if (rdma_get_cm_event(ch, &e)) return perror("rdma_get_cm_event"), 1;
  printf("EVENT %s %d\n", rdma_event_str(e->event), e->status);
  int ok = e->event == RDMA_CM_EVENT_ESTABLISHED;
  rdma_ack_cm_event(e);
  fflush(stdout);
  if (ok) {
    rdma_disconnect(id);
    expect(ch, RDMA_CM_EVENT_DISCONNECTED);
  }
  rdma_destroy_qp(id);
  rdma_destroy_id(id);
  rdma_destroy_event_channel(ch);
  return ok ? 0 : 1;
}
