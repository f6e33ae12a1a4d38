// Devices and contexts of the drop-in libibverbs: the registered vNICs of the
// running workers (rnic/host/device_registry.h), opened by attaching to their
// worker, and what applications query before they allocate anything.
#include "rnic/verbs/device.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "rnic/host/queue_layout.h"

#undef ibv_get_device_list
#undef ibv_query_port

using tandem::rnic::host::DeviceRecord;
namespace th = tandem::rnic::host;

namespace tandem::rnic::verbs {

TandemDevice* device_of(ibv_device* d) { return reinterpret_cast<TandemDevice*>(d); }
TandemContext* context_of(ibv_context* c) { return reinterpret_cast<TandemContext*>(verbs_get_ctx(c)); }

namespace {

// A list's devices outlive it while a context holds them (ibv_free_device_list
// is allowed right after ibv_open_device).
void release(TandemDevice* d) {
  if (--d->refs == 0) delete d;
}

uint64_t guid_of(const DeviceRecord& r) {
  // EUI-64 from the vNIC's MAC (ff:fe in the middle, U/L bit flipped), in network order.
  const uint8_t g[8] = {static_cast<uint8_t>(r.mac[0] ^ 2), r.mac[1], r.mac[2], 0xff, 0xfe, r.mac[3], r.mac[4], r.mac[5]};
  uint64_t v;
  std::memcpy(&v, g, 8);
  return v;
}

ibv_mtu mtu_enum(uint32_t bytes) {
  if (bytes >= 4096) return IBV_MTU_4096;
  if (bytes >= 2048) return IBV_MTU_2048;
  if (bytes >= 1024) return IBV_MTU_1024;
  if (bytes >= 512) return IBV_MTU_512;
  return IBV_MTU_256;
}

}  // namespace

void gid_of(uint32_t ipv4, ibv_gid* gid) {
  std::memset(gid, 0, sizeof *gid);
  gid->raw[10] = 0xff;
  gid->raw[11] = 0xff;
  const uint32_t be = htonl(ipv4);
  std::memcpy(gid->raw + 12, &be, 4);
}

}  // namespace tandem::rnic::verbs

using namespace tandem::rnic::verbs;

extern "C" {

ibv_device** ibv_get_device_list(int* num_devices) {
  // As rdma-core: these ask for ibv_fork_init() without a code change.
  if (secure_getenv("RDMAV_FORK_SAFE") != nullptr || secure_getenv("IBV_FORK_SAFE") != nullptr) ibv_fork_init();
  const std::vector<DeviceRecord> recs = th::read_devices(th::device_dir());
  auto** list = static_cast<ibv_device**>(calloc(recs.size() + 1, sizeof(ibv_device*)));
  if (list == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  for (std::size_t i = 0; i < recs.size(); ++i) {
    auto* d = new (std::nothrow) TandemDevice{};
    if (d == nullptr) {
      for (std::size_t j = 0; j < i; ++j) release(device_of(list[j]));
      free(list);
      errno = ENOMEM;
      return nullptr;
    }
    d->rec = recs[i];
    d->index = static_cast<int>(i);
    d->dev.node_type = IBV_NODE_CA;
    d->dev.transport_type = IBV_TRANSPORT_IB;  // RoCE reports IB transport, Ethernet link layer
    std::snprintf(d->dev.name, sizeof d->dev.name, "%s", d->rec.name.c_str());
    // uverbs<i>, as the kernel names a device's node (/dev/infiniband/ under tandem-sysfs).
    std::snprintf(d->dev.dev_name, sizeof d->dev.dev_name, "uverbs%zu", i);
    // Under tandem-sysfs the kernel's paths exist (the tree numbers uverbsN in this order);
    // elsewhere the registry file stands for both.
    char sysfs[IBV_SYSFS_PATH_MAX];
    std::snprintf(sysfs, sizeof sysfs, "/sys/class/infiniband/%s", d->rec.name.c_str());
    if (access(sysfs, F_OK) == 0) {
      std::snprintf(d->dev.ibdev_path, sizeof d->dev.ibdev_path, "%s", sysfs);
      std::snprintf(d->dev.dev_path, sizeof d->dev.dev_path, "/sys/class/infiniband_verbs/uverbs%zu", i);
    } else {
      std::snprintf(d->dev.dev_path, sizeof d->dev.dev_path, "%s/%s", th::device_dir().c_str(), d->rec.name.c_str());
      std::snprintf(d->dev.ibdev_path, sizeof d->dev.ibdev_path, "%s", d->dev.dev_path);
    }
    list[i] = &d->dev;
  }
  if (num_devices) *num_devices = static_cast<int>(recs.size());
  if (recs.empty()) errno = 0;
  return list;
}

void ibv_free_device_list(ibv_device** list) {
  if (list == nullptr) return;
  for (ibv_device** p = list; *p; ++p) release(device_of(*p));
  free(list);
}

const char* ibv_get_device_name(ibv_device* device) { return device ? device->name : nullptr; }

__be64 ibv_get_device_guid(ibv_device* device) { return device ? guid_of(device_of(device)->rec) : 0; }

int ibv_get_device_index(ibv_device* device) { return device ? device_of(device)->index : -1; }

ibv_context* ibv_open_device(ibv_device* device) {
  if (device == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  TandemDevice* d = device_of(device);
  char vnic[INET_ADDRSTRLEN];
  const uint32_t be = htonl(d->rec.vnic_ip);
  inet_ntop(AF_INET, &be, vnic, sizeof vnic);
  char prog[32] = "verbs";
  if (FILE* f = std::fopen("/proc/self/comm", "r")) {
    if (std::fgets(prog, sizeof prog, f)) prog[strcspn(prog, "\n")] = 0;
    std::fclose(f);
  }
  th::DeviceAttr attr;
  attr.name = prog;
  attr.vnic = vnic;  // the worker routes this context's QPs in that vNIC's tenant only
  attr.worker_uid = d->rec.owner_uid;  // the socket must be the worker's that wrote the record
  th::Context* host = th::open_device(d->rec.socket.c_str(), attr);
  if (host == nullptr) {
    // The worker decides who opens a vNIC (its socket's mode, or its owners checked on the peer's
    // credentials): a refusal is EACCES, as opening a /dev/infiniband node without rights is.
    const th::Status st = th::last_status();
    const bool denied = st == th::Status::kAccessDenied || (access(d->rec.socket.c_str(), F_OK) == 0 &&
                                                            access(d->rec.socket.c_str(), W_OK) != 0);
    errno = denied ? EACCES : st == th::Status::kTimeout ? ETIMEDOUT : ENODEV;
    return nullptr;
  }
  auto* c = new (std::nothrow) TandemContext{};
  if (c == nullptr) {
    th::close_device(host);
    errno = ENOMEM;
    return nullptr;
  }
  c->host = host;
  c->dev = d;
  ++d->refs;
  c->v.sz = sizeof(verbs_context);
  ibv_context& ctx = c->v.context;
  ctx.device = device;
  // The kernel's command fd (uverbs): Tandem's commands go over the worker's socket, so this is
  // /dev/null (what /dev/infiniband/uverbs<i> is under tandem-sysfs): a real fd that dup() and
  // close() accept, and that ibv_import_device refuses (EOPNOTSUPP).
  ctx.cmd_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  // A pollable fd for async events, as UCX and others add it to their event loops: an epoll fd
  // over the eventfd the worker kicks when it writes an event (protocol v2) and over the worker's
  // socket hanging up (IBV_EVENT_DEVICE_FATAL). Its own file, so O_NONBLOCK set on it by the
  // application decides only how ibv_get_async_event waits.
  ctx.async_fd = epoll_create1(EPOLL_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  const int efd = th::async_event_fd(host);
  bool ok = ctx.async_fd >= 0 && (efd < 0 || epoll_ctl(ctx.async_fd, EPOLL_CTL_ADD, efd, &ev) == 0);
  ev.events = EPOLLRDHUP;  // a reply to a verb is read by the verb itself: only the hang-up is ours
  ok = ok && epoll_ctl(ctx.async_fd, EPOLL_CTL_ADD, th::control_fd(host), &ev) == 0;
  if (!ok) {
    const int e = errno;
    if (ctx.async_fd >= 0) close(ctx.async_fd);
    th::close_device(host);
    --d->refs;
    delete c;
    errno = e;
    return nullptr;
  }
  ctx.num_comp_vectors = 1;
  pthread_mutex_init(&ctx.mutex, nullptr);
  ctx.abi_compat = __VERBS_ABI_IS_EXTENDED;  // verbs_get_ctx_op() finds create_qp_ex only: others EOPNOTSUPP
  install_ops(ctx);
  return &ctx;
}

int ibv_close_device(ibv_context* context) {
  if (context == nullptr) return EINVAL;
  TandemContext* c = context_of(context);
  th::close_device(c->host);
  close(context->async_fd);
  if (context->cmd_fd >= 0) close(context->cmd_fd);
  pthread_mutex_destroy(&context->mutex);
  TandemDevice* d = c->dev;
  delete c;
  release(d);
  return 0;
}

int ibv_query_device(ibv_context* context, ibv_device_attr* a) {
  if (context == nullptr || a == nullptr) return EINVAL;
  const DeviceRecord& r = context_of(context)->dev->rec;
  std::memset(a, 0, sizeof *a);
  std::snprintf(a->fw_ver, sizeof a->fw_ver, "tandem %u", unsigned{th::protocol_version(context_of(context)->host)});
  a->node_guid = guid_of(r);
  a->sys_image_guid = guid_of(r);
  a->max_mr_size = uint64_t{1} << 40;
  a->page_size_cap = 4096 | (2u << 20);
  a->vendor_id = 0xFFFFFF;  // no PCI vendor: a software device (rxe's value too; 0 reads as "none")
  a->hw_ver = 1;
  a->max_qp = static_cast<int>(std::min<uint32_t>(r.max_qps, th::kMaxQpsPerApp));
  a->max_qp_wr = static_cast<int>(th::kMaxQueueDepth);
  a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN;  // no IBV_DEVICE_SRQ_RESIZE
  a->max_sge = static_cast<int>(th::kMaxSge);
  a->max_sge_rd = static_cast<int>(th::kMaxSge);
  a->max_cq = a->max_qp * 2;
  a->max_cqe = static_cast<int>(th::kMaxQueueDepth);
  a->max_mr = 1 << 16;
  a->max_pd = 1 << 12;
  a->max_srq = 64;  // the worker's transport core (TransportConfig::max_srqs)
  a->max_srq_wr = static_cast<int>(th::kMaxQueueDepth);
  a->max_srq_sge = static_cast<int>(th::kMaxSge);
  a->max_qp_rd_atom = 16;
  a->max_qp_init_rd_atom = 16;
  a->max_res_rd_atom = a->max_qp * 16;
  // Atomics run with the CPU's atomic instructions on the registered memory, so they are atomic
  // against every other atomic of the port on any lcore (IBV_ATOMIC_HCA); GLOB is not promised.
  a->atomic_cap = IBV_ATOMIC_HCA;
  a->max_pkeys = 1;
  a->local_ca_ack_delay = 16;
  a->phys_port_cnt = 1;
  return 0;
}

// The exported symbol behind the header's ibv_query_port inline (which zeroes
// the whole ibv_port_attr first, so the full struct may be filled).
int ibv_query_port(ibv_context* context, uint8_t port_num, _compat_ibv_port_attr* compat) {
  if (context == nullptr || compat == nullptr || port_num != 1) return EINVAL;
  auto* p = reinterpret_cast<ibv_port_attr*>(compat);
  const DeviceRecord& r = context_of(context)->dev->rec;
  const bool up = th::port_active(context_of(context)->host);
  p->state = up ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
  p->max_mtu = IBV_MTU_4096;
  p->active_mtu = mtu_enum(r.mtu);
  p->gid_tbl_len = 1;
  p->port_cap_flags = 0;
  p->max_msg_sz = 1u << 26;  // the transport core's 64 MiB message limit
  p->pkey_tbl_len = 1;
  p->lid = 0;
  p->sm_lid = 0;
  p->lmc = 0;
  p->max_vl_num = 1;
  p->active_width = 2;   // 4X
  p->active_speed = 32;  // EDR (25 Gb/s a lane): a nominal 100 Gb/s port
  p->phys_state = up ? 5 : 3;  // LinkUp / Disabled
  p->link_layer = IBV_LINK_LAYER_ETHERNET;
  return 0;
}

int ibv_query_gid(ibv_context* context, uint8_t port_num, int index, ibv_gid* gid) {
  if (context == nullptr || gid == nullptr || port_num != 1 || index != 0) {
    errno = EINVAL;
    return -1;
  }
  gid_of(context_of(context)->dev->rec.vnic_ip, gid);
  return 0;
}

// Private in rdma-core (perftest and ibv_devinfo call it): 1 = RoCE v2.
int ibv_query_gid_type(ibv_context* context, uint8_t port_num, unsigned int index, int* type) {
  if (context == nullptr || type == nullptr || port_num != 1 || index != 0) {
    errno = EINVAL;
    return -1;
  }
  *type = 1;  // IBV_GID_TYPE_SYSFS_ROCE_V2
  return 0;
}

int _ibv_query_gid_ex(ibv_context* context, uint32_t port_num, uint32_t gid_index, ibv_gid_entry* entry,
                      uint32_t flags, size_t entry_size) {
  if (context == nullptr || entry == nullptr || flags != 0 || entry_size < sizeof(ibv_gid_entry)) return EINVAL;
  if (port_num != 1 || gid_index != 0) return ENODATA;
  std::memset(entry, 0, entry_size);
  gid_of(context_of(context)->dev->rec.vnic_ip, &entry->gid);
  entry->gid_index = 0;
  entry->port_num = 1;
  entry->gid_type = IBV_GID_TYPE_ROCE_V2;
  entry->ndev_ifindex = 0;  // no kernel netdev
  return 0;
}

ssize_t _ibv_query_gid_table(ibv_context* context, ibv_gid_entry* entries, size_t max_entries, uint32_t flags,
                             size_t entry_size) {
  if (context == nullptr || entries == nullptr || flags != 0 || entry_size < sizeof(ibv_gid_entry)) return -EINVAL;
  if (max_entries < 1) return -EINVAL;
  const int rc = _ibv_query_gid_ex(context, 1, 0, entries, 0, entry_size);
  return rc == 0 ? 1 : -rc;
}

int ibv_query_pkey(ibv_context* context, uint8_t port_num, int index, __be16* pkey) {
  if (context == nullptr || pkey == nullptr || port_num != 1 || index != 0) {
    errno = EINVAL;
    return -1;
  }
  *pkey = htons(0xffff);
  return 0;
}

int ibv_get_pkey_index(ibv_context* context, uint8_t port_num, __be16 pkey) {
  if (context == nullptr || port_num != 1) return -EINVAL;
  return pkey == htons(0xffff) ? 0 : -ENOENT;
}

// rdma-core reads sysfs files by path; a Tandem device has none of its own, so
// only real files are read (under tandem-sysfs, its generated tree).
int ibv_read_sysfs_file(const char* dir, const char* file, char* buf, size_t size) {
  char path[IBV_SYSFS_PATH_MAX * 2];
  std::snprintf(path, sizeof path, "%s/%s", dir, file);
  FILE* f = std::fopen(path, "r");
  if (f == nullptr || size == 0) {
    if (f) std::fclose(f);
    return -1;
  }
  const size_t n = std::fread(buf, 1, size - 1, f);
  std::fclose(f);
  buf[n] = 0;
  if (n > 0 && buf[n - 1] == '\n') buf[n - 1] = 0;
  return static_cast<int>(n);
}

const char* ibv_get_sysfs_path(void) { return "/sys"; }

}  // extern "C"
