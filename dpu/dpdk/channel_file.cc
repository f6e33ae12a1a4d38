#include "dpu/dpdk/channel_file.h"

#include <fcntl.h>
#include <rte_ring.h>
#include <rte_ring_elem.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "common/channel/channel_region.h"

namespace tandem::dpu::dpdk {

namespace {
std::runtime_error sys_error(const std::string& what, const std::string& path) {
  return std::runtime_error(what + " " + path + ": " + std::strerror(errno));
}
}  // namespace

ChannelFile::ChannelFile(const std::string& path, const std::string& rnic, uint32_t port_id) : path_(path) {
  common::ChannelGeometry g;
  common::ChannelLayout l = common::compute_layout(g);
  if (rte_ring_get_memsize_elem(common::kMessageSize, g.ring_count) > static_cast<ssize_t>(l.cmd_ring_bytes))
    throw std::runtime_error("rte_ring needs more than the channel's ring area");
  size_ = l.total_bytes;

  // Re-open a valid file of this RNIC as it is (rings and BAR keep working for a live worker).
  int fd = ::open(path.c_str(), O_RDWR);
  if (fd >= 0) {
    struct stat st {};
    if (fstat(fd, &st) == 0 && static_cast<std::size_t>(st.st_size) >= size_) {
      void* p = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (p != MAP_FAILED) {
        auto* h = static_cast<common::ChannelHeader*>(p);
        if (common::check_channel(p, size_).empty() && h->geometry == g &&
            std::strncmp(h->rnic_name, rnic.c_str(), sizeof(h->rnic_name)) == 0) {
          ::close(fd);
          base_ = p;
          reused_ = true;
          cmd_ = static_cast<rte_ring*>(common::channel_cmd_ring(p));
          evt_ = static_cast<rte_ring*>(common::channel_evt_ring(p));
          return;
        }
        munmap(p, size_);
      }
    }
    ::close(fd);
    ::unlink(path.c_str());  // a worker mapping the old inode keeps it; it re-attaches by path
  }

  fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL, 0660);
  if (fd < 0) throw sys_error("cannot create channel file", path);
  if (ftruncate(fd, static_cast<off_t>(size_)) != 0) {
    ::close(fd);
    throw sys_error("cannot size channel file", path);
  }
  void* p = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) throw sys_error("cannot map channel file", path);
  base_ = p;
  std::memset(p, 0, size_);
  // Rings first, magic last (init_channel publishes it): an RNIC that sees the
  // magic finds working rings.
  auto* cmd = reinterpret_cast<rte_ring*>(static_cast<uint8_t*>(p) + l.cmd_ring_offset);
  auto* evt = reinterpret_cast<rte_ring*>(static_cast<uint8_t*>(p) + l.evt_ring_offset);
  std::string cn = "tdc_" + rnic.substr(0, 20), en = "tde_" + rnic.substr(0, 20);
  if (rte_ring_init(cmd, cn.c_str(), g.ring_count, RING_F_SP_ENQ | RING_F_SC_DEQ) != 0 ||
      rte_ring_init(evt, en.c_str(), g.ring_count, RING_F_SP_ENQ | RING_F_SC_DEQ) != 0)
    throw std::runtime_error("rte_ring_init failed for channel " + path);
  std::string err = common::init_channel(p, size_, g, port_id, rnic);
  if (!err.empty()) throw std::runtime_error("channel " + path + ": " + err);
  cmd_ = static_cast<rte_ring*>(common::channel_cmd_ring(p));
  evt_ = static_cast<rte_ring*>(common::channel_evt_ring(p));
}

ChannelFile::~ChannelFile() {
  if (base_) munmap(base_, size_);
}

}  // namespace tandem::dpu::dpdk
