#include "rnic/perf/sink_run.h"

#include <arpa/inet.h>
#include <signal.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/log/log.h"
#include "common/wire/entropy.h"
#include "rnic/port/standalone_table.h"
#include "rnic/host/verbs.h"
#include "rnic/perf/pattern.h"
#include "rnic/perf/verbs_objects.h"

namespace tandem::rnic::perf {

namespace host = tandem::rnic::host;
using nlohmann::json;

namespace {

std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop.store(true); }

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

std::string mac_text(const common::MacAddr& m) {
  char b[24];
  std::snprintf(b, sizeof b, "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5]);
  return b;
}

ibv_mtu mtu_enum(uint32_t mtu) {
  switch (mtu) {
    case 256: return IBV_MTU_256;
    case 512: return IBV_MTU_512;
    case 1024: return IBV_MTU_1024;
    case 2048: return IBV_MTU_2048;
    default: return IBV_MTU_4096;
  }
}

// What the worker's table says about the QPs' addressing (as Worker::find_route
// resolves it: the bound vNIC, or the first vNIC with an egress entry to remote).
struct Addressing {
  uint32_t underlay_ip = 0;
  common::MacAddr underlay_mac{};
  const port::Vnic* vnic = nullptr;
  common::EgressAction egress{};
  std::vector<uint16_t> sports;
};

Addressing resolve(const SinkOptions& o, const port::StandaloneTable& st) {
  Addressing a;
  a.underlay_ip = st.underlay_ip;
  a.underlay_mac = st.underlay_mac;
  Level2Table table(Level2TableConfig{static_cast<uint32_t>(std::max<std::size_t>(64, st.entries.size() * 2))});
  port::commit_standalone_table(st, table);
  const uint32_t remote = port::parse_ipv4(o.remote);
  const uint32_t bound = o.gid.empty() ? 0 : port::parse_ipv4(o.gid);
  const Level2Table::Snapshot snap = table.begin_read();
  for (const port::Vnic& v : st.vnics) {
    if (bound != 0 && v.overlay_ip != bound) continue;
    if (const Level2Entry* e = table.lookup(snap, common::egress_key(v.id, remote))) {
      a.vnic = &v;
      a.egress = e->egress;
      break;
    }
  }
  if (a.vnic == nullptr)
    throw std::runtime_error(o.table + " has no egress entry from " + (o.gid.empty() ? "any vNIC" : "vNIC " + o.gid) +
                             " to " + o.remote + ": the worker would put the QPs in ERR");
  if (a.egress.path_set_id != 0 && a.egress.path_set_id <= st.path_sets.size()) {
    a.sports = st.path_sets[a.egress.path_set_id - 1];
  } else {
    const uint32_t n = std::max<uint32_t>(1, a.egress.path_count);
    for (uint32_t i = 0; i < n; ++i) a.sports.push_back(static_cast<uint16_t>(a.egress.path_base_port + i));
  }
  return a;
}

using Sink = VerbsObjects;

[[noreturn]] void host_fail(const char* what) { throw std::runtime_error(std::string(what) + ": " + host::last_error()); }

struct RecvCheck {
  uint64_t completions = 0, bytes = 0, wrong = 0, errors = 0;
  json first_wrong;
};

}  // namespace

int run_sink(const SinkOptions& o) {
  Addressing addr;
  port::StandaloneTable st;
  try {
    st = port::load_standalone_table(o.table);
    addr = resolve(o, st);
  } catch (const std::exception& e) {
    common::log::error("sink: {}", e.what());
    return 2;
  }
  const std::string vnic_ip = port::format_ipv4(addr.vnic->overlay_ip);
  Sink s;
  host::DeviceAttr da;
  da.name = "tandem-perf-sink";
  da.huge_buffers = o.huge;
  da.vnic = vnic_ip.c_str();
  s.ctx = host::open_device(o.device.c_str(), da);
  if (s.ctx == nullptr) {
    common::log::error("sink: no worker at {}: {}", o.device, host::last_error());
    return 2;
  }
  // Layout: QP i's WRITE region at i * size, then its receive slots.
  const uint64_t recv_bytes = uint64_t{o.recv_depth} * o.recv_size;
  const uint64_t per_qp = o.size + recv_bytes;
  s.pd = host::alloc_pd(s.ctx);
  if (!s.pd) host_fail("alloc_pd");
  s.buf_len = per_qp * o.qps;
  s.buf = static_cast<uint8_t*>(host::alloc_buf(s.ctx, s.buf_len));
  if (!s.buf) host_fail("alloc_buf");
  auto region = [&](uint32_t q) { return s.buf + q * per_qp; };
  auto recv_slot = [&](uint32_t q, uint32_t k) { return region(q) + o.size + uint64_t{k} * o.recv_size; };
  for (uint32_t q = 0; q < o.qps; ++q) {
    fill_pattern({region(q), o.size}, q, 0);
    for (uint64_t i = 0; i < o.size; ++i) region(q)[i] = static_cast<uint8_t>(~region(q)[i]);
    std::memset(region(q) + o.size, 0, recv_bytes);
  }
  s.mr = host::reg_mr(s.pd, s.buf, s.buf_len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (!s.mr) host_fail("reg_mr");
  const uint64_t cqe = std::min<uint64_t>(host::kMaxQueueDepth, uint64_t{o.qps} * (o.recv_depth + 1));
  s.cq = host::create_cq(s.ctx, static_cast<int>(cqe));
  if (!s.cq) host_fail("create_cq");
  const uint32_t remote_ip = port::parse_ipv4(o.remote);
  auto post_recv = [&](uint32_t q, uint32_t k) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(recv_slot(q, k)), o.recv_size, s.mr->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = k;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    if (host::post_recv(s.qps[q], &wr, &bad)) host_fail("post_recv");
  };
  for (uint32_t q = 0; q < o.qps; ++q) {
    host::QpInitAttr init;
    init.send_cq = s.cq;
    init.recv_cq = s.cq;
    init.cap.max_send_wr = 1;
    init.cap.max_recv_wr = o.recv_depth;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    host::Qp* qp = host::create_qp(s.pd, &init);
    if (!qp) host_fail("create_qp");
    s.qps.push_back(qp);
    s.index_of[qp->qp_num] = q;
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
    if (host::modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
      host_fail("modify_qp to INIT");
    for (uint32_t k = 0; k < o.recv_depth; ++k) post_recv(q, k);
    a = {};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = mtu_enum(o.mtu);
    a.dest_qp_num = o.remote_qpn_base + q;
    a.rq_psn = o.remote_psn;
    a.max_dest_rd_atomic = 16;
    a.min_rnr_timer = 1;
    a.ah_attr.is_global = 1;
    a.ah_attr.port_num = 1;
    a.ah_attr.grh.dgid.raw[10] = 0xff;
    a.ah_attr.grh.dgid.raw[11] = 0xff;
    const uint32_t be = htonl(remote_ip);
    std::memcpy(a.ah_attr.grh.dgid.raw + 12, &be, 4);
    if (host::modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
      host_fail("modify_qp to RTR");
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = 0;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    if (host::modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN))
      host_fail("modify_qp to RTS");
  }

  json p;
  p["tool"] = "tandem-perf sink";
  p["format"] = 1;
  p["mode"] = o.mode;
  p["mtu"] = o.mtu;
  p["worker"] = {{"socket", o.device}, {"table", o.table}, {"underlay_ip", port::format_ipv4(addr.underlay_ip)},
                 {"underlay_mac", mac_text(addr.underlay_mac)}};
  p["vnic"] = {{"id", addr.vnic->id}, {"ip", vnic_ip}, {"vni", addr.vnic->vni}};
  p["remote"] = {{"ip", o.remote}, {"qpn_base", o.remote_qpn_base}, {"psn", o.remote_psn},
                 {"underlay_ip", port::format_ipv4(addr.egress.underlay_dst_ip)},
                 {"mac", mac_text(addr.egress.dst_mac)}};
  // Frames to the worker: from the remote's underlay address (its ingress check), to
  // the worker's underlay IP/MAC, UDP 4791, any source port (these are its path ports).
  p["frames"] = {{"src_ip", port::format_ipv4(addr.egress.underlay_dst_ip)},
                 {"dst_ip", port::format_ipv4(addr.underlay_ip)},
                 {"src_mac", mac_text(addr.egress.dst_mac)},
                 {"dst_mac", mac_text(addr.underlay_mac)},
                 {"udp_dport", common::kRoceUdpPort},
                 {"udp_sports", addr.sports}};
  p["write_pattern"] = "byte o of QP i's region: pattern_byte(i, 0, o) (rnic/perf/pattern.h); untouched: its complement";
  p["send_pattern"] = "byte o of every SEND to QP i: pattern_byte(i | 2^31, 0, o)";
  p["recv"] = {{"size", o.recv_size}, {"depth", o.recv_depth}};
  p["qps"] = json::array();
  for (uint32_t q = 0; q < o.qps; ++q)
    p["qps"].push_back({{"index", q}, {"qpn", s.qps[q]->qp_num}, {"expected_psn", o.remote_psn},
                        {"remote_qpn", o.remote_qpn_base + q}, {"rkey", s.mr->rkey},
                        {"va", reinterpret_cast<uintptr_t>(region(q))}, {"len", o.size}});
  const std::string text = p.dump();
  if (!o.out.empty()) {
    const std::string tmp = o.out + ".tmp";
    std::ofstream f(tmp);
    f << p.dump(1) << "\n";
    f.close();
    if (!f || std::rename(tmp.c_str(), o.out.c_str()) != 0) {
      common::log::error("sink: cannot write {}", o.out);
      return 2;
    }
  }
  if (o.json) {
    std::printf("%s\n", text.c_str());
  } else {
    std::printf("tandem-perf sink: %u QPs ready on vNIC %s (QPN 0x%x..), remote %s QPN 0x%x.. PSN %u, rkey 0x%x\n",
                o.qps, vnic_ip.c_str(), s.qps[0]->qp_num, o.remote.c_str(), o.remote_qpn_base, o.remote_psn,
                s.mr->rkey);
  }
  std::fflush(stdout);

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  const uint64_t end = o.duration_s > 0 ? now_ns() + static_cast<uint64_t>(o.duration_s * 1e9) : ~uint64_t{0};
  RecvCheck rc;
  bool worker_gone = false;
  uint32_t empty = 0;
  uint64_t next_check = 0;
  ibv_wc wc[64];
  while (!g_stop.load()) {
    const int n = host::poll_cq(s.cq, 64, wc);
    for (int i = 0; i < n; ++i) {
      auto it = s.index_of.find(wc[i].qp_num);
      if (it == s.index_of.end()) continue;
      const uint32_t q = it->second;
      const uint32_t k = static_cast<uint32_t>(wc[i].wr_id);
      if (wc[i].status != IBV_WC_SUCCESS) {
        ++rc.errors;
        continue;
      }
      ++rc.completions;
      rc.bytes += wc[i].byte_len;
      const std::size_t off = find_mismatch({recv_slot(q, k), wc[i].byte_len}, q | kSinkSendKey, 0);
      if (off != kNoMismatch) {
        if (rc.wrong++ == 0)
          rc.first_wrong = {{"qp", q}, {"offset", off},
                            {"expected", pattern_byte(q | kSinkSendKey, 0, off)}, {"got", recv_slot(q, k)[off]}};
      }
      std::memset(recv_slot(q, k), 0, wc[i].byte_len);
      post_recv(q, k);
    }
    const uint64_t now = now_ns();
    if (now >= end) break;
    if (n > 0) {
      empty = 0;
      continue;
    }
    if (now >= next_check) {
      next_check = now + 1'000'000;
      if (!host::worker_alive(s.ctx)) {
        worker_gone = true;
        break;
      }
    }
    // Share the machine with the worker: yield, then sleep once idle a while.
    if (++empty < 1000) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(200));
  }

  // What landed in the WRITE regions.
  uint64_t written = 0, untouched = 0, wrong = 0;
  json first_wrong;
  uint32_t qps_written = 0;
  for (uint32_t q = 0; q < o.qps; ++q) {
    const uint8_t* r = region(q);
    uint64_t w_before = written;
    for (uint64_t i = 0; i < o.size; ++i) {
      const uint8_t want = pattern_byte(q, 0, i);
      if (r[i] == want) {
        ++written;
      } else if (r[i] == static_cast<uint8_t>(~want)) {
        ++untouched;
      } else if (wrong++ == 0) {
        first_wrong = {{"qp", q}, {"offset", i}, {"expected", want}, {"got", r[i]}};
      }
    }
    qps_written += written > w_before;
  }
  const bool ok = wrong == 0 && rc.wrong == 0 && !worker_gone;
  json res;
  res["verify"] = ok ? "ok" : "failed";
  res["qps"] = o.qps;
  res["write"] = {{"bytes_written", written}, {"bytes_untouched", untouched}, {"bytes_wrong", wrong},
                  {"qps_written", qps_written}};
  if (wrong) res["write"]["first_wrong"] = first_wrong;
  res["recv"] = {{"completions", rc.completions}, {"bytes", rc.bytes}, {"wrong", rc.wrong}, {"errors", rc.errors}};
  if (rc.wrong) res["recv"]["first_wrong"] = rc.first_wrong;
  if (worker_gone) res["error"] = "the RNIC worker went away";
  if (o.json) {
    std::printf("%s\n", res.dump().c_str());
  } else {
    std::printf("tandem-perf sink: verify %s: WRITE bytes written %llu, untouched %llu, wrong %llu; "
                "SEND completions %llu (%llu wrong, %llu errors)%s\n",
                ok ? "ok" : "FAILED", static_cast<unsigned long long>(written),
                static_cast<unsigned long long>(untouched), static_cast<unsigned long long>(wrong),
                static_cast<unsigned long long>(rc.completions), static_cast<unsigned long long>(rc.wrong),
                static_cast<unsigned long long>(rc.errors), worker_gone ? "; the worker went away" : "");
  }
  std::fflush(stdout);
  return ok ? 0 : 1;
}

}  // namespace tandem::rnic::perf
