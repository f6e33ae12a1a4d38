#include "rnic/sim/fabric.h"

#include <algorithm>
#include <limits>

#include "common/fabric/ecmp.h"
#include "common/wire/headers.h"

namespace tandem::rnic::sim {

namespace {

// Offset of the IPv4 header, or 0 if the frame is not IPv4.
uint32_t ip_offset(const uint8_t* d, uint32_t len) noexcept {
  if (len < 14 + 20) return 0;
  uint16_t type = static_cast<uint16_t>(d[12] << 8 | d[13]);
  uint32_t off = 14;
  if (type == common::kEtherTypeVlan) {
    if (len < 18 + 20) return 0;
    type = static_cast<uint16_t>(d[16] << 8 | d[17]);
    off = 18;
  }
  if (type != common::kEtherTypeIpv4 || (d[off] >> 4) != 4) return 0;
  return off;
}

uint32_t be32(const uint8_t* p) noexcept {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3];
}

}  // namespace

bool frame_five_tuple(const uint8_t* d, uint32_t len, uint32_t& src_ip, uint32_t& dst_ip,
                      uint16_t& sport, uint16_t& dport, uint8_t& proto) noexcept {
  uint32_t ip = ip_offset(d, len);
  if (ip == 0) return false;
  src_ip = be32(d + ip + 12);
  dst_ip = be32(d + ip + 16);
  proto = d[ip + 9];
  uint32_t l4 = ip + (d[ip] & 0xF) * 4u;
  sport = dport = 0;
  if (proto == common::kIpProtoUdp && l4 + 4 <= len) {
    sport = static_cast<uint16_t>(d[l4] << 8 | d[l4 + 1]);
    dport = static_cast<uint16_t>(d[l4 + 2] << 8 | d[l4 + 3]);
  }
  return true;
}

static void patch_tos(uint8_t* d, uint32_t ip, uint8_t new_tos) noexcept {
  // RFC 1624 incremental update of the header checksum for the changed word.
  uint16_t old_word = static_cast<uint16_t>(d[ip] << 8 | d[ip + 1]);
  d[ip + 1] = new_tos;
  uint16_t new_word = static_cast<uint16_t>(d[ip] << 8 | d[ip + 1]);
  uint16_t csum = static_cast<uint16_t>(d[ip + 10] << 8 | d[ip + 11]);
  uint32_t sum = static_cast<uint16_t>(~csum) + static_cast<uint32_t>(static_cast<uint16_t>(~old_word)) + new_word;
  sum = (sum & 0xFFFF) + (sum >> 16);
  sum = (sum & 0xFFFF) + (sum >> 16);
  csum = static_cast<uint16_t>(~sum);
  d[ip + 10] = static_cast<uint8_t>(csum >> 8);
  d[ip + 11] = static_cast<uint8_t>(csum);
}

bool mark_ce(uint8_t* d, uint32_t len) noexcept {
  uint32_t ip = ip_offset(d, len);
  if (ip == 0) return false;
  uint8_t tos = d[ip + 1];
  if ((tos & 3) == 0 || (tos & 3) == 3) return false;  // not ECN-capable, or already CE
  patch_tos(d, ip, static_cast<uint8_t>(tos | 3));
  return true;
}

void set_ect0(uint8_t* d, uint32_t len) noexcept {
  uint32_t ip = ip_offset(d, len);
  if (ip == 0 || (d[ip + 1] & 3) != 0) return;
  patch_tos(d, ip, static_cast<uint8_t>(d[ip + 1] | 2));
}

bool frame_ce(const uint8_t* d, uint32_t len) noexcept {
  uint32_t ip = ip_offset(d, len);
  return ip != 0 && (d[ip + 1] & 3) == 3;
}

uint32_t Fabric::add_host(const std::string& name) {
  Node n;
  n.is_host = true;
  n.host = static_cast<uint32_t>(host_nodes_.size());
  n.name = name;
  nodes_.push_back(std::move(n));
  host_nodes_.push_back(static_cast<uint32_t>(nodes_.size() - 1));
  return static_cast<uint32_t>(nodes_.size() - 1);
}

uint32_t Fabric::add_switch(const std::string& name) {
  Node n;
  n.name = name;
  n.ecmp_seed = static_cast<uint32_t>(derive_seed(0x5157, nodes_.size()));
  nodes_.push_back(std::move(n));
  return static_cast<uint32_t>(nodes_.size() - 1);
}

uint32_t Fabric::connect(uint32_t a, uint32_t b, const LinkParams& params, const QueueParams& queue,
                         const std::string& name) {
  auto link = static_cast<uint32_t>(links_.size());
  links_.push_back(NamedLink{name, {}});
  for (auto [from, to] : {std::pair{a, b}, std::pair{b, a}}) {
    Port p;
    p.node = from;
    p.peer = to;
    p.link = link;
    p.params = params;
    p.queue_params = queue;
    p.rng = Rng(derive_seed(seed_, 1000 + ports_.size()));
    ports_.push_back(std::move(p));
    auto id = static_cast<uint32_t>(ports_.size() - 1);
    nodes_[from].ports.push_back(id);
    links_[link].ports.push_back(id);
  }
  return link;
}

void Fabric::compute_routes() {
  const std::size_t n = nodes_.size();
  constexpr uint32_t kInf = std::numeric_limits<uint32_t>::max();
  for (auto& node : nodes_) node.routes.assign(host_nodes_.size(), {});
  std::vector<uint32_t> dist(n);
  std::vector<uint32_t> frontier;
  for (uint32_t h = 0; h < host_nodes_.size(); ++h) {
    // Breadth-first from the destination over reversed routable ports.
    std::fill(dist.begin(), dist.end(), kInf);
    dist[host_nodes_[h]] = 0;
    frontier.assign(1, host_nodes_[h]);
    while (!frontier.empty()) {
      std::vector<uint32_t> next;
      for (uint32_t v : frontier) {
        for (const Port& p : ports_) {
          if (p.peer != v || !p.routable || dist[p.node] != kInf) continue;
          // Hosts do not forward: only the destination itself may be a host on a path.
          if (nodes_[v].is_host && v != host_nodes_[h]) continue;
          dist[p.node] = dist[v] + 1;
          next.push_back(p.node);
        }
      }
      frontier.swap(next);
    }
    for (uint32_t v = 0; v < n; ++v) {
      if (dist[v] == kInf || dist[v] == 0) continue;
      for (uint32_t pid : nodes_[v].ports) {
        const Port& p = ports_[pid];
        if (!p.routable || dist[p.peer] == kInf || dist[p.peer] + 1 != dist[v]) continue;
        if (nodes_[p.peer].is_host && p.peer != host_nodes_[h]) continue;
        nodes_[v].routes[h].push_back(pid);
      }
    }
  }
}

int Fabric::route(uint32_t node, uint32_t dst_host, uint32_t src_ip, uint32_t dst_ip, uint16_t sport,
                  uint16_t dport, uint8_t proto) const noexcept {
  const Node& nd = nodes_[node];
  if (dst_host >= nd.routes.size()) return -1;
  const auto& group = nd.routes[dst_host];
  if (group.empty()) return -1;
  if (group.size() == 1) return static_cast<int>(group[0]);
  common::FiveTuple t{src_ip, dst_ip, sport, dport, proto};
  return static_cast<int>(group[common::ecmp_pick(t, static_cast<uint32_t>(group.size()), nd.ecmp_seed)]);
}

void Fabric::send_from_host(uint32_t host, uint32_t frame, uint64_t now) {
  const Node& nd = nodes_[host_nodes_[host]];
  frames_[frame].src_host = host;
  if (nd.ports.empty()) {
    ++drops_no_route_;
    drop(frame);
    return;
  }
  enqueue(nd.ports[0], frame, now);
}

bool Fabric::host_port_idle(uint32_t host) const noexcept {
  const Node& nd = nodes_[host_nodes_[host]];
  if (nd.ports.empty()) return true;
  const Port& p = ports_[nd.ports[0]];
  return !p.busy && p.queue.empty();
}

void Fabric::enqueue(uint32_t pid, uint32_t frame, uint64_t now) {
  Port& p = ports_[pid];
  Frame& f = frames_[frame];
  // A host's NIC queue is the transport's own backlog: no drop, no marking.
  const bool sw = !nodes_[p.node].is_host;
  if (sw && p.queue_bytes + f.len > p.queue_params.limit_bytes) {
    ++p.stats.drops_queue;
    drop(frame);
    return;
  }
  if (sw && p.queue_params.ecn_bytes != 0 && p.queue_bytes >= p.queue_params.ecn_bytes &&
      mark_ce(f.data, f.len)) {
    ++p.stats.ecn_marks;
  }
  p.queue.push_back(frame);
  p.queue_bytes += f.len;
  if (p.queue_bytes > p.stats.max_queue_bytes) p.stats.max_queue_bytes = p.queue_bytes;
  if (!p.busy) start_tx(pid, now);
}

void Fabric::start_tx(uint32_t pid, uint64_t now) {
  Port& p = ports_[pid];
  uint32_t frame = p.queue.front();
  p.queue.pop_front();
  const uint32_t len = frames_[frame].len;
  p.queue_bytes -= len;
  p.busy = true;
  const uint64_t ser = serialization_ns(len, p.params.rate_bps);
  ++p.stats.tx_frames;
  p.stats.tx_bytes += len;
  events_.push(now + ser, EventKind::kLinkTxDone, pid);
  // Loss and jitter are drawn in transmit order from the port's own stream.
  const bool lost = p.rng.chance(p.params.loss);
  const uint64_t jitter = p.params.jitter_ns ? p.rng.between(0, p.params.jitter_ns) : 0;
  if (!p.up) {
    ++p.stats.drops_down;
    drop(frame);
  } else if (lost) {
    ++p.stats.drops_loss;
    drop(frame);
  } else {
    const uint64_t at = std::max(now + ser + p.params.delay_ns + jitter, p.last_arrival);
    p.last_arrival = at;
    events_.push(at, EventKind::kLinkArrive, pid, frame);
  }
}

void Fabric::on_tx_done(uint32_t pid, uint64_t now) {
  Port& p = ports_[pid];
  p.busy = false;
  if (!p.queue.empty()) {
    start_tx(pid, now);
  } else if (nodes_[p.node].is_host && idle_) {
    idle_(nodes_[p.node].host, now);
  }
}

void Fabric::on_arrive(uint32_t pid, uint32_t frame, uint64_t now) {
  Port& p = ports_[pid];
  if (!p.up) {  // failed while the frame was on the wire
    ++p.stats.drops_down;
    drop(frame);
    return;
  }
  const Node& to = nodes_[p.peer];
  if (to.is_host) {
    if (deliver_) {
      deliver_(to.host, frame, now);
    } else {
      drop(frame);
    }
    return;
  }
  forward(p.peer, frame, now);
}

void Fabric::forward(uint32_t node, uint32_t frame, uint64_t now) {
  Frame& f = frames_[frame];
  uint32_t src = 0, dst = 0;
  uint16_t sport = 0, dport = 0;
  uint8_t proto = 0;
  int out = -1;
  if (frame_five_tuple(f.data, f.len, src, dst, sport, dport, proto)) {
    out = route(node, ip_host(dst), src, dst, sport, dport, proto);
  }
  if (out < 0) {
    ++drops_no_route_;
    drop(frame);
    return;
  }
  enqueue(static_cast<uint32_t>(out), frame, now);
}

void Fabric::set_link_state(uint32_t link, bool up, uint64_t now, uint64_t failover_ns) {
  for (uint32_t pid : links_[link].ports) ports_[pid].up = up;
  if (up) {
    on_route_update(link, true);
  } else if (failover_ns != 0) {
    events_.push(now + failover_ns, EventKind::kRouteUpdate, link, 0);
  }
}

void Fabric::on_route_update(uint32_t link, bool routable) {
  bool changed = false;
  for (uint32_t pid : links_[link].ports) {
    // A link that came back before convergence stays routable.
    bool want = routable || ports_[pid].up;
    if (ports_[pid].routable != want) changed = true;
    ports_[pid].routable = want;
  }
  if (changed) compute_routes();
}

bool Fabric::handle(const Event& e) {
  switch (e.kind) {
    case EventKind::kLinkTxDone:
      on_tx_done(e.a, e.time);
      return true;
    case EventKind::kLinkArrive:
      on_arrive(e.a, static_cast<uint32_t>(e.b), e.time);
      return true;
    case EventKind::kRouteUpdate:
      on_route_update(e.a, e.b != 0);
      return true;
    default:
      return false;
  }
}

FabricStats Fabric::stats() const noexcept {
  FabricStats s;
  for (const Port& p : ports_) {
    s.drops_queue += p.stats.drops_queue;
    s.drops_loss += p.stats.drops_loss;
    s.drops_down += p.stats.drops_down;
    s.ecn_marks += p.stats.ecn_marks;
    if (!nodes_[p.node].is_host && p.stats.max_queue_bytes > s.max_queue_bytes) {
      s.max_queue_bytes = p.stats.max_queue_bytes;
    }
  }
  s.drops_no_route = drops_no_route_;
  return s;
}

int Fabric::find_link(const std::string& name) const noexcept {
  for (std::size_t i = 0; i < links_.size(); ++i) {
    if (links_[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace tandem::rnic::sim
