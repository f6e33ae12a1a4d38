// The drop-in libibverbs without a worker: its exported symbols and versions
// are rdma-core v44's (Debian's library read with objdump), devices come from
// the registry (stale ones skipped), opening a device whose worker is absent
// fails with errno, and every verb not built yet fails with EOPNOTSUPP.
#include <catch2/catch.hpp>
#include <infiniband/verbs.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>

#include "rnic/host/device_registry.h"

namespace fs = std::filesystem;
using tandem::rnic::host::DeviceRecord;

namespace {

// "VERSION NAME" of every symbol a library exports at its default version.
std::set<std::string> exported(const std::string& lib) {
  std::set<std::string> out;
  const std::string cmd = "objdump -T " + lib + " 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  std::array<char, 512> line{};
  while (std::fgets(line.data(), line.size(), p)) {
    std::string l(line.data());
    if (l.find("IBVERBS") == std::string::npos || l.find("*UND*") != std::string::npos) continue;
    char ver[128], name[256];
    const auto last = l.find_last_of(' ', l.size() - 2);
    const std::string tail = l.substr(0, last);
    if (std::sscanf(l.substr(tail.find_last_of(" \t") + 1).c_str(), "%127s %255s", ver, name) != 2) continue;
    if (ver[0] == '(' || std::string(ver) == name) continue;  // compat alias or the version node itself
    out.insert(std::string(ver) + " " + name);
  }
  pclose(p);
  return out;
}

struct DeviceDir {
  fs::path dir = fs::temp_directory_path() / ("tandem-verbs-" + std::to_string(getpid()));
  DeviceDir() {
    fs::create_directories(dir);
    setenv("TANDEM_DEVICES", dir.c_str(), 1);
  }
  ~DeviceDir() { fs::remove_all(dir); }
};

DeviceRecord record(const std::string& name, int pid) {
  DeviceRecord d;
  d.name = name;
  d.socket = "/nonexistent/tandem.sock";
  d.vnic_ip = 0xC0A80701;
  d.vnic_id = 1;
  d.mtu = 1024;
  d.max_qps = 64;
  d.pid = pid;
  return d;
}

}  // namespace

TEST_CASE("every symbol of Debian's libibverbs.so.1 is exported at the same version") {
  const auto theirs = exported("/lib/x86_64-linux-gnu/libibverbs.so.1");
  const auto ours = exported(TANDEM_VERBS_LIB);
  REQUIRE(theirs.size() > 100);
  for (const std::string& s : theirs) {
    INFO(s);
    CHECK(ours.count(s) == 1);
  }
  CHECK(ours.size() == theirs.size());
}

TEST_CASE("device records round-trip, and bad ones are refused") {
  DeviceRecord d = record("tandem_A_v1", 1);
  d.mac[5] = 0x42;
  DeviceRecord back;
  REQUIRE(tandem::rnic::host::parse_device(tandem::rnic::host::format_device(d), back));
  CHECK(back.name == d.name);
  CHECK(back.socket == d.socket);
  CHECK(back.vnic_ip == d.vnic_ip);
  CHECK(back.mac[5] == 0x42);
  CHECK(back.mtu == 1024);
  CHECK_FALSE(tandem::rnic::host::parse_device("name x\nsocket /s\n", back));               // no vnic_ip
  CHECK_FALSE(tandem::rnic::host::parse_device("name x\nsocket /s\nvnic_ip 1.2.3\n", back));
  CHECK_FALSE(tandem::rnic::host::parse_device("name x\nsocket /s\nvnic_ip 1.2.3.4\nmtu 12q\n", back));
  CHECK_FALSE(tandem::rnic::host::parse_device(std::string("name ") + std::string(64, 'a') +
                                                   "\nsocket /s\nvnic_ip 1.2.3.4\n", back));
}

TEST_CASE("device names are plain path components, sockets absolute paths") {
  using tandem::rnic::host::parse_device;
  using tandem::rnic::host::valid_device_name;
  CHECK(valid_device_name("tandem_A_v1"));
  CHECK(valid_device_name("mlx5-0.x"));
  for (const char* bad : {"", "..", ".", ".hidden", "a/b", "../../etc", "tab\tname", "sp ace"}) {
    INFO(bad);
    CHECK_FALSE(valid_device_name(bad));
  }
  CHECK_FALSE(valid_device_name(std::string(64, 'a')));
  DeviceRecord back;
  CHECK_FALSE(parse_device("name ../../tmp/x\nsocket /s\nvnic_ip 1.2.3.4\n", back));
  CHECK_FALSE(parse_device("name ..\nsocket /s\nvnic_ip 1.2.3.4\n", back));
  CHECK_FALSE(parse_device("name ok\nsocket relative.sock\nvnic_ip 1.2.3.4\n", back));
  CHECK(parse_device("name ok\nsocket /abs.sock\nvnic_ip 1.2.3.4\n", back));
  CHECK_FALSE(tandem::rnic::host::write_device("/tmp", record("../escape", 1)).empty());
}

TEST_CASE("records owned by someone the reader does not trust, or symlinked, are not listed") {
  DeviceDir dd;
  REQUIRE(tandem::rnic::host::write_device(dd.dir, record("tandem_A_v1", getpid())).empty());
  REQUIRE(tandem::rnic::host::write_device(dd.dir, record("tandem_planted_v1", getpid())).empty());
  const fs::path planted = dd.dir / "tandem_planted_v1.dev";
  const bool chowned = chown(planted.c_str(), 65534, 65534) == 0;  // root only
  fs::create_symlink(dd.dir / "tandem_A_v1.dev", dd.dir / "tandem_link_v1.dev");
  const auto recs = tandem::rnic::host::read_devices(dd.dir);
  std::set<std::string> names;
  for (const DeviceRecord& r : recs) names.insert(r.name);
  CHECK(names.count("tandem_A_v1") == 1);
  CHECK(names.count("tandem_link_v1") == 0);
  if (chowned) {
    CHECK(names.count("tandem_planted_v1") == 0);
  } else {
    WARN("not root: the foreign-owner case is not checked");
  }
  for (const DeviceRecord& r : recs) CHECK(r.owner_uid == getuid());
}

TEST_CASE("the device list holds the live workers' vNICs, sorted, and no stale ones") {
  DeviceDir dd;
  int n = -1;
  ibv_device** list = ibv_get_device_list(&n);
  REQUIRE(list != nullptr);
  CHECK(n == 0);
  CHECK(list[0] == nullptr);
  ibv_free_device_list(list);

  REQUIRE(tandem::rnic::host::write_device(dd.dir, record("tandem_B_v1", getpid())).empty());
  REQUIRE(tandem::rnic::host::write_device(dd.dir, record("tandem_A_v1", getpid())).empty());
  REQUIRE(tandem::rnic::host::write_device(dd.dir, record("tandem_dead_v1", 0x3ffffffe)).empty());  // no such pid
  {
    std::FILE* f = std::fopen((dd.dir / "junk.dev").c_str(), "w");
    std::fputs("not a device\n", f);
    std::fclose(f);
  }
  list = ibv_get_device_list(&n);
  REQUIRE(n == 2);
  CHECK(std::string(ibv_get_device_name(list[0])) == "tandem_A_v1");
  CHECK(std::string(ibv_get_device_name(list[1])) == "tandem_B_v1");
  CHECK(ibv_get_device_index(list[1]) == 1);
  CHECK(list[0]->node_type == IBV_NODE_CA);
  CHECK(ibv_get_device_guid(list[0]) != 0);

  // No worker behind the socket: opening fails with errno, no crash, no hang.
  errno = 0;
  CHECK(ibv_open_device(list[0]) == nullptr);
  CHECK(errno == ENODEV);
  ibv_free_device_list(list);
}

TEST_CASE("bad arguments get EINVAL and verbs not built yet EOPNOTSUPP, never a crash") {
  errno = 0;
  CHECK(ibv_alloc_pd(nullptr) == nullptr);
  CHECK(errno == EINVAL);
  CHECK(ibv_create_cq(nullptr, 16, nullptr, nullptr, 0) == nullptr);
  CHECK(ibv_create_qp(nullptr, nullptr) == nullptr);
  CHECK(ibv_dealloc_pd(nullptr) == EINVAL);
  CHECK(ibv_modify_qp(nullptr, nullptr, 0) == EINVAL);
  {  // one P_Key table entry: an application cannot ask for another partition
    ibv_qp not_looked_at{};
    ibv_qp_attr a{};
    a.pkey_index = 1;
    CHECK(ibv_modify_qp(&not_looked_at, &a, IBV_QP_PKEY_INDEX) == EINVAL);
  }
  errno = 0;
  CHECK(ibv_create_srq(nullptr, nullptr) == nullptr);
  CHECK(errno == EINVAL);
  CHECK(ibv_modify_srq(nullptr, nullptr, 0) == EINVAL);
  CHECK(ibv_destroy_srq(nullptr) == EINVAL);
  errno = 0;
  CHECK(ibv_create_ah(nullptr, nullptr) == nullptr);
  CHECK(errno == EINVAL);
  CHECK(ibv_destroy_ah(nullptr) == EINVAL);
  errno = 0;
  CHECK(ibv_init_ah_from_wc(nullptr, 1, nullptr, nullptr, nullptr) == -1);
  CHECK(errno == EINVAL);
  CHECK(ibv_resize_cq(nullptr, 4) == EINVAL);
  CHECK(ibv_is_fork_initialized() == IBV_FORK_DISABLED);
  CHECK(ibv_fork_init() == 0);  // registered memory is MADV_DONTFORK from now on (tests/unit/host)
  CHECK(ibv_is_fork_initialized() == IBV_FORK_ENABLED);
  CHECK(std::string(ibv_wc_status_str(IBV_WC_RETRY_EXC_ERR)) == "transport retry counter exceeded");
  CHECK(std::string(ibv_port_state_str(IBV_PORT_ACTIVE)) == "PORT_ACTIVE");
  CHECK(ibv_rate_to_mbps(IBV_RATE_100_GBPS) == 103125);
  CHECK(mult_to_ibv_rate(4) == IBV_RATE_10_GBPS);
}
