// Transaction benchmark: new-flow installs per second through the whole
// sans-I/O control path -- change set -> TxnBuilder messages -> RNIC channel
// end staging into the level-2 table -> COMMIT -> COMMITTED -> agent shadow --
// with queued change sets merged into one transaction (ours) and with one
// transaction per flow, against the bare level-2 table doing one
// BEGIN/PUT/COMMIT per flow with no channel at all (baseline). The rings are
// in-memory queues here: this measures the control path's CPU cost, not ring
// or process-switch latency (a ring transfer costs ~40 ns/message on this VM,
// see DESIGN.md).
#include <CLI/CLI.hpp>

#include <chrono>
#include <ctime>
#include <cstdio>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dpu/channel/agent_channel.h"
#include "rnic/table/level2_table.h"
#include "rnic/table/rnic_channel.h"

namespace {

using namespace tandem::common;
using Clock = std::chrono::steady_clock;

Level2Entry flow_entry(uint32_t i) {
  EgressAction a;
  a.underlay_src_ip = 0x0A000001;
  a.underlay_dst_ip = 0x0A100000 + (i & 0xFFFF);
  a.dst_mac = {2, 0, 0, 0, 0, 1};
  a.vni = 100;
  a.path_count = 4;
  return make_egress_entry(egress_key(i % 1024, 0xC0000000u + i / 1024), a);
}

// CPU time of this thread: unlike wall time, it does not count the time other
// processes on the shared cores hold the CPU.
double thread_cpu_s() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

struct Result {
  double flows_per_s = 0;
  double cpu_ns_per_flow = 0;
  double txns = 0;
  double msgs_per_flow = 0;
};

// Agent and RNIC ends back to back; `per_poll` punts resolved per agent loop.
Result through_channel(uint32_t flows, std::size_t max_ops, uint32_t per_poll) {
  tandem::rnic::Level2Table table({flows});
  tandem::rnic::RnicChannel rnic(table, {});
  tandem::dpu::AgentChannelConfig cfg;
  cfg.max_ops_per_txn = max_ops;
  tandem::dpu::AgentChannel agent("rnic0", cfg);
  auto bar = std::make_unique<Bar>();
  std::deque<RawMessage> ring;
  uint64_t now = 0, msgs = 0;
  RawMessage m;
  std::vector<RawMessage> burst(64);  // as DpuLink::service dequeues them from the ring
  auto step = [&] {
    now += 1000;
    for (;;) {
      std::size_t n = 0;
      while (n < burst.size() && agent.pop_command(burst[n])) ++n;
      if (n == 0) break;
      rnic.on_commands(burst.data(), n, now);
      msgs += n;
    }
    rnic.tick(now);
    while (rnic.pop_event(m)) agent.on_event(m, now);
    rnic.publish(*bar);
    agent.on_bar(tandem::dpu::sample_bar(*bar), now);
    agent.tick(now);
  };
  agent.start(now);
  for (int i = 0; i < 10 && agent.state() != tandem::dpu::ChannelState::kActive; ++i) step();
  msgs = 0;

  auto t0 = Clock::now();
  double c0 = thread_cpu_s();
  uint32_t submitted = 0;
  while (table.size() < flows) {
    for (uint32_t k = 0; k < per_poll && submitted < flows; ++k, ++submitted) {
      tandem::dpu::ChangeSet cs;
      cs.tag = submitted;
      cs.put(flow_entry(submitted));
      agent.submit(std::move(cs));
    }
    step();
    agent.take_outcomes();
  }
  double s = std::chrono::duration<double>(Clock::now() - t0).count();
  double cpu = thread_cpu_s() - c0;
  if (!(table.digest() == agent.shadow().digest())) {
    std::fprintf(stderr, "txn: RNIC table and agent shadow differ\n");
    std::exit(1);
  }
  return {flows / s, cpu * 1e9 / flows, double(agent.stats().txns_committed), double(msgs) / flows};
}

Result bare_table(uint32_t flows) {
  tandem::rnic::Level2Table table({flows});
  auto t0 = Clock::now();
  double c0 = thread_cpu_s();
  for (uint32_t i = 0; i < flows; ++i) {
    table.begin();
    table.put(flow_entry(i));
    table.commit();
  }
  double s = std::chrono::duration<double>(Clock::now() - t0).count();
  return {flows / s, (thread_cpu_s() - c0) * 1e9 / flows, double(flows), 0};
}

}  // namespace

int main(int argc, char** argv) {
  bool json = false;
  uint32_t flows = 1 << 20, per_poll = 32;
  int reps = 3;
  CLI::App app{"New-flow installs/s through the DPU->RNIC transaction path"};
  app.add_flag("--json", json, "print one JSON object instead of a table");
  app.add_option("--flows", flows, "flows installed per measurement")->check(CLI::Range(1024, 1 << 24));
  app.add_option("--per-poll", per_poll, "punts resolved per agent loop iteration")->check(CLI::Range(1, 4096));
  app.add_option("--reps", reps, "measurements (the best is reported)")->check(CLI::Range(1, 20));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  Result merged, single, bare;
  for (int r = 0; r < reps; ++r) {
    auto a = through_channel(flows, 4096, per_poll);
    auto b = through_channel(flows, 1, per_poll);
    auto c = bare_table(flows);
    if (a.flows_per_s > merged.flows_per_s) merged = a;
    if (b.flows_per_s > single.flows_per_s) single = b;
    if (c.flows_per_s > bare.flows_per_s) bare = c;
  }
  if (json) {
    nlohmann::json j;
    j["bench"] = "txn";
    j["unit"] = "Mflows/s";
    j["ours"] = merged.flows_per_s / 1e6;
    j["baseline"] = bare.flows_per_s / 1e6;
    j["baseline_name"] = "bare level-2 table, one BEGIN/PUT/COMMIT per flow, no channel";
    j["ratio"] = merged.flows_per_s / bare.flows_per_s;
    j["flows"] = flows;
    j["per_poll"] = per_poll;
    j["one_txn_per_flow_Mflows_per_s"] = single.flows_per_s / 1e6;
    j["merged_txns"] = merged.txns;
    j["merged_msgs_per_flow"] = merged.msgs_per_flow;
    j["single_msgs_per_flow"] = single.msgs_per_flow;
    j["merged_cpu_ns_per_flow"] = merged.cpu_ns_per_flow;
    j["single_cpu_ns_per_flow"] = single.cpu_ns_per_flow;
    j["bare_cpu_ns_per_flow"] = bare.cpu_ns_per_flow;
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("new-flow installs through the transaction path (%u flows, %u punts per agent poll, best of %d)\n",
              flows, per_poll, reps);
  std::printf("%-52s %10s %10s %10s %7s %12s\n", "path", "Mflows/s", "txns", "msgs/flow", "ratio", "CPU ns/flow");
  auto row = [&](const char* name, const Result& r) {
    std::printf("%-52s %10.3f %10.0f %10.2f %7.2f %12.0f\n", name, r.flows_per_s / 1e6, r.txns, r.msgs_per_flow,
                r.flows_per_s / bare.flows_per_s, r.cpu_ns_per_flow);
  };
  row("channel, queued change sets merged (ours)", merged);
  row("channel, one txn per flow", single);
  row("bare table, BEGIN/PUT/COMMIT per flow (baseline)", bare);
  return 0;
}
