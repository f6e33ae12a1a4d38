// Address handles of the drop-in libibverbs, for UD QPs: an AH is a RoCEv2
// destination GID (is_global, IPv4-mapped), kept in the application's library
// (rnic/host Ah); ibv_post_send on a UD QP writes its IPv4 into the WQE. Which
// destinations a datagram may reach is the worker's decision (its vNIC's
// routes), so no worker round trip is needed here. ibv_init_ah_from_wc reads
// the GRH as RoCEv2 receivers place it: for IPv4, the IPv4 header in its last
// 20 bytes.
#include <infiniband/verbs.h>

#include <cerrno>
#include <cstring>

#include "rnic/host/verbs.h"
#include "rnic/verbs/device.h"

namespace th = tandem::rnic::host;
using namespace tandem::rnic::verbs;

namespace {

// The IPv4 header in a GRH buffer (RoCEv2 over IPv4: bytes 20..39), or nullptr.
const uint8_t* grh_ipv4(const ibv_grh* grh) {
  const auto* b = reinterpret_cast<const uint8_t*>(grh);
  return (b[20] >> 4) == 4 ? b + 20 : nullptr;
}

uint32_t be32_at(const uint8_t* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3];
}

}  // namespace

extern "C" {

ibv_ah* ibv_create_ah(ibv_pd* pd, ibv_ah_attr* attr) {
  if (pd == nullptr || attr == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  th::Ah* ah = th::create_ah(host_pd_of(pd), attr);
  if (ah == nullptr) {
    errno = EINVAL;  // not a RoCEv2 (IPv4-mapped, global) destination
    return nullptr;
  }
  ah->ibv.context = pd->context;
  ah->ibv.pd = pd;
  ah->ibv.handle = ah->ipv4;
  return &ah->ibv;
}

int ibv_destroy_ah(ibv_ah* ah) {
  if (ah == nullptr) return EINVAL;
  return errno_of(th::destroy_ah(reinterpret_cast<th::Ah*>(ah)));
}

// As rdma-core: the AH that answers the sender of `wc` (its GRH's source).
int ibv_init_ah_from_wc(ibv_context* context, uint8_t port_num, ibv_wc* wc, ibv_grh* grh, ibv_ah_attr* ah_attr) {
  if (context == nullptr || wc == nullptr || ah_attr == nullptr) {
    errno = EINVAL;
    return -1;
  }
  std::memset(ah_attr, 0, sizeof *ah_attr);
  ah_attr->dlid = wc->slid;
  ah_attr->sl = wc->sl;
  ah_attr->src_path_bits = wc->dlid_path_bits;
  ah_attr->port_num = port_num;
  if ((wc->wc_flags & IBV_WC_GRH) == 0 || grh == nullptr) {
    errno = EINVAL;  // RoCE has no LIDs: without a GRH there is no address
    return -1;
  }
  const uint8_t* ip = grh_ipv4(grh);
  if (ip == nullptr) {
    errno = EINVAL;  // Tandem's GIDs are IPv4: an IPv6 GRH is not ours
    return -1;
  }
  ah_attr->is_global = 1;
  gid_of(be32_at(ip + 12), &ah_attr->grh.dgid);
  ah_attr->grh.sgid_index = 0;  // the vNIC's one GID
  ah_attr->grh.hop_limit = 0xFF;
  ah_attr->grh.traffic_class = ip[1];
  return 0;
}

ibv_ah* ibv_create_ah_from_wc(ibv_pd* pd, ibv_wc* wc, ibv_grh* grh, uint8_t port_num) {
  if (pd == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  ibv_ah_attr attr;
  if (ibv_init_ah_from_wc(pd->context, port_num, wc, grh, &attr) != 0) return nullptr;
  return ibv_create_ah(pd, &attr);
}

}  // extern "C"
