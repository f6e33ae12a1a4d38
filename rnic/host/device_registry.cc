#include "rnic/host/device_registry.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace tandem::rnic::host {

std::string device_dir() {
  // secure_getenv: a set-uid program linked with the drop-in libibverbs must not let its
  // caller pick which sockets it hands memory to.
  const char* e = secure_getenv("TANDEM_DEVICES");
  return (e && *e) ? e : "/run/tandem";
}

bool valid_device_name(const std::string& name) {
  if (name.empty() || name.size() > 63 || name[0] == '.') return false;
  for (const char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
          c == '.'))
      return false;
  return true;
}

std::string format_device(const DeviceRecord& d) {
  char ip[INET_ADDRSTRLEN] = {};
  const uint32_t be = htonl(d.vnic_ip);
  inet_ntop(AF_INET, &be, ip, sizeof ip);
  char mac[18];
  std::snprintf(mac, sizeof mac, "%02x:%02x:%02x:%02x:%02x:%02x", d.mac[0], d.mac[1], d.mac[2], d.mac[3],
                d.mac[4], d.mac[5]);
  std::ostringstream o;
  o << "name " << d.name << "\nsocket " << d.socket << "\nvnic_ip " << ip << "\nvnic_id " << d.vnic_id
    << "\nmac " << mac << "\nmtu " << d.mtu << "\nmax_qps " << d.max_qps << "\npid " << d.pid << "\n";
  return o.str();
}

bool parse_device(const std::string& text, DeviceRecord& out) {
  DeviceRecord d;
  bool has_ip = false;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const auto sp = line.find(' ');
    if (sp == std::string::npos) continue;
    const std::string k = line.substr(0, sp), v = line.substr(sp + 1);
    char* end = nullptr;
    if (k == "name") {
      d.name = v;
    } else if (k == "socket") {
      d.socket = v;
    } else if (k == "vnic_ip") {
      in_addr a{};
      if (inet_pton(AF_INET, v.c_str(), &a) != 1) return false;
      d.vnic_ip = ntohl(a.s_addr);
      has_ip = true;
    } else if (k == "mac") {
      unsigned m[6];
      if (std::sscanf(v.c_str(), "%x:%x:%x:%x:%x:%x", &m[0], &m[1], &m[2], &m[3], &m[4], &m[5]) != 6) return false;
      for (int i = 0; i < 6; ++i) d.mac[i] = static_cast<uint8_t>(m[i]);
    } else if (k == "vnic_id" || k == "mtu" || k == "max_qps" || k == "pid") {
      const unsigned long n = std::strtoul(v.c_str(), &end, 10);
      if (end == v.c_str() || *end != 0) return false;
      if (k == "vnic_id") d.vnic_id = static_cast<uint32_t>(n);
      if (k == "mtu") d.mtu = static_cast<uint32_t>(n);
      if (k == "max_qps") d.max_qps = static_cast<uint32_t>(n);
      if (k == "pid") d.pid = static_cast<int>(n);
    }
  }
  if (!valid_device_name(d.name) || d.socket.empty() || d.socket[0] != '/' || !has_ip) return false;
  out = d;
  return true;
}

std::string write_device(const std::string& dir, const DeviceRecord& d) {
  if (!valid_device_name(d.name)) return "bad device name '" + d.name + "' (letters, digits, _ - . only)";
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return "cannot create " + dir + ": " + std::strerror(errno);
  const std::string path = dir + "/" + d.name + ".dev", tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    f << format_device(d);
    if (!f) return "cannot write " + tmp;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return "cannot rename " + tmp + ": " + std::strerror(errno);
  return "";
}

void remove_device(const std::string& dir, const std::string& name) {
  std::remove((dir + "/" + name + ".dev").c_str());
}

namespace {

// The text of dir/name if it is a regular file (not a symlink) owned by a uid in `trusted`.
bool read_trusted(int dir_fd, const char* name, const uid_t* trusted, std::size_t ntrusted, std::string* text,
                  uid_t* owner) {
  const int fd = openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return false;
  struct stat st{};
  bool ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size < 4096;
  ok = ok && std::find(trusted, trusted + ntrusted, st.st_uid) != trusted + ntrusted;
  if (ok) {
    char buf[4096];
    const ssize_t n = read(fd, buf, sizeof buf);
    ok = n >= 0;
    if (ok) text->assign(buf, static_cast<std::size_t>(n));
    *owner = st.st_uid;
  }
  close(fd);
  return ok;
}

}  // namespace

std::vector<DeviceRecord> read_devices(const std::string& dir) {
  std::vector<DeviceRecord> out;
  DIR* dp = opendir(dir.c_str());
  if (dp == nullptr) return out;
  struct stat dst{};
  const uid_t dir_owner = fstat(dirfd(dp), &dst) == 0 ? dst.st_uid : 0;
  const uid_t trusted[] = {0, getuid(), dir_owner};
  while (dirent* e = readdir(dp)) {
    const std::string n = e->d_name;
    if (n.size() < 5 || n.compare(n.size() - 4, 4, ".dev") != 0) continue;
    std::string text;
    uid_t owner = 0;
    if (!read_trusted(dirfd(dp), n.c_str(), trusted, 3, &text, &owner)) continue;
    DeviceRecord d;
    if (!parse_device(text, d)) continue;
    if (d.pid > 0 && kill(d.pid, 0) != 0 && errno == ESRCH) continue;  // its worker is gone
    d.owner_uid = owner;
    out.push_back(std::move(d));
  }
  closedir(dp);
  std::sort(out.begin(), out.end(), [](const DeviceRecord& a, const DeviceRecord& b) { return a.name < b.name; });
  return out;
}

}  // namespace tandem::rnic::host
