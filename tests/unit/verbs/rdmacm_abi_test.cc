// The drop-in librdmacm without a worker: its exported symbols and versions
// are rdma-core v44's (Debian's librdmacm.so.1 read with objdump), and the
// calls that need no worker behave as librdmacm documents.
#include <arpa/inet.h>
#include <catch2/catch.hpp>
#include <rdma/rdma_cma.h>
#include <stdlib.h>

#include <array>
#include <atomic>
#include <chrono>
#include <thread>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>

namespace {

std::set<std::string> exported(const std::string& lib) {
  std::set<std::string> out;
  const std::string cmd = "objdump -T " + lib + " 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  std::array<char, 512> line{};
  while (std::fgets(line.data(), line.size(), p)) {
    const std::string l(line.data());
    if (l.find("RDMACM") == std::string::npos || l.find("*UND*") != std::string::npos) continue;
    if (l.find("DF") == std::string::npos) continue;
    // The last two fields: version and name.
    char ver[128] = {}, name[256] = {};
    std::string last2 = l;
    while (!last2.empty() && (last2.back() == '\n' || last2.back() == ' ')) last2.pop_back();
    const auto sp = last2.find_last_of(" \t");
    const auto sp2 = last2.find_last_of(" \t", last2.find_last_not_of(" \t", sp));
    if (sp == std::string::npos || sp2 == std::string::npos) continue;
    if (std::sscanf(last2.substr(sp2 + 1).c_str(), "%127s %255s", ver, name) != 2) continue;
    if (ver[0] == '(') continue;
    out.insert(std::string(ver) + " " + name);
  }
  pclose(p);
  return out;
}

}  // namespace

TEST_CASE("every symbol of Debian's librdmacm.so.1 is exported at the same version") {
  const auto theirs = exported("/lib/x86_64-linux-gnu/librdmacm.so.1");
  const auto ours = exported(TANDEM_RDMACM_LIB);
  REQUIRE(theirs.size() > 60);
  for (const std::string& s : theirs) {
    INFO(s);
    CHECK(ours.count(s) == 1);
  }
  CHECK(ours.size() == theirs.size());
}

TEST_CASE("rdma_event_str names every event as rdma-core does") {
  CHECK(std::string(rdma_event_str(RDMA_CM_EVENT_ESTABLISHED)) == "RDMA_CM_EVENT_ESTABLISHED");
  CHECK(std::string(rdma_event_str(RDMA_CM_EVENT_TIMEWAIT_EXIT)) == "RDMA_CM_EVENT_TIMEWAIT_EXIT");
  CHECK(std::string(rdma_event_str(static_cast<rdma_cm_event_type>(99))) == "UNKNOWN EVENT");
}

TEST_CASE("rdma_getaddrinfo: a passive source or an active destination, with the hints' port space") {
  rdma_addrinfo hints{};
  hints.ai_flags = RAI_PASSIVE;
  hints.ai_port_space = RDMA_PS_TCP;
  rdma_addrinfo* res = nullptr;
  REQUIRE(rdma_getaddrinfo("192.168.7.1", "7471", &hints, &res) == 0);
  REQUIRE(res->ai_src_addr != nullptr);
  CHECK(res->ai_dst_addr == nullptr);
  const auto* sin = reinterpret_cast<const sockaddr_in*>(res->ai_src_addr);
  CHECK(ntohs(sin->sin_port) == 7471);
  CHECK(ntohl(sin->sin_addr.s_addr) == 0xC0A80701);
  CHECK(res->ai_qp_type == IBV_QPT_RC);
  rdma_freeaddrinfo(res);
  hints = rdma_addrinfo{};
  hints.ai_port_space = RDMA_PS_UDP;
  hints.ai_qp_type = IBV_QPT_UD;
  REQUIRE(rdma_getaddrinfo("192.168.7.2", "7471", &hints, &res) == 0);
  CHECK(res->ai_dst_addr != nullptr);
  CHECK(res->ai_port_space == RDMA_PS_UDP);
  CHECK(res->ai_qp_type == IBV_QPT_UD);
  rdma_freeaddrinfo(res);
}

TEST_CASE("without devices: IDs are made and freed, an address resolves nowhere, bad input is EINVAL") {
  setenv("TANDEM_DEVICES", "/nonexistent/tandem-devices", 1);
  rdma_event_channel* ch = rdma_create_event_channel();
  REQUIRE(ch != nullptr);
  CHECK(ch->fd >= 0);
  rdma_cm_id* id = nullptr;
  CHECK(rdma_create_id(ch, &id, nullptr, static_cast<rdma_port_space>(0x77)) == -1);
  CHECK(errno == EINVAL);
  REQUIRE(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP) == 0);
  CHECK(id->qp_type == IBV_QPT_RC);
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  dst.sin_addr.s_addr = htonl(0xC0A80702);
  CHECK(rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&dst), 100) == -1);
  CHECK(errno == ENODEV);
  sockaddr_in src = dst;
  CHECK(rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&src)) == -1);
  CHECK(errno == EADDRNOTAVAIL);
  // IPv4-mapped IPv6 (getaddrinfo's answer where a host has no IPv4 address) is the IPv4 one;
  // a real IPv6 address is not a vNIC's.
  sockaddr_in6 mapped{};
  mapped.sin6_family = AF_INET6;
  REQUIRE(inet_pton(AF_INET6, "::ffff:192.168.7.2", &mapped.sin6_addr) == 1);
  CHECK(rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&mapped), 100) == -1);
  CHECK(errno == ENODEV);
  CHECK(rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&mapped)) == -1);
  CHECK(errno == EADDRNOTAVAIL);
  sockaddr_in6 v6{};
  v6.sin6_family = AF_INET6;
  REQUIRE(inet_pton(AF_INET6, "2001:db8::2", &v6.sin6_addr) == 1);
  CHECK(rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&v6), 100) == -1);
  CHECK(errno == EAFNOSUPPORT);
  CHECK(rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&v6)) == -1);
  CHECK(errno == EAFNOSUPPORT);
  CHECK(rdma_connect(id, nullptr) == -1);
  CHECK(errno == EINVAL);
  CHECK(rdma_establish(id) == -1);  // not connecting
  CHECK(errno == EINVAL);
  // Options as the kernel's ucma answers them: optlen checked, unknown ENOSYS, ACK_TIMEOUT 5 bits.
  uint8_t timeout = 21;
  CHECK(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &timeout, sizeof timeout) == 0);
  CHECK(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &timeout, sizeof(int)) == -1);
  CHECK(errno == EINVAL);
  timeout = 32;
  CHECK(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &timeout, sizeof timeout) == -1);
  CHECK(errno == EINVAL);
  int one = 1;
  CHECK(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof one) == 0);
  CHECK(rdma_set_option(id, RDMA_OPTION_ID, 0x77, &one, sizeof one) == -1);
  CHECK(errno == ENOSYS);
  CHECK(rdma_set_option(id, 0x77, 0, &one, sizeof one) == -1);
  CHECK(errno == ENOSYS);
  CHECK(rdma_join_multicast(id, reinterpret_cast<sockaddr*>(&dst), nullptr) == -1);
  CHECK(errno == EOPNOTSUPP);
  CHECK(rdma_destroy_id(id) == 0);
  rdma_destroy_event_channel(ch);
}

TEST_CASE("a channel destroyed while another thread waits in rdma_get_cm_event: that thread waits on, nothing crashes") {
  // rping's teardown: its CM thread still blocks in rdma_get_cm_event when the
  // main thread destroys the channel. rdma-core's read() on the closed fd blocks
  // on; the freed channel once crashed rping here (SIGSEGV in interop_rxe).
  rdma_event_channel* ch = rdma_create_event_channel();
  REQUIRE(ch != nullptr);
  static std::atomic<int> returned{0};
  std::thread waiter([ch] {
    rdma_cm_event* e = nullptr;
    rdma_get_cm_event(ch, &e);
    returned = 1;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // (most runs: already in epoll_wait)
  rdma_destroy_event_channel(ch);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK(returned == 0);
  waiter.detach();  // blocked until the process exits, as with rdma-core
}
