// The sysfs tree of the registered devices (rnic/verbs/sysfs_tree.h): it says
// what the library answers (GUID, GID, RoCE v2 type) in the kernel's spelling at
// the paths UCX, NCCL and perftest read, and the namespace that carries it
// shows it at /sys/class/infiniband to its own process only.
#include <catch2/catch.hpp>
#include <infiniband/verbs.h>
#include <arpa/inet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "rnic/host/device_registry.h"
#include "rnic/verbs/sysfs_tree.h"

namespace fs = std::filesystem;
using tandem::rnic::host::DeviceRecord;
namespace tv = tandem::rnic::verbs;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

DeviceRecord device(const std::string& name, uint32_t ip) {
  DeviceRecord d;
  d.name = name;
  d.socket = "/nonexistent/tandem.sock";
  d.vnic_ip = ip;
  d.vnic_id = 1;
  const uint8_t mac[6] = {0x02, 0, 0, 0, 0x01, 0x01};
  std::copy(mac, mac + 6, d.mac);
  d.pid = getpid();
  return d;
}

struct TempDir {
  fs::path dir = fs::temp_directory_path() / ("tandem-sysfs-test-" + std::to_string(getpid()));
  TempDir() { fs::create_directories(dir); }
  ~TempDir() { fs::remove_all(dir); }
};

}  // namespace

TEST_CASE("the tree holds each device's port, GID 0 as RoCE v2 and a uverbs entry") {
  TempDir t;
  const std::vector<DeviceRecord> devs = {device("tandem_A_v1", 0xC0A80701), device("tandem_B_v1", 0xC0A80702)};
  REQUIRE(tv::write_sysfs_tree(t.dir.string(), devs).empty());
  const fs::path a = t.dir / "infiniband/tandem_A_v1";
  CHECK(slurp(a / "node_type") == "1: CA\n");
  CHECK(slurp(a / "node_guid") == "0000:00ff:fe00:0101\n");
  CHECK(slurp(a / "ports/1/state") == "4: ACTIVE\n");
  CHECK(slurp(a / "ports/1/link_layer") == "Ethernet\n");
  CHECK(slurp(a / "ports/1/gid_attrs/types/0") == "RoCE v2\n");
  CHECK(slurp(a / "ports/1/gids/0") == "0000:0000:0000:0000:0000:ffff:c0a8:0701\n");
  CHECK(slurp(t.dir / "infiniband/tandem_B_v1/ports/1/gids/0") == "0000:0000:0000:0000:0000:ffff:c0a8:0702\n");
  CHECK(slurp(t.dir / "infiniband_verbs/abi_version") == "6\n");
  CHECK(slurp(t.dir / "infiniband_verbs/uverbs0/ibdev") == "tandem_A_v1\n");
  CHECK(slurp(t.dir / "infiniband_verbs/uverbs1/ibdev") == "tandem_B_v1\n");
  // No PCI function and no netdev behind the GID: absent, as for rxe.
  CHECK_FALSE(fs::exists(a / "device"));
  CHECK_FALSE(fs::exists(a / "ports/1/gid_attrs/ndevs/0"));
}

TEST_CASE("the tree's GUID and GID are what the library answers") {
  TempDir t;
  const fs::path reg = t.dir / "devices";
  const DeviceRecord d = device("tandem_T_v1", 0x0A000001);
  REQUIRE(tandem::rnic::host::write_device(reg.string(), d).empty());
  REQUIRE(tv::write_sysfs_tree((t.dir / "tree").string(), {d}).empty());
  setenv("TANDEM_DEVICES", reg.c_str(), 1);
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  REQUIRE(n == 1);
  const uint64_t guid = be64toh(ibv_get_device_guid(list[0]));
  char want[20];
  std::snprintf(want, sizeof want, "%04x:%04x:%04x:%04x", unsigned(guid >> 48), unsigned(guid >> 32) & 0xffff,
                unsigned(guid >> 16) & 0xffff, unsigned(guid) & 0xffff);
  CHECK(slurp(t.dir / "tree/infiniband/tandem_T_v1/node_guid") == std::string(want) + "\n");
  ibv_free_device_list(list);
  unsetenv("TANDEM_DEVICES");
}

TEST_CASE("the namespace shows the tree and the uverbs nodes to its process only") {
  if (fs::exists("/sys/class/infiniband")) {
    WARN("this host has /sys/class/infiniband of its own");
    return;
  }
  const DeviceRecord d = device("tandem_N_v1", 0xC0A80701);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    if (!tv::enter_sysfs_namespace({d}).empty()) _exit(3);
    const bool tree = slurp("/sys/class/infiniband/tandem_N_v1/ports/1/gid_attrs/types/0") == "RoCE v2\n";
    const bool kept = fs::exists("/sys/class/net/lo");  // the host's classes stay
    const bool ro = !std::ofstream("/sys/class/infiniband/tandem_N_v1/node_desc");
    struct stat sb{};
    const bool node = stat("/dev/infiniband/uverbs0", &sb) == 0 && S_ISCHR(sb.st_mode) &&
                      access("/dev/infiniband/uverbs0", R_OK | W_OK) == 0;
    const bool dev_kept = access("/dev/null", W_OK) == 0 && fs::exists("/dev/shm");
    _exit(tree && kept && ro && node && dev_kept ? 0 : 4);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  REQUIRE(WIFEXITED(st));
  if (WEXITSTATUS(st) == 3) {
    WARN("no mount namespace here (unshare refused)");
    return;
  }
  CHECK(WEXITSTATUS(st) == 0);
  CHECK_FALSE(fs::exists("/sys/class/infiniband"));  // nothing leaked to this process
  CHECK_FALSE(fs::exists("/dev/infiniband"));
}

TEST_CASE("with netdevs: a tap per device with the vNIC's address, in the process's own network namespace") {
  TempDir t;
  const DeviceRecord d = device("tandem_D_v1", 0xC0A80709);
  REQUIRE(tv::write_sysfs_tree((t.dir / "tree").string(), {d}, true).empty());
  CHECK(fs::exists(t.dir / "tree/infiniband/tandem_D_v1/device/net/tandem0/address"));
  REQUIRE(tv::write_sysfs_tree((t.dir / "plain").string(), {d}).empty());
  CHECK_FALSE(fs::exists(t.dir / "plain/infiniband/tandem_D_v1/device"));  // no netdev: none listed
  if (fs::exists("/sys/class/infiniband")) {
    WARN("this host has /sys/class/infiniband of its own");
    return;
  }
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    if (!tv::enter_sysfs_namespace({d}, true).empty()) _exit(3);
    const bool listed = fs::exists("/sys/class/infiniband/tandem_D_v1/device/net/tandem0");
    const int s = socket(AF_INET, SOCK_DGRAM, 0);
    ifreq r{};
    std::strcpy(r.ifr_name, "tandem0");
    const bool addr = s >= 0 && ioctl(s, SIOCGIFADDR, &r) == 0 &&
                      reinterpret_cast<sockaddr_in*>(&r.ifr_addr)->sin_addr.s_addr == htonl(0xC0A80709);
    std::strcpy(r.ifr_name, "tandem0");
    const bool mac = ioctl(s, SIOCGIFHWADDR, &r) == 0 && std::memcmp(r.ifr_hwaddr.sa_data, d.mac, 6) == 0;
    _exit(listed && addr && mac ? 0 : 4);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  REQUIRE(WIFEXITED(st));
  if (WEXITSTATUS(st) == 3) {
    WARN("no network namespace or tun device here (unshare or TUNSETIFF refused)");
    return;
  }
  CHECK(WEXITSTATUS(st) == 0);
  CHECK(if_nametoindex("tandem0") == 0);  // nothing leaked to this namespace
}
