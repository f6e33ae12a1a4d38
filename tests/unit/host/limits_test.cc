// Fair shares of a worker (ServerConfig::limits, resource_quota.h): at its
// limit an application's next create is refused with a clean status and
// counted for its vNIC, freeing one lets one more in, and another vNIC's
// application can still create its own at that moment.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
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

#include "rnic/host/host_server.h"
#include "rnic/host/verbs.h"
#include "server_thread.h"

using namespace tandem::rnic::host;
using tandem::rnic::host::test::ServerThread;

namespace {

constexpr uint32_t kVnicA = 0xC0A80701, kVnicB = 0xC0A80801;  // 192.168.7.1 (tenant A), 192.168.8.1 (B)

ServerConfig two_vnics(Resource r, uint64_t per_vnic, uint64_t per_app = kUnlimited) {
  ServerConfig c;
  c.vnic_ips = {kVnicA, kVnicB};
  c.limits.per_vnic[resource_index(r)] = per_vnic;
  c.limits.per_app[resource_index(r)] = per_app;
  return c;
}

Context* attach(const ServerThread& st, const char* vnic) {
  DeviceAttr attr;
  attr.vnic = vnic;
  attr.huge_buffers = false;  // plain memfds: the charged size is the buffer's, page-rounded
  Context* ctx = open_device(st.path.c_str(), attr);
  REQUIRE(ctx != nullptr);
  return ctx;
}

Qp* track(Qp* q);

Qp* make_qp(Pd* pd, Cq* cq) {
  QpInitAttr init;
  init.send_cq = cq;
  init.recv_cq = cq;
  init.cap.max_send_wr = 4;
  init.cap.max_recv_wr = 4;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  return track(create_qp(pd, &init));
}

// The vNIC's row of the server's quota table (used and refused per resource).
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

// What each application holds, so a test ends with nothing leaked: t_close
// frees it in order, or (died) leaves it as a dead process leaves its memory.
struct Held {
  std::vector<Qp*> qps;
  std::vector<Mr*> mrs;
  std::vector<Cq*> cqs;
  std::vector<Pd*> pds;
};
std::map<Context*, Held>& held() {
  static std::map<Context*, Held> h;
  return h;
}
template <class T>
void forget(std::vector<T*>& v, T* p) {
  v.erase(std::remove(v.begin(), v.end(), p), v.end());
}
Qp* track(Qp* q) {
  if (q) held()[q->context].qps.push_back(q);
  return q;
}
Pd* t_alloc_pd(Context* c) {
  Pd* p = alloc_pd(c);
  if (p) held()[c].pds.push_back(p);
  return p;
}
Cq* t_create_cq(Context* c, int n) {
  Cq* q = create_cq(c, n);
  if (q) held()[c].cqs.push_back(q);
  return q;
}
Mr* t_reg_mr(Pd* pd, void* a, std::size_t n, int access) {
  Mr* m = reg_mr(pd, a, n, access);
  if (m) held()[pd->context].mrs.push_back(m);
  return m;
}
int t_destroy_qp(Qp* q) {
  forget(held()[q->context].qps, q);
  return destroy_qp(q);
}
int t_destroy_cq(Cq* q) {
  forget(held()[q->context].cqs, q);
  return destroy_cq(q);
}
int t_dealloc_pd(Pd* p) {
  forget(held()[p->context].pds, p);
  return dealloc_pd(p);
}
int t_dereg_mr(Mr* m) {
  forget(held()[m->pd->context].mrs, m);
  return dereg_mr(m);
}
void t_close(Context* c, bool died = false) {
  Held h = held()[c];
  held().erase(c);
  if (!died) {
    for (Qp* q : h.qps) destroy_qp(q);
    for (Mr* m : h.mrs) dereg_mr(m);
    for (Cq* q : h.cqs) destroy_cq(q);
    for (Pd* p : h.pds) dealloc_pd(p);
  } else {
#if TANDEM_LSAN
    for (Qp* q : h.qps) __lsan_ignore_object(q);
    for (Mr* m : h.mrs) __lsan_ignore_object(m);
    for (Cq* q : h.cqs) __lsan_ignore_object(q);
    for (Pd* p : h.pds) __lsan_ignore_object(p);
#endif
  }
  close_device(c);
}

}  // namespace

TEST_CASE("a vNIC at its QP limit is refused; freeing one lets one in; another vNIC still creates") {
  ServerThread st(two_vnics(Resource::kQps, 4));
  // Two applications of tenant A share its vNIC's 4 QPs.
  Context* a1 = attach(st, "192.168.7.1");
  Context* a2 = attach(st, "192.168.7.1");
  Pd* pd1 = t_alloc_pd(a1);
  Pd* pd2 = t_alloc_pd(a2);
  Cq* cq1 = t_create_cq(a1, 16);
  Cq* cq2 = t_create_cq(a2, 16);
  REQUIRE((pd1 && pd2 && cq1 && cq2));
  std::vector<Qp*> qps;
  for (int i = 0; i < 3; ++i) qps.push_back(make_qp(pd1, cq1));
  qps.push_back(make_qp(pd2, cq2));
  for (Qp* q : qps) REQUIRE(q != nullptr);

  CHECK(make_qp(pd2, cq2) == nullptr);
  CHECK(last_status() == Status::kOverLimit);
  CHECK(make_qp(pd1, cq1) == nullptr);
  CHECK(last_status() == Status::kOverLimit);
  TenantQuotas::Row ra = row_of(st, kVnicA);
  CHECK(at(ra.used, Resource::kQps) == 4);
  CHECK(at(ra.refused, Resource::kQps) == 2);
  CHECK(st.with([](HostServer& s) { return s.counters().refused_qps; }) == 2);
  CHECK(st.with([](HostServer& s) { return s.qp_count(); }) == 4);

  // Tenant B, at this moment: its own share is whole.
  Context* b = attach(st, "192.168.8.1");
  Pd* pdb = t_alloc_pd(b);
  Cq* cqb = t_create_cq(b, 16);
  REQUIRE((pdb && cqb));
  std::vector<Qp*> bqps;
  for (int i = 0; i < 4; ++i) {
    bqps.push_back(make_qp(pdb, cqb));
    REQUIRE(bqps.back() != nullptr);
  }
  CHECK(at(row_of(st, kVnicB).refused, Resource::kQps) == 0);

  // One of A's freed: exactly one more fits, in either of A's applications.
  REQUIRE(t_destroy_qp(qps.back()) == 0);
  qps.pop_back();
  Qp* again = make_qp(pd1, cq1);
  REQUIRE(again != nullptr);
  qps.push_back(again);
  CHECK(make_qp(pd2, cq2) == nullptr);
  CHECK(last_status() == Status::kOverLimit);

  // An application that goes away gives its share back to its vNIC.
  t_close(a1, true);  // a1 "dies": its 4 QPs (3 + the re-created one) are freed by the worker
  REQUIRE(st.wait_for([](HostServer& s) { return s.qp_count() == 4; }));
  CHECK(at(row_of(st, kVnicA).used, Resource::kQps) == 0);
  Qp* after = make_qp(pd2, cq2);
  CHECK(after != nullptr);
  t_close(a2);
  t_close(b);
}

TEST_CASE("an application at its own QP limit is refused while its vNIC has room") {
  ServerThread st(two_vnics(Resource::kQps, 100, 2));
  Context* a1 = attach(st, "192.168.7.1");
  Context* a2 = attach(st, "192.168.7.1");
  Pd* pd1 = t_alloc_pd(a1);
  Pd* pd2 = t_alloc_pd(a2);
  Cq* cq1 = t_create_cq(a1, 16);
  Cq* cq2 = t_create_cq(a2, 16);
  Qp* q1 = make_qp(pd1, cq1);
  Qp* q2 = make_qp(pd1, cq1);
  REQUIRE((q1 && q2));
  CHECK(make_qp(pd1, cq1) == nullptr);
  CHECK(last_status() == Status::kOverLimit);
  CHECK(make_qp(pd2, cq2) != nullptr);  // its sibling has its own two
  REQUIRE(t_destroy_qp(q1) == 0);
  CHECK(make_qp(pd1, cq1) != nullptr);
  CHECK(at(row_of(st, kVnicA).refused, Resource::kQps) == 1);
  t_close(a1);
  t_close(a2);
}

TEST_CASE("MR count and registered-byte limits refuse with their own status, per vNIC") {
  ServerConfig c = two_vnics(Resource::kMrs, 3);
  c.limits.per_vnic[resource_index(Resource::kBytes)] = 160 * 1024;  // two 64 KiB buffers, not three
  ServerThread st(c);
  Context* a = attach(st, "192.168.7.1");
  Pd* pd = t_alloc_pd(a);
  REQUIRE(pd != nullptr);
  constexpr std::size_t kLen = 64 * 1024;
  auto* buf1 = static_cast<uint8_t*>(alloc_buf(a, kLen));
  auto* buf2 = static_cast<uint8_t*>(alloc_buf(a, kLen));
  auto* buf3 = static_cast<uint8_t*>(alloc_buf(a, kLen));
  auto* small = static_cast<uint8_t*>(alloc_buf(a, 4096));
  REQUIRE((buf1 && buf2 && buf3 && small));
  Mr* m1 = t_reg_mr(pd, buf1, kLen, IBV_ACCESS_LOCAL_WRITE);
  Mr* m2 = t_reg_mr(pd, buf2, kLen, IBV_ACCESS_LOCAL_WRITE);
  REQUIRE((m1 && m2));
  CHECK(t_reg_mr(pd, buf3, kLen, IBV_ACCESS_LOCAL_WRITE) == nullptr);  // 192 KiB > 160 KiB
  CHECK(last_status() == Status::kOverByteLimit);
  Mr* m3 = t_reg_mr(pd, small, 4096, IBV_ACCESS_LOCAL_WRITE);  // bytes fit, and it is the third MR
  REQUIRE(m3 != nullptr);
  CHECK(t_reg_mr(pd, small, 4096, IBV_ACCESS_LOCAL_WRITE) == nullptr);
  CHECK(last_status() == Status::kOverLimit);
  TenantQuotas::Row r = row_of(st, kVnicA);
  CHECK(at(r.used, Resource::kMrs) == 3);
  CHECK(at(r.used, Resource::kBytes) == 2 * kLen + 4096);
  CHECK(at(r.refused, Resource::kBytes) == 1);
  CHECK(at(r.refused, Resource::kMrs) == 1);

  // Tenant B registers its own meanwhile.
  Context* b = attach(st, "192.168.8.1");
  Pd* pdb = t_alloc_pd(b);
  auto* bbuf = static_cast<uint8_t*>(alloc_buf(b, kLen));
  REQUIRE((pdb && bbuf));
  CHECK(t_reg_mr(pdb, bbuf, kLen, IBV_ACCESS_LOCAL_WRITE) != nullptr);

  REQUIRE(t_dereg_mr(m1) == 0);  // a count and 64 KiB back: the big one fits now
  CHECK(t_reg_mr(pd, buf3, kLen, IBV_ACCESS_LOCAL_WRITE) != nullptr);
  CHECK(at(row_of(st, kVnicA).used, Resource::kBytes) == 2 * kLen + 4096);
  t_close(a);
  t_close(b);
}

TEST_CASE("CQ and PD limits hold per vNIC, and unbound applications share one more group") {
  ServerConfig c = two_vnics(Resource::kCqs, 2);
  c.limits.per_vnic[resource_index(Resource::kPds)] = 1;
  ServerThread st(c);
  Context* a = attach(st, "192.168.7.1");
  Pd* pd = t_alloc_pd(a);
  REQUIRE(pd != nullptr);
  CHECK(t_alloc_pd(a) == nullptr);
  CHECK(last_status() == Status::kOverLimit);
  Cq* c1 = t_create_cq(a, 16);
  Cq* c2 = t_create_cq(a, 16);
  REQUIRE((c1 && c2));
  CHECK(t_create_cq(a, 16) == nullptr);
  CHECK(last_status() == Status::kOverLimit);
  REQUIRE(t_destroy_cq(c2) == 0);
  CHECK(t_create_cq(a, 16) != nullptr);
  REQUIRE(t_dealloc_pd(pd) == 0);
  CHECK(t_alloc_pd(a) != nullptr);

  Context* u = attach(st, nullptr);  // bound to no vNIC: the unbound group's own share
  CHECK(t_alloc_pd(u) != nullptr);
  CHECK(t_create_cq(u, 16) != nullptr);
  CHECK(t_create_cq(u, 16) != nullptr);
  CHECK(t_create_cq(u, 16) == nullptr);
  TenantQuotas::Row ru = row_of(st, 0);
  CHECK(at(ru.used, Resource::kCqs) == 2);
  CHECK(at(ru.refused, Resource::kCqs) == 1);
  CHECK(at(row_of(st, kVnicA).refused, Resource::kPds) == 1);
  t_close(a);
  t_close(u);
}

TEST_CASE("the default vNIC share leaves a quarter of each capacity to the others") {
  ResourceAmounts cap = kNoLimits;
  cap[resource_index(Resource::kQps)] = 16384;
  cap[resource_index(Resource::kMrs)] = 1;
  const ResourceAmounts share = default_vnic_share(cap);
  CHECK(at(share, Resource::kQps) == 12288);
  CHECK(at(share, Resource::kMrs) == 1);
  CHECK(at(share, Resource::kBytes) == kUnlimited);
  Resource r;
  CHECK((resource_by_name("bytes", &r) && r == Resource::kBytes));
  CHECK((resource_by_name("srqs", &r) && r == Resource::kSrqs));
  CHECK((resource_by_name("queue_bytes", &r) && r == Resource::kQueueBytes));
  CHECK_FALSE(resource_by_name("widgets", &r));
}

TEST_CASE("limit flags parse names, suffixes and none, and refuse the rest") {
  std::vector<LimitSetting> v;
  std::string err;
  REQUIRE(parse_limits("qps=192,bytes=64M", &v, &err));
  REQUIRE(parse_limits("mrs=none", &v, &err));
  REQUIRE(v.size() == 3);
  CHECK((v[0] == LimitSetting{Resource::kQps, 192}));
  CHECK((v[1] == LimitSetting{Resource::kBytes, uint64_t{64} << 20}));
  CHECK((v[2] == LimitSetting{Resource::kMrs, kUnlimited}));
  CHECK_FALSE(parse_limits("widgets=4", &v, &err));
  CHECK_FALSE(parse_limits("qps=-1", &v, &err));
  CHECK_FALSE(parse_limits("qps", &v, &err));
  CHECK_FALSE(parse_limits("bytes=99999999999T", &v, &err));
  CHECK(!err.empty());
}
