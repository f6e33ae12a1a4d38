#include "rnic/verbs/vnic_netdevs.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/if_tun.h>
#include <net/if.h>
#include <net/if_arp.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tandem::rnic::verbs {

namespace {

std::string fail(const std::string& what, const std::string& ifname) {
  return what + " " + ifname + ": " + std::strerror(errno);
}

ifreq named(const std::string& ifname) {
  ifreq r{};
  std::strncpy(r.ifr_name, ifname.c_str(), IFNAMSIZ - 1);
  return r;
}

void set_ipv4(sockaddr* sa, uint32_t ip_host_order) {
  sockaddr_in in{};
  in.sin_family = AF_INET;
  in.sin_addr.s_addr = htonl(ip_host_order);
  std::memcpy(sa, &in, sizeof in);
}

std::string bring_up(int sock, const std::string& ifname) {
  ifreq r = named(ifname);
  if (ioctl(sock, SIOCGIFFLAGS, &r) != 0) return fail("SIOCGIFFLAGS", ifname);
  r.ifr_flags = static_cast<short>(r.ifr_flags | IFF_UP);
  return ioctl(sock, SIOCSIFFLAGS, &r) == 0 ? "" : fail("SIOCSIFFLAGS", ifname);
}

// A persistent tap (it outlives this fd and goes with the namespace).
std::string make_tap(const std::string& ifname) {
  const int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
  if (fd < 0) return fail("open /dev/net/tun for", ifname);
  ifreq r = named(ifname);
  r.ifr_flags = IFF_TAP | IFF_NO_PI;
  std::string err;
  if (ioctl(fd, TUNSETIFF, &r) != 0) err = fail("TUNSETIFF", ifname);
  else if (ioctl(fd, TUNSETPERSIST, 1) != 0) err = fail("TUNSETPERSIST", ifname);
  close(fd);
  return err;
}

}  // namespace

std::string vnic_netdev_name(std::size_t index) { return "tandem" + std::to_string(index); }

std::string make_vnic_netdevs(const std::vector<host::DeviceRecord>& devs) {
  const int sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (sock < 0) return std::string("socket: ") + std::strerror(errno);
  std::string err = bring_up(sock, "lo");
  for (std::size_t i = 0; i < devs.size() && err.empty(); ++i) {
    const std::string ifname = vnic_netdev_name(i);
    err = make_tap(ifname);
    if (!err.empty()) break;
    ifreq r = named(ifname);
    r.ifr_hwaddr.sa_family = ARPHRD_ETHER;
    std::memcpy(r.ifr_hwaddr.sa_data, devs[i].mac, 6);
    if (ioctl(sock, SIOCSIFHWADDR, &r) != 0) err = fail("SIOCSIFHWADDR", ifname);
    r = named(ifname);
    set_ipv4(&r.ifr_addr, devs[i].vnic_ip);
    if (err.empty() && ioctl(sock, SIOCSIFADDR, &r) != 0) err = fail("SIOCSIFADDR", ifname);
    r = named(ifname);
    set_ipv4(&r.ifr_netmask, 0xFFFFFFFF);
    if (err.empty() && ioctl(sock, SIOCSIFNETMASK, &r) != 0) err = fail("SIOCSIFNETMASK", ifname);
    if (err.empty()) err = bring_up(sock, ifname);
  }
  close(sock);
  return err;
}

}  // namespace tandem::rnic::verbs
