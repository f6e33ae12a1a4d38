#include "dpu/dpdk/channel_file.h"

#include <fcntl.h>
#include <rte_ring.h>
#include <rte_ring_elem.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <stdexcept>

#include "common/channel/channel_region.h"

namespace tandem::dpu::dpdk {

namespace {
std::runtime_error sys_error(const std::string& what, const std::string& path) {
  return std::runtime_error(what + " " + path + ": " + std::strerror(errno));
}
constexpr unsigned kRingFlags = RING_F_SP_ENQ | RING_F_SC_DEQ;
}  // namespace

common::RingLayout ChannelFile::ring_layout(uint32_t ring_count) noexcept {
  common::RingLayout r;
  r.prod_head = offsetof(struct rte_ring, prod.head);
  r.prod_tail = offsetof(struct rte_ring, prod.tail);
  r.cons_head = offsetof(struct rte_ring, cons.head);
  r.cons_tail = offsetof(struct rte_ring, cons.tail);
  r.elems = sizeof(struct rte_ring);  // rte_ring_elem_pvt.h: the elements start at &r[1]
  r.size = ring_count;
  r.capacity = ring_count - 1;  // rte_ring_init without RING_F_EXACT_SZ
  r.fixed_bytes = offsetof(struct rte_ring, capacity) + sizeof(uint32_t);  // name, flags, memzone, size, mask, capacity
  return r;
}

// A file left by an earlier agent: its rings must be ours as rte_ring_init
// made them and their indices possible, or it is replaced.
bool ChannelFile::try_reuse(const std::string& rnic) {
  int fd = ::open(path_.c_str(), O_RDWR);
  if (fd < 0) return false;
  struct stat st {};
  void* p = MAP_FAILED;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && static_cast<std::size_t>(st.st_size) >= size_)
    p = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) return false;
  common::ChannelGeometry g;
  const common::RingLayout rl = ring_layout(g.ring_count);
  auto* h = static_cast<common::ChannelHeader*>(p);
  bool ok = common::check_channel(p, size_).empty() && h->geometry == g && h->layout == common::compute_layout(g) &&
            std::strncmp(h->rnic_name, rnic.c_str(), sizeof(h->rnic_name)) == 0;
  common::RingProducer cmd;
  common::RingConsumer evt;
  if (ok) {
    auto* b = static_cast<uint8_t*>(p);
    for (uint64_t off : {h->layout.cmd_ring_offset, h->layout.evt_ring_offset}) {
      const auto* r = reinterpret_cast<const rte_ring*>(b + off);
      ok = ok && r->size == g.ring_count && r->mask == g.ring_count - 1 && r->capacity == g.ring_count - 1 &&
           static_cast<unsigned>(r->flags) == kRingFlags && r->prod.sync_type == RTE_RING_SYNC_ST &&
           r->cons.sync_type == RTE_RING_SYNC_ST;
    }
    const common::ChannelLayout l = common::compute_layout(g);
    ok = ok && common::RingProducer::adopt(b + l.cmd_ring_offset, rl, cmd) &&
         common::RingConsumer::adopt(b + l.evt_ring_offset, rl, evt);
  }
  if (!ok) {
    munmap(p, size_);
    return false;
  }
  base_ = p;
  reused_ = true;
  view_ = common::ChannelView(p, size_, g, rl, cmd, evt);
  return true;
}

ChannelFile::ChannelFile(const std::string& path, const std::string& rnic, uint32_t port_id, Open how) : path_(path) {
  common::ChannelGeometry g;
  common::ChannelLayout l = common::compute_layout(g);
  const common::RingLayout rl = ring_layout(g.ring_count);
  if (rte_ring_get_memsize_elem(common::kMessageSize, g.ring_count) > static_cast<ssize_t>(l.cmd_ring_bytes) ||
      !common::ChannelView::fits(l.total_bytes, g, rl))
    throw std::runtime_error("rte_ring needs more than the channel's ring area");
  size_ = l.total_bytes;

  if (how == Open::kReuse && try_reuse(rnic)) {
    cmd_ = static_cast<rte_ring*>(common::channel_cmd_ring(base_));
    evt_ = static_cast<rte_ring*>(common::channel_evt_ring(base_));
    return;
  }
  ::unlink(path.c_str());  // a worker mapping the old inode keeps it; it re-attaches by path

  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0660);
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
  if (rte_ring_init(cmd, cn.c_str(), g.ring_count, kRingFlags) != 0 ||
      rte_ring_init(evt, en.c_str(), g.ring_count, kRingFlags) != 0)
    throw std::runtime_error("rte_ring_init failed for channel " + path);
  if (cmd->size != rl.size || cmd->capacity != rl.capacity)
    throw std::runtime_error("rte_ring_init laid the ring out unlike ChannelFile::ring_layout");
  std::string err = common::init_channel(p, size_, g, port_id, rnic);
  if (!err.empty()) throw std::runtime_error("channel " + path + ": " + err);
  cmd_ = cmd;
  evt_ = evt;
  view_ = common::ChannelView(p, size_, g, rl, common::RingProducer(reinterpret_cast<uint8_t*>(cmd), rl),
                              common::RingConsumer(reinterpret_cast<uint8_t*>(evt), rl));
}

ChannelFile::~ChannelFile() {
  if (base_) munmap(base_, size_);
}

}  // namespace tandem::dpu::dpdk
