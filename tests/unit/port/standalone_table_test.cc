// The standalone table file (rnic/port/standalone_table.h): the ingress entries
// its egress entries imply (what the agent installs with each flow), the file's
// own winning, none for a key two peers share.
#include <catch2/catch.hpp>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "rnic/port/standalone_table.h"

using namespace tandem::rnic::port;
namespace common = tandem::common;

namespace {
std::string write_yaml(const std::string& text) {
  char path[] = "/tmp/tandem-table-XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  std::ofstream(path) << text;
  return path;
}
const common::Level2Entry* ingress(const StandaloneTable& t, uint32_t underlay, uint32_t vni) {
  for (const common::Level2Entry& e : t.entries)
    if (e.key == common::ingress_key_vni(underlay, vni)) return &e;
  return nullptr;
}
}  // namespace

TEST_CASE("egress entries imply ingress entries; the file's win; a shared key gets none") {
  const std::string path = write_yaml(R"(underlay: {ip: 10.0.0.1, mac: "02:00:00:00:00:01", gateway_mac: "02:00:00:00:00:fe"}
vnics:
  - {id: 1, ip: 192.168.7.1, vni: 100}
  - {id: 2, ip: 192.168.8.1, vni: 200}
egress:
  - {vnic: 1, remote_ip: 192.168.7.2, underlay_ip: 10.0.0.2}
  - {vnic: 1, remote_ip: 192.168.7.3, underlay_ip: 10.0.0.3}
  - {vnic: 1, remote_ip: 192.168.7.4, underlay_ip: 10.0.0.4}
  - {vnic: 1, remote_ip: 192.168.7.5, underlay_ip: 10.0.0.4}
  - {vnic: 2, remote_ip: 192.168.8.2, underlay_ip: 10.0.0.2}
ingress:
  - {vnic: 1, underlay_src: 10.0.0.3, remote_ip: 192.168.7.33}
)");
  const StandaloneTable t = load_standalone_table(path, false);
  std::remove(path.c_str());
  const common::Level2Entry* a = ingress(t, 0x0A000002, 100);
  REQUIRE(a != nullptr);
  CHECK(a->ingress.overlay_src_ip == 0xC0A80702);
  CHECK(a->ingress.overlay_dst_ip == 0xC0A80701);
  CHECK(a->ingress.local_vnic_id == 1);
  const common::Level2Entry* b = ingress(t, 0x0A000002, 200);  // the other tenant, same host
  REQUIRE(b != nullptr);
  CHECK(b->ingress.overlay_src_ip == 0xC0A80802);
  CHECK(b->ingress.local_vnic_id == 2);
  const common::Level2Entry* given = ingress(t, 0x0A000003, 100);
  REQUIRE(given != nullptr);
  CHECK(given->ingress.overlay_src_ip == 0xC0A80721);  // the file's, not the derived one
  CHECK(ingress(t, 0x0A000004, 100) == nullptr);       // two peers behind 10.0.0.4: ambiguous
  const common::Level2Entry* self = ingress(t, 0x0A000001, 100);  // this port's own (loopback)
  REQUIRE(self != nullptr);
  CHECK(self->ingress.overlay_src_ip == 0xC0A80701);
  std::size_t n = 0;
  for (const common::Level2Entry& e : t.entries) n += e.key.kind == common::EntryKind::kIngressVni;
  CHECK(n == 5);  // 10.0.0.2 x 2 tenants, 10.0.0.3 (the file's), 10.0.0.1 x 2 tenants (loopback)
}

TEST_CASE("a vNIC reaches itself and its tenant's other vNICs on the port through the port's underlay") {
  const std::string path = write_yaml(R"(underlay: {ip: 10.0.0.1, mac: "02:00:00:00:00:01", gateway_mac: "02:00:00:00:00:fe"}
vnics:
  - {id: 1, ip: 192.168.7.1, vni: 100}
  - {id: 2, ip: 192.168.7.9, vni: 100}
  - {id: 3, ip: 192.168.8.1, vni: 200}
egress:
  - {vnic: 2, remote_ip: 192.168.7.1, underlay_ip: 10.0.0.7}
)");
  const StandaloneTable t = load_standalone_table(path, false);
  std::remove(path.c_str());
  auto route = [&](uint32_t vnic, uint32_t ip) -> const common::Level2Entry* {
    for (const common::Level2Entry& e : t.entries)
      if (e.key == common::egress_key(vnic, ip)) return &e;
    return nullptr;
  };
  const common::Level2Entry* self = route(1, 0xC0A80701);
  REQUIRE(self != nullptr);
  CHECK(self->egress.underlay_dst_ip == 0x0A000001);
  CHECK(self->egress.dst_mac == t.gateway_mac);
  CHECK(self->egress.vni == 100);
  REQUIRE(route(1, 0xC0A80709) != nullptr);                         // the tenant's other vNIC here
  CHECK(route(2, 0xC0A80701)->egress.underlay_dst_ip == 0x0A000007);  // the file's route wins
  CHECK(route(1, 0xC0A80801) == nullptr);                           // another tenant's: never
  CHECK(route(3, 0xC0A80701) == nullptr);
}
