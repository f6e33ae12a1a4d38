#include "rnic/verbs/sysfs_tree.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "rnic/verbs/vnic_netdevs.h"

namespace tandem::rnic::verbs {

namespace {

std::string mkdirs(const std::string& path) {
  for (std::size_t i = 1; i <= path.size(); ++i) {
    if (i != path.size() && path[i] != '/') continue;
    const std::string p = path.substr(0, i);
    if (mkdir(p.c_str(), 0755) != 0 && errno != EEXIST) return "mkdir " + p + ": " + std::strerror(errno);
  }
  return "";
}

std::string put(const std::string& dir, const std::string& file, const std::string& text) {
  const std::string path = dir + "/" + file;
  const std::string err = mkdirs(path.substr(0, path.rfind('/')));
  if (!err.empty()) return err;
  std::ofstream f(path);
  f << text << "\n";
  f.close();
  return f ? "" : "cannot write " + path;
}

std::string write_file(const char* path, const std::string& text) {
  const int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return std::string(path) + ": " + std::strerror(errno);
  const bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int e = errno;
  close(fd);
  return ok ? "" : std::string(path) + ": " + std::strerror(e);
}

}  // namespace

std::string sysfs_guid(const host::DeviceRecord& d) {
  // EUI-64 of the vNIC MAC, as ibv_get_device_guid gives it (device.cc).
  const uint8_t g[8] = {static_cast<uint8_t>(d.mac[0] ^ 2), d.mac[1], d.mac[2], 0xff, 0xfe, d.mac[3], d.mac[4], d.mac[5]};
  char s[20];
  std::snprintf(s, sizeof s, "%02x%02x:%02x%02x:%02x%02x:%02x%02x", g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7]);
  return s;
}

std::string sysfs_gid(uint32_t ipv4) {
  char s[40];
  std::snprintf(s, sizeof s, "0000:0000:0000:0000:0000:ffff:%04x:%04x", ipv4 >> 16, ipv4 & 0xffff);
  return s;
}

std::string write_sysfs_tree(const std::string& dir, const std::vector<host::DeviceRecord>& devs, bool netdevs) {
  std::string err = mkdirs(dir + "/infiniband");
  if (err.empty()) err = put(dir, "infiniband_verbs/abi_version", "6");
  for (std::size_t i = 0; i < devs.size() && err.empty(); ++i) {
    const host::DeviceRecord& d = devs[i];
    const std::string dev = dir + "/infiniband/" + d.name, port = dev + "/ports/1";
    const std::string uverbs = dir + "/infiniband_verbs/uverbs" + std::to_string(i);
    // What ibv_query_device/ibv_query_port answer (device.cc), in the kernel's spelling.
    const std::pair<std::string, std::string> files[] = {
        {dev + "/node_type", "1: CA"},
        {dev + "/node_guid", sysfs_guid(d)},
        {dev + "/sys_image_guid", sysfs_guid(d)},
        {dev + "/node_desc", "tandem " + d.name},
        {port + "/state", "4: ACTIVE"},  // the registry lists live workers only
        {port + "/phys_state", "5: LinkUp"},
        {port + "/link_layer", "Ethernet"},
        {port + "/rate", "100 Gb/sec (4X EDR)"},
        {port + "/lid", "0x0"},
        {port + "/sm_lid", "0x0"},
        {port + "/lid_mask_count", "0"},
        {port + "/sm_sl", "0"},
        {port + "/cap_mask", "0x00000000"},
        {port + "/gids/0", sysfs_gid(d.vnic_ip)},
        {port + "/gid_attrs/types/0", "RoCE v2"},
        {port + "/pkeys/0", "0xffff"},
        {uverbs + "/ibdev", d.name},
        {uverbs + "/abi_version", "1"},
    };
    for (const auto& [path, text] : files) {
      const auto slash = path.rfind('/');
      err = put(path.substr(0, slash), path.substr(slash + 1), text);
      if (!err.empty()) break;
    }
    if (err.empty() && netdevs) {
      char mac[18];
      std::snprintf(mac, sizeof mac, "%02x:%02x:%02x:%02x:%02x:%02x", d.mac[0], d.mac[1], d.mac[2], d.mac[3],
                    d.mac[4], d.mac[5]);
      err = put(dev + "/device/net/" + vnic_netdev_name(i), "address", mac);
    }
  }
  return err;
}

namespace {

// Puts a tmpfs over dir in this (private) mount namespace that holds every
// entry dir had (directories and files bound from the original, symlinks
// copied), minus `skip`, plus what add(stage) writes into it.
template <class Add>
std::string overlay(const std::string& dir, const std::vector<std::string>& skip, bool read_only, Add add) {
  const char* tmp = secure_getenv("TMPDIR");
  std::string stage = std::string(tmp && *tmp ? tmp : "/tmp") + "/tandem-sysfs-XXXXXX";
  if (mkdtemp(stage.data()) == nullptr) return "mkdtemp " + stage + ": " + std::strerror(errno);
  std::string err;
  if (mount("tandem-sysfs", stage.c_str(), "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755") != 0) {
    err = "mount tmpfs on " + stage + ": " + std::strerror(errno);
  } else {
    if (DIR* dp = opendir(dir.c_str())) {
      while (dirent* e = readdir(dp)) {
        const std::string n = e->d_name;
        if (n == "." || n == ".." || std::find(skip.begin(), skip.end(), n) != skip.end()) continue;
        const std::string from = dir + "/" + n, to = stage + "/" + n;
        struct stat st{};
        if (lstat(from.c_str(), &st) != 0) continue;  // gone meanwhile
        bool ok;
        if (S_ISLNK(st.st_mode)) {
          char target[PATH_MAX];
          const ssize_t len = readlink(from.c_str(), target, sizeof target - 1);
          ok = len >= 0 && (target[len] = 0, symlink(target, to.c_str()) == 0);
        } else {
          ok = S_ISDIR(st.st_mode) ? mkdir(to.c_str(), 0755) == 0 : close(open(to.c_str(), O_CREAT | O_WRONLY, 0644)) == 0;
          ok = ok && mount(from.c_str(), to.c_str(), nullptr, MS_BIND | MS_REC, nullptr) == 0;
        }
        if (!ok) {
          err = "mirror " + from + ": " + std::strerror(errno);
          break;
        }
      }
      closedir(dp);
    }
    if (err.empty()) err = add(stage);
    if (err.empty() && read_only && mount(nullptr, stage.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr) != 0)
      err = std::string("remount read-only: ") + std::strerror(errno);
    if (err.empty() && mount(stage.c_str(), dir.c_str(), nullptr, MS_MOVE, nullptr) != 0)
      err = "move onto " + dir + ": " + std::strerror(errno);
    if (!err.empty()) umount2(stage.c_str(), MNT_DETACH);
  }
  rmdir(stage.c_str());
  return err;
}

}  // namespace

std::string enter_sysfs_namespace(const std::vector<host::DeviceRecord>& devs, bool netdevs) {
  const uid_t uid = geteuid();
  const gid_t gid = getegid();
  if (unshare(CLONE_NEWNS | (uid == 0 ? 0 : CLONE_NEWUSER) | (netdevs ? CLONE_NEWNET : 0)) != 0)
    return std::string("unshare: ") + std::strerror(errno);
  if (uid != 0) {  // only the caller's own ids are mapped: it stays who it was
    std::string err = write_file("/proc/self/setgroups", "deny");
    if (err.empty()) err = write_file("/proc/self/uid_map", std::to_string(uid) + " " + std::to_string(uid) + " 1");
    if (err.empty()) err = write_file("/proc/self/gid_map", std::to_string(gid) + " " + std::to_string(gid) + " 1");
    if (!err.empty()) return err;
  }
  if (netdevs) {
    std::string err = make_vnic_netdevs(devs);
    if (!err.empty()) return err;
  }
  // Nothing mounted from here on propagates back to the host.
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
    return std::string("make / private: ") + std::strerror(errno);
  // /sys/class: the host's classes plus the tree, read-only as sysfs is to its readers.
  std::string err = overlay("/sys/class", {"infiniband", "infiniband_verbs"}, true,
                            [&](const std::string& stage) { return write_sysfs_tree(stage, devs, netdevs); });
  if (!err.empty()) return err;
  // /dev/infiniband/uverbsN: UCX lists a device only if this is a character device it may read
  // and write. Nothing opens it (this libibverbs talks to the worker's socket), so each is
  // /dev/null bound there; the worker, not this node's mode, decides who opens the device.
  return overlay("/dev", {"infiniband"}, false, [&](const std::string& stage) {
    const std::string ib = stage + "/infiniband";
    if (mkdir(ib.c_str(), 0755) != 0) return "mkdir " + ib + ": " + std::strerror(errno);
    for (std::size_t i = 0; i < devs.size(); ++i) {
      const std::string node = ib + "/uverbs" + std::to_string(i);
      if (close(open(node.c_str(), O_CREAT | O_WRONLY, 0666)) != 0 ||
          mount("/dev/null", node.c_str(), nullptr, MS_BIND, nullptr) != 0)
        return "bind /dev/null on " + node + ": " + std::strerror(errno);
    }
    return std::string();
  });
}

}  // namespace tandem::rnic::verbs
