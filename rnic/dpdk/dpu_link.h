// The worker's end of the DPU channel file (`--dpu-channel PATH`): maps the
// file the agent created, validates it, looks its rte_rings up by address,
// and each loop iteration moves commands into rnic::table's RnicChannel,
// events back, and publishes the BAR (heartbeat, state, version, digest,
// counters). Table misses are punted to the agent through the slots, each
// key at most once per kRepuntNs and each vNIC within its punt budget. DPDK
// types stay out of this header.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "common/channel/messages.h"
#include "common/log/log_ring.h"
#include "rnic/port/commit_fanout.h"
#include "rnic/port/punt_budget.h"
#include "rnic/table/level2_table.h"
#include "rnic/table/rnic_channel.h"

struct rte_ring;

namespace tandem::rnic::dpdk {

class DpuLink {
 public:
  // The file may not exist yet (agent not started): service() keeps trying.
  // max_protocol: newest channel protocol version offered (0: current).
  // budget: no default, so no caller is held to 1,000 punts/s per vNIC unawares
  // (the new-flow benchmark was, and stopped finishing).
  // fanout: the worker's lcores (commit_fanout.h): the table is reclaimed only
  // as far as every lcore allows, and COMMITTED waits until every lcore sees the
  // version; nullptr: the table is read on this thread only (benchmarks).
  DpuLink(std::string path, Level2Table& table, uint64_t rnic_instance, uint64_t agent_timeout_ns,
          uint16_t max_protocol, port::PuntBudgetConfig budget, port::CommitFanout* fanout = nullptr);
  ~DpuLink();
  DpuLink(const DpuLink&) = delete;
  DpuLink& operator=(const DpuLink&) = delete;

  // One loop iteration's channel work; returns messages moved. In two halves
  // when lcores must see a commit before the agent hears of it: the agent's
  // commands in (service_in), then, after the worker published the new version
  // and its lcores adopted it, the events out and the BAR (service_out).
  uint32_t service(uint64_t now) noexcept { return service_in(now) + service_out(); }
  uint32_t service_in(uint64_t now) noexcept;
  uint32_t service_out() noexcept;
  // Times the head of the events was a COMMITTED (or HELLO_ACK) some lcore did not see yet.
  uint64_t commits_held() const noexcept { return commits_held_; }
  // A packet (headers `hdr`) missed `key`: tell the agent (rate-limited per key,
  // and per vNIC by the budget: a refusal is counted, and the key asked again later).
  enum class Punted : uint8_t { kQuiet, kSent, kOverBudget };  // kQuiet: no agent, or asked again too soon
  Punted punt(const common::EntryKey& key, const uint8_t* hdr, std::size_t len, uint16_t port, uint64_t now) noexcept;
  // Worker counters mirrored into the BAR (the channel publishes commits/aborts/table_full).
  void set(common::BarCounter c, uint64_t v) noexcept { counters_[static_cast<std::size_t>(c)] = v; }

  bool attached() const noexcept { return base_ != nullptr; }
  RnicChannelState state() const noexcept { return ch_ ? ch_->state() : RnicChannelState::kDown; }
  const RnicChannel* channel() const noexcept { return ch_.get(); }
  const std::string& path() const noexcept { return path_; }
  const std::string& attach_error() const noexcept { return attach_error_; }
  const port::PuntBudget& budget() const noexcept { return budget_; }
  // Times the worker mapped a new file the agent put in place of its old one.
  uint64_t reattached() const noexcept { return reattached_; }
  // service() runs on the lcore: what it has to say goes through the lcore's
  // LogRing to the control thread (nullptr: nothing is said).
  void set_log(common::LogRing* log) noexcept { log_ = log; }

 private:
  static constexpr uint64_t kRetryNs = 200'000'000;
  static constexpr uint64_t kLogKey = uint64_t{0x100} << 32;  // its own rate-limit key (log_drain.h)
  static constexpr uint64_t kRepuntNs = 2'000'000;
  static constexpr uint64_t kRepuntMaxNs = 1'000'000'000;
  bool try_attach(uint64_t now) noexcept;
  // The file at path_ is not the one mapped (the agent replaced it): map the new one.
  bool replaced_on_disk() const noexcept;
  void detach() noexcept;

  std::string path_;
  Level2Table& table_;
  RnicChannelConfig cfg_;
  std::unique_ptr<RnicChannel> ch_;
  void* base_ = nullptr;
  std::size_t size_ = 0;
  rte_ring* cmd_ = nullptr;
  rte_ring* evt_ = nullptr;
  uint64_t next_try_ = 0;
  uint64_t next_inode_check_ = 0;  // while not synchronised, or told the file was retired
  uint64_t ino_ = 0, dev_ = 0;     // the mapped file
  uint64_t reattached_ = 0;
  uint32_t next_slot_ = 0;
  std::string attach_error_;
  common::LogRing* log_ = nullptr;
  // A key the agent keeps not resolving (denied by isolation, unknown) is
  // punted again after kRepuntNs, then 2x, 4x ... up to kRepuntMaxNs: a
  // tenant that keeps knocking costs the agent a few punts, not 500/s. The
  // backoff lasts one table version: after a commit the agent's answer may
  // differ (a mapping withdrawn and imported again), so the next miss is
  // punted at once; otherwise misses that keep coming across many quick
  // commits would push a resolvable key's wait up to kRepuntMaxNs.
  struct Recent {
    common::EntryKey key;
    uint64_t at = 0;
    uint64_t wait = 0;
    uint64_t version = 0;  // table version at the last punt
  };
  // Last punt per hashed key, kRecentPerVnic entries for each of the budget's
  // vNIC buckets: a vNIC's storm of keys evicts only its own entries, so it
  // cannot make another vNIC's pending key be asked again (and spend that
  // vNIC's budget) on every loop iteration.
  static constexpr std::size_t kRecentPerVnic = 16;
  std::array<Recent, port::PuntBudget::kBuckets * kRecentPerVnic> recent_{};
  std::array<uint64_t, common::kBarCounterCount> counters_{};
  std::array<common::RawMessage, 64> unsent_{};
  std::array<common::RawMessage, 64> in_{};  // a member: RawMessage zero-initialises
  uint32_t unsent_n_ = 0;
  port::PuntBudget budget_;  // per vNIC (an egress key's word0)
  port::CommitFanout* fanout_;
  common::CommittedTable shown_{};  // the newest committed table every lcore sees (the BAR's)
  uint64_t commits_held_ = 0;
};

}  // namespace tandem::rnic::dpdk
