#include "rnic/sim/fabric.h"

#include <algorithm>
#include <limits>
#include <map>
#include <stdexcept>

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
  n.sw = switches_++;
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
    if (queue.red_at_bps != 0 && params.rate_bps != queue.red_at_bps) {
      const double k = static_cast<double>(params.rate_bps) / static_cast<double>(queue.red_at_bps);
      p.queue_params.red_kmin_bytes = static_cast<uint64_t>(static_cast<double>(queue.red_kmin_bytes) * k);
      p.queue_params.red_kmax_bytes = static_cast<uint64_t>(static_cast<double>(queue.red_kmax_bytes) * k);
    }
    p.rng = Rng(derive_seed(seed_, 1000 + ports_.size()));
    p.red_rng = Rng(derive_seed(seed_ ^ 0x4ED, 1000 + ports_.size()));
    p.host_side = nodes_[from].is_host;
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
  if (in_ports_.size() != n) {
    // Built once: links are never added after the first route computation.
    in_ports_.assign(n, {});
    for (uint32_t pid = 0; pid < ports_.size(); ++pid) in_ports_[ports_[pid].peer].push_back(pid);
    edges_.clear();
    host_port_.assign(host_nodes_.size(), 0);
    std::vector<uint32_t> edge_of(n, kInf);
    for (uint32_t h = 0; h < host_nodes_.size(); ++h) {
      Node& hn = nodes_[host_nodes_[h]];
      if (hn.ports.size() != 1 || nodes_[ports_[hn.ports[0]].peer].is_host) {
        throw std::invalid_argument("fabric: host " + hn.name + " must have exactly one link, to a switch");
      }
      const uint32_t sw = ports_[hn.ports[0]].peer;
      if (edge_of[sw] == kInf) {
        edge_of[sw] = static_cast<uint32_t>(edges_.size());
        edges_.push_back(sw);
      }
      hn.edge = edge_of[sw];
      for (uint32_t pid : nodes_[sw].ports) {
        if (ports_[pid].peer == host_nodes_[h]) host_port_[h] = pid;
      }
    }
  }
  const std::size_t ne = edges_.size();
  route_tab_.assign(std::size_t{switches_} * ne, 0);
  groups_.assign(1, {});
  std::map<std::vector<uint32_t>, uint32_t> interned;
  std::vector<uint32_t> dist(n), frontier, next, group;
  for (std::size_t e = 0; e < ne; ++e) {
    // Breadth-first from the edge switch over reversed routable ports;
    // hosts do not forward.
    std::fill(dist.begin(), dist.end(), kInf);
    dist[edges_[e]] = 0;
    frontier.assign(1, edges_[e]);
    while (!frontier.empty()) {
      next.clear();
      for (uint32_t v : frontier) {
        for (uint32_t pid : in_ports_[v]) {
          const Port& p = ports_[pid];
          if (!p.routable || nodes_[p.node].is_host || dist[p.node] != kInf) continue;
          dist[p.node] = dist[v] + 1;
          next.push_back(p.node);
        }
      }
      frontier.swap(next);
    }
    for (uint32_t v = 0; v < n; ++v) {
      if (nodes_[v].is_host || dist[v] == kInf || dist[v] == 0) continue;
      group.clear();
      for (uint32_t pid : nodes_[v].ports) {
        const Port& p = ports_[pid];
        if (p.routable && !nodes_[p.peer].is_host && dist[p.peer] != kInf && dist[p.peer] + 1 == dist[v])
          group.push_back(pid);
      }
      if (group.empty()) continue;
      auto [it, fresh] = interned.emplace(group, static_cast<uint32_t>(groups_.size()));
      if (fresh) groups_.push_back(group);
      route_tab_[std::size_t{nodes_[v].sw} * ne + e] = it->second;
    }
  }
}

std::vector<uint32_t> Fabric::route_group(uint32_t node, uint32_t dst_host) const {
  const Node& nd = nodes_[node];
  if (nd.is_host || dst_host >= host_nodes_.size()) return {};
  const uint32_t e = nodes_[host_nodes_[dst_host]].edge;
  if (edges_[e] == node) {
    const uint32_t pid = host_port_[dst_host];
    return ports_[pid].routable ? std::vector<uint32_t>{pid} : std::vector<uint32_t>{};
  }
  return groups_[route_tab_[std::size_t{nd.sw} * edges_.size() + e]];
}

int Fabric::route(uint32_t node, uint32_t dst_host, uint32_t src_ip, uint32_t dst_ip, uint16_t sport,
                  uint16_t dport, uint8_t proto) const noexcept {
  return route_key(node, dst_host, common::ecmp_key(common::FiveTuple{src_ip, dst_ip, sport, dport, proto}));
}

int Fabric::route_key(uint32_t node, uint32_t dst_host, uint64_t key) const noexcept {
  const Node& nd = nodes_[node];
  if (nd.is_host || dst_host >= host_nodes_.size()) return -1;
  const uint32_t e = nodes_[host_nodes_[dst_host]].edge;
  if (edges_[e] == node) {
    const uint32_t pid = host_port_[dst_host];
    return ports_[pid].routable ? static_cast<int>(pid) : -1;
  }
  const auto& group = groups_[route_tab_[std::size_t{nd.sw} * edges_.size() + e]];
  if (group.empty()) return -1;
  if (group.size() == 1) return static_cast<int>(group[0]);
  return static_cast<int>(group[common::ecmp_hash_key(key, nd.ecmp_seed) % group.size()]);
}

void Fabric::send_from_host(uint32_t host, uint32_t frame, uint64_t now) {
  const Node& nd = nodes_[host_nodes_[host]];
  Frame& f = frames_[frame];
  f.src_host = host;
  uint32_t src = 0, dst = 0;
  uint16_t sport = 0, dport = 0;
  uint8_t proto = 0;
  f.routable = frame_five_tuple(f.data, f.len, src, dst, sport, dport, proto);
  if (f.routable) {
    f.dst_host = ip_host(dst);
    f.ecmp_key = common::ecmp_key(common::FiveTuple{src, dst, sport, dport, proto});
  }
  if (nd.ports.empty()) {
    ++drops_no_route_;
    drop(frame);
    return;
  }
  enqueue(nd.ports[0], frame, now);
}

bool Fabric::host_port_idle(uint32_t host, uint64_t now) const noexcept {
  const Node& nd = nodes_[host_nodes_[host]];
  if (nd.ports.empty()) return true;
  return ports_[nd.ports[0]].busy_until <= now;
}

void Fabric::enqueue(uint32_t pid, uint32_t frame, uint64_t now) {
  Port& p = ports_[pid];
  Frame& f = frames_[frame];
  const uint32_t len = f.wire_len();
  // What is still waiting now (frames that have started are on the wire).
  while (!p.waiting.empty() && p.waiting.front().start <= now) {
    p.queue_bytes -= p.waiting.front().bytes;
    p.waiting.pop_front();
  }
  // A host's NIC queue is the transport's own backlog: no drop, no marking.
  if (!p.host_side) {
    if (p.queue_bytes + len > p.queue_params.limit_bytes) {
      ++p.stats.drops_queue;
      drop(frame);
      return;
    }
    if (p.queue_params.ecn_bytes != 0 && p.queue_bytes >= p.queue_params.ecn_bytes && mark_ce(f.data, f.len))
      ++p.stats.ecn_marks;
  }
  const uint64_t start = std::max(now, p.busy_until);
  const uint64_t ser = serialization_ns(len, p.params.rate_bps);
  p.busy_until = start + ser;
  if (start > now) {
    p.waiting.push_back(Port::Waiting{start, len});
    p.queue_bytes += len;
    if (p.queue_bytes > p.stats.max_queue_bytes) p.stats.max_queue_bytes = p.queue_bytes;
  }
  p.enq_bytes += len;
  f.dep_start = start;
  f.dep_enq = p.enq_bytes;
  f.dep_tx = p.int_tx_bytes;
  p.int_tx_bytes += len + kWireOverhead;
  if (!p.host_side) p.history.push_back(Port::Enqueued{now, p.enq_bytes});
  ++p.stats.tx_frames;
  p.stats.tx_bytes += len;
  if (p.host_side) events_.push(p.busy_until, EventKind::kLinkTxDone, pid);
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
    const uint64_t at = std::max(p.busy_until + p.params.delay_ns + jitter, p.last_arrival);
    p.last_arrival = at;
    events_.push(at, EventKind::kLinkArrive, pid, frame);
  }
}

void Fabric::on_departed(Port& p, Frame& f) noexcept {
  // The enqueues up to its start decide what it left behind; older ones
  // are no longer needed (departures only move forward).
  while (p.history.size() > 1 && p.history[1].at <= f.dep_start) p.history.pop_front();
  uint64_t enq_then = f.dep_enq;
  if (!p.history.empty() && p.history.front().at <= f.dep_start) enq_then = std::max(enq_then, p.history.front().bytes);
  const uint64_t behind = enq_then - f.dep_enq;
  // RED marking on what stays queued, and the INT record HPCC's switches push.
  const QueueParams& qp = p.queue_params;
  if (qp.red_kmax_bytes != 0 && behind > qp.red_kmin_bytes) {
    const bool mark = behind > qp.red_kmax_bytes ||
                      p.red_rng.chance(qp.red_pmax * static_cast<double>(behind - qp.red_kmin_bytes) /
                                       static_cast<double>(qp.red_kmax_bytes - qp.red_kmin_bytes));
    if (mark && mark_ce(f.data, f.len)) ++p.stats.ecn_marks;
  }
  if (f.int_stamp && f.int_rec.hops < rnic::kMaxIntHops) {
    f.int_rec.hop[f.int_rec.hops++] = rnic::IntHop{f.dep_start, f.dep_tx, static_cast<uint32_t>(behind),
                                                  static_cast<double>(p.params.rate_bps) / 1e9};
  }
}

void Fabric::on_tx_done(uint32_t pid, uint64_t now) {
  // Host ports only: the NIC pulls its next frame once the port is idle.
  const Port& p = ports_[pid];
  if (p.busy_until <= now && idle_) idle_(nodes_[p.node].host, now);
}

void Fabric::on_arrive(uint32_t pid, uint32_t frame, uint64_t now) {
  Port& p = ports_[pid];
  Frame& f = frames_[frame];
  // Down as the frame started, or failed while it was on the wire.
  if (!p.up || (p.down_at != ~0ull && p.up_at > f.dep_start)) {
    ++p.stats.drops_down;
    drop(frame);
    return;
  }
  if (!p.host_side) on_departed(p, f);
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
  const Frame& f = frames_[frame];
  const int out = f.routable ? route_key(node, f.dst_host, f.ecmp_key) : -1;
  if (out < 0) {
    ++drops_no_route_;
    drop(frame);
    return;
  }
  enqueue(static_cast<uint32_t>(out), frame, now);
}

void Fabric::set_link_state(uint32_t link, bool up, uint64_t now, uint64_t failover_ns, int direction) {
  if (direction >= 0) {  // one direction only (e.g. an ACK path)
    const uint32_t pid = links_[link].ports[direction & 1];
    ports_[pid].up = up;
    (up ? ports_[pid].up_at : ports_[pid].down_at) = now;
    return;
  }
  for (uint32_t pid : links_[link].ports) {
    ports_[pid].up = up;
    (up ? ports_[pid].up_at : ports_[pid].down_at) = now;
  }
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
