// What one tenant can cost a worker that others share (issue 30, item 4): the
// worker page every application maps is read-only to them, connections that
// never say hello time out and are bounded per uid, SRQs are charged like QPs
// and bounded by the transport's room, and queue depths are charged in the
// bytes they cost (queue_bytes), given back at destroy and at death.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#include <sanitizer/lsan_interface.h>
#define TANDEM_LSAN 1
#endif
#endif
#ifndef TANDEM_LSAN
#define TANDEM_LSAN 0
#endif

#include "rnic/host/host_protocol.h"
#include "rnic/host/host_server.h"
#include "rnic/host/unix_channel.h"
#include "rnic/host/verbs.h"
#include "server_thread.h"

using namespace tandem::rnic::host;
using tandem::rnic::host::test::ServerThread;

namespace {

constexpr uint32_t kVnicA = 0xC0A80701, kVnicB = 0xC0A80801;  // 192.168.7.1, 192.168.8.1

int raw_connect(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::strcpy(sa.sun_path, path.c_str());
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  return fd;
}

Context* attach(const ServerThread& st, const char* vnic) {
  DeviceAttr attr;
  attr.vnic = vnic;
  attr.huge_buffers = false;
  return open_device(st.path.c_str(), attr);
}

TenantQuotas::Row row_of(ServerThread& st, uint32_t vnic_ip) {
  return st.with([&](HostServer& s) {
    std::vector<TenantQuotas::Row> rows(TenantQuotas::kMaxAccounts);
    rows.resize(s.quotas().rows(rows));
    for (const TenantQuotas::Row& r : rows)
      if (r.vnic_ip == vnic_ip) return r;
    return TenantQuotas::Row{};
  });
}

uint64_t at(const ResourceAmounts& a, Resource r) { return a[resource_index(r)]; }

// An application that dies leaves its objects as a dead process would: unfreed here.
template <class... T>
void left_by_death(T*... objs) {
#if TANDEM_LSAN
  (__lsan_ignore_object(objs), ...);
#else
  ((void)objs, ...);
#endif
}

Qp* make_qp(Pd* pd, Cq* cq, uint32_t depth, Srq* srq = nullptr) {
  QpInitAttr init;
  init.send_cq = cq;
  init.recv_cq = cq;
  init.srq = srq;
  init.cap.max_send_wr = depth;
  init.cap.max_recv_wr = depth;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  return create_qp(pd, &init);
}

}  // namespace

TEST_CASE("the worker page is read-only to applications, whatever they do with its descriptor") {
  ServerThread st;
  int fd = raw_connect(st.path);
  REQUIRE(fd >= 0);
  Request hello{};
  hello.hdr.magic = kProtocolMagic;
  hello.hdr.type = static_cast<uint16_t>(MsgType::kHello);
  hello.hdr.seq = 1;
  hello.body.hello.version_min = kProtocolVersionMin;
  hello.body.hello.version_max = kProtocolVersionMax;
  ShmRegion page;
  REQUIRE(ShmRegion::create("t", sizeof(DoorbellPage), false, &page) == Status::kOk);
  int pfd = page.fd();
  REQUIRE(send_message(fd, &hello, sizeof hello, &pfd, 1) == sizeof hello);
  Reply rep{};
  int fds[kMaxFdsPerMessage];
  std::size_t nfds = 0;
  REQUIRE(recv_message(fd, &rep, sizeof rep, fds, kMaxFdsPerMessage, &nfds, false) == sizeof rep);
  REQUIRE(rep.hdr.status == 0);
  REQUIRE(nfds == 2);
  const int wp = fds[0];
  const std::size_t len = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));

  CHECK((fcntl(wp, F_GETFL) & O_ACCMODE) == O_RDONLY);
  CHECK(mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, wp, 0) == MAP_FAILED);
  void* ro = mmap(nullptr, len, PROT_READ, MAP_SHARED, wp, 0);
  REQUIRE(ro != MAP_FAILED);
  CHECK(static_cast<const WorkerPage*>(ro)->magic == WorkerPage::kMagic);
  CHECK(mprotect(ro, len, PROT_READ | PROT_WRITE) != 0);
  uint32_t zero = 0;
  CHECK(pwrite(wp, &zero, sizeof zero, 0) < 0);
  // Opened again through /proc with write access (a memfd's mode allows it): the seal still holds.
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/fd/%d", wp);
  const int rw = open(path, O_RDWR | O_CLOEXEC);
  if (rw >= 0) {
    CHECK(mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, rw, 0) == MAP_FAILED);
    CHECK(pwrite(rw, &zero, sizeof zero, 0) < 0);
    close(rw);
  }
  CHECK(static_cast<const WorkerPage*>(ro)->magic == WorkerPage::kMagic);
  munmap(ro, len);
  close(fds[0]);
  close(fds[1]);
  close(fd);
}

TEST_CASE("1,024 silent connections of one uid cannot keep an application from attaching") {
  ServerConfig c;
  c.hello_timeout_ns = uint64_t{1000} * 1'000'000'000;  // only the per-uid cap acts here
  c.max_silent_per_uid = 16;
  ServerThread st(c);
  std::vector<int> silent;
  for (int i = 0; i < 1024; ++i) {
    const int fd = raw_connect(st.path);
    if (fd >= 0) silent.push_back(fd);
  }
  CHECK(silent.size() == 1024);
  REQUIRE(st.wait_for([](HostServer& s) { return s.counters().silent_evicted == 1024 - 16; }));
  CHECK(st.with([](HostServer& s) { return s.app_count(); }) == 16);
  Context* ctx = attach(st, nullptr);  // the same uid's real application: its hello is waiting
  REQUIRE(ctx != nullptr);
  Pd* pd = alloc_pd(ctx);
  CHECK(pd != nullptr);
  // One more silent one evicts the oldest silent, never the application.
  silent.push_back(raw_connect(st.path));
  REQUIRE(st.wait_for([](HostServer& s) { return s.counters().silent_evicted == 1024 - 16 + 1; }));
  CHECK(worker_alive(ctx));
  CHECK(dealloc_pd(pd) == 0);
  close_device(ctx);
  for (int fd : silent) close(fd);
}

TEST_CASE("a connection that says no hello is closed after the timeout; one that does stays") {
  ServerConfig c;
  c.hello_timeout_ns = 200'000'000;  // ServerThread's clock: 1 ms per turn
  ServerThread st(c);
  std::vector<int> silent;
  for (int i = 0; i < 8; ++i) silent.push_back(raw_connect(st.path));
  Context* ctx = attach(st, nullptr);
  REQUIRE(ctx != nullptr);
  REQUIRE(st.wait_for([](HostServer& s) { return s.counters().silent_timeouts == 8; }));
  CHECK(st.with([](HostServer& s) { return s.app_count(); }) == 1);
  char b;
  for (int fd : silent) CHECK(recv(fd, &b, 1, MSG_DONTWAIT) == 0);  // closed by the worker
  Pd* pd = alloc_pd(ctx);
  CHECK(pd != nullptr);
  CHECK(dealloc_pd(pd) == 0);
  close_device(ctx);
  for (int fd : silent) close(fd);
}

TEST_CASE("a full table makes room by closing a silent connection, not by refusing a real one") {
  ServerConfig c;
  c.max_apps = 8;
  c.max_silent_per_uid = 64;  // the per-uid cap does not step in: the table's limit does
  ServerThread st(c);
  std::vector<int> silent;
  for (int i = 0; i < 8; ++i) silent.push_back(raw_connect(st.path));
  REQUIRE(st.wait_for([](HostServer& s) { return s.app_count() == 8; }));
  Context* ctx = attach(st, nullptr);
  REQUIRE(ctx != nullptr);
  CHECK(st.with([](HostServer& s) { return s.counters().silent_evicted; }) == 1);
  close_device(ctx);
  for (int fd : silent) close(fd);
}

TEST_CASE("SRQs are charged like QPs: a vNIC's share, the worker's room, and back at destroy or death") {
  ServerConfig c;
  c.vnic_ips = {kVnicA, kVnicB};
  c.max_srqs = 6;
  c.limits.per_vnic[resource_index(Resource::kSrqs)] = 4;
  ServerThread st(c);
  Context* a = attach(st, "192.168.7.1");
  Context* b = attach(st, "192.168.8.1");
  REQUIRE((a && b));
  Pd* pa = alloc_pd(a);
  Pd* pb = alloc_pd(b);
  std::vector<Srq*> as, bs;
  for (int i = 0; i < 4; ++i) as.push_back(create_srq(pa, 64, 1));
  for (Srq* s : as) REQUIRE(s != nullptr);
  CHECK(create_srq(pa, 64, 1) == nullptr);
  CHECK(last_status() == Status::kOverLimit);  // the drop-in libibverbs: EAGAIN
  CHECK(at(row_of(st, kVnicA).refused, Resource::kSrqs) == 1);
  // Tenant B has its share, up to the worker's room (6 SRQs here; 64 on tandem-rnic's core).
  for (int i = 0; i < 2; ++i) bs.push_back(create_srq(pb, 64, 1));
  for (Srq* s : bs) REQUIRE(s != nullptr);
  CHECK(create_srq(pb, 64, 1) == nullptr);
  CHECK(last_status() == Status::kNoResources);  // ENOMEM, as a device out of SRQs
  REQUIRE(destroy_srq(as.back()) == 0);
  as.pop_back();
  CHECK(at(row_of(st, kVnicA).used, Resource::kSrqs) == 3);
  Srq* again = create_srq(pb, 64, 1);
  CHECK(again != nullptr);
  for (Srq* s : as) left_by_death(s);
  left_by_death(pa);
  close_device(a);  // dies with its 3 SRQs: its vNIC gets them back
  REQUIRE(st.wait_for([](HostServer& s) { return s.srq_count() == 3; }));
  CHECK(at(row_of(st, kVnicA).used, Resource::kSrqs) == 0);
  CHECK(at(row_of(st, kVnicA).used, Resource::kQueueBytes) == 0);
  destroy_srq(again);
  for (Srq* s : bs) destroy_srq(s);
  dealloc_pd(pb);
  close_device(b);
}

TEST_CASE("queue depths are charged in bytes, the transport's records included, and refused with ENOMEM's status") {
  ServerConfig c;
  c.vnic_ips = {kVnicA, kVnicB};
  uint64_t asked = 0;  // what the worker's callback was asked for
  c.qp_worker_bytes = [&asked](uint32_t sq, uint32_t rq, bool on_srq, bool) {
    asked = uint64_t{sq} * 1000 + (on_srq ? 0 : uint64_t{rq} * 100);
    return asked;
  };
  c.srq_worker_bytes = [](uint32_t depth) { return uint64_t{depth} * 100; };
  c.limits.per_vnic[resource_index(Resource::kQueueBytes)] = 8u << 20;
  ServerThread st(c);
  Context* a = attach(st, "192.168.7.1");
  REQUIRE(a != nullptr);
  Pd* pd = alloc_pd(a);
  Cq* cq = create_cq(a, 64);
  REQUIRE((pd && cq));
  const uint64_t after_cq = at(row_of(st, kVnicA).used, Resource::kQueueBytes);
  CHECK(after_cq >= cq_layout(64).bytes);  // the CQ's ring is queue memory too

  Qp* small = make_qp(pd, cq, 16);
  REQUIRE(small != nullptr);
  const uint64_t small_cost = at(row_of(st, kVnicA).used, Resource::kQueueBytes) - after_cq;
  CHECK(asked == 16 * 1000 + 16 * 100);
  CHECK(small_cost >= asked + qp_queue_layout(16, 16).bytes);

  // A 4096 x 4096 QP: 4 MB of "transport" plus 1 MB of rings: one fits in 8 MB, two do not.
  Qp* deep = make_qp(pd, cq, 4096);
  REQUIRE(deep != nullptr);
  CHECK(make_qp(pd, cq, 4096) == nullptr);
  CHECK(last_status() == Status::kOverByteLimit);  // the drop-in libibverbs: ENOMEM
  CHECK(at(row_of(st, kVnicA).refused, Resource::kQueueBytes) == 1);
  CHECK(create_srq(pd, 32768, 1) == nullptr);  // 3.2 MB + a 4 MB ring: no room left either
  CHECK(last_status() == Status::kOverByteLimit);
  Srq* srq = create_srq(pd, 4096, 1);  // 0.4 MB + 0.5 MB: fits
  REQUIRE(srq != nullptr);
  // Another tenant is not charged for it.
  Context* b = attach(st, "192.168.8.1");
  Pd* pb = alloc_pd(b);
  Cq* cb = create_cq(b, 64);
  Qp* bq = make_qp(pb, cb, 4096);
  CHECK(bq != nullptr);
  REQUIRE(destroy_qp(deep) == 0);
  REQUIRE(destroy_srq(srq) == 0);
  CHECK(at(row_of(st, kVnicA).used, Resource::kQueueBytes) == after_cq + small_cost);
  Qp* again = make_qp(pd, cq, 4096);
  CHECK(again != nullptr);
  left_by_death(small, again, cq, pd);
  close_device(a);
  REQUIRE(st.wait_for([](HostServer& s) { return s.qp_count() == 1; }));
  CHECK(at(row_of(st, kVnicA).used, Resource::kQueueBytes) == 0);
  destroy_qp(bq);
  destroy_cq(cb);
  dealloc_pd(pb);
  close_device(b);
}
