// Simulated events per second for a named scenario (the real transport core
// on every host), against the bare event queue pushing and popping the same
// number of events with no work, measured in the same run.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "rnic/sim/event_queue.h"
#include "rnic/sim/rng.h"
#include "rnic/sim/run.h"
#include "rnic/sim/simulation.h"

using namespace tandem::rnic::sim;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Holds `depth` pending events and replaces each popped one by a later one,
// the queue's steady state in a simulation; returns events per second.
double bare_queue_rate(uint64_t n, uint32_t depth, uint64_t& checksum) {
  EventQueue q;
  Rng rng(1);
  q.reserve(depth + 1);
  for (uint32_t i = 0; i < depth; ++i) q.push(rng.below(10'000), EventKind::kUser, i);
  const auto t0 = std::chrono::steady_clock::now();
  for (uint64_t i = 0; i < n; ++i) {
    Event e = q.pop();
    checksum += e.a;
    q.push(e.time + 1 + (e.b = rng.below(10'000)), EventKind::kUser, e.a);
  }
  return static_cast<double>(n) / seconds_since(t0);
}

}  // namespace

int main(int argc, char** argv) {
  std::string name = "reorder-4paths";
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0) {
      json = true;
    } else if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::printf("usage: bench_sim_events [SCENARIO] [--json]\n"
                  "  SCENARIO  built-in name or YAML file (default reorder-4paths); its first policy is timed\n");
      return 0;
    } else {
      name = argv[i];
    }
  }
  try {
    Scenario s = resolve_scenario(name);
    // The scenario's first policy; the run is deterministic, so every
    // repetition does the same work.
    double best_rate = 0;
    uint64_t events = 0;
    for (int rep = 0; rep < 3; ++rep) {
      Simulation sim(s, s.policies[0], s.seed);
      const auto t0 = std::chrono::steady_clock::now();
      RunResult r = sim.run();
      const double rate = static_cast<double>(r.events) / seconds_since(t0);
      events = r.events;
      if (rate > best_rate) best_rate = rate;
      if (!r.data_ok) std::fprintf(stderr, "sim-events: warning: run did not deliver all data\n");
    }
    uint64_t checksum = 0;
    double base = 0;
    for (int rep = 0; rep < 3; ++rep) {
      double b = bare_queue_rate(events, 256, checksum);
      if (b > base) base = b;
    }
    const double ratio = best_rate / base;
    if (json) {
      std::printf(
          "{\"bench\": \"sim-events\", \"unit\": \"events/s\", \"ours\": %.0f, \"baseline\": %.0f, "
          "\"baseline_name\": \"bare event queue push+pop (depth 256)\", \"ratio\": %.4f, \"scenario\": \"%s\", "
          "\"policy\": \"%s\", \"events\": %llu}\n",
          best_rate, base, ratio, s.name.c_str(), s.policies[0].name.c_str(),
          static_cast<unsigned long long>(events));
    } else {
      std::printf("sim-events: scenario %s, policy %s, %llu events per run (best of 3)\n", s.name.c_str(),
                  s.policies[0].name.c_str(), static_cast<unsigned long long>(events));
      std::printf("%-40s %14s\n", "what", "events/s");
      std::printf("%-40s %14.0f\n", "simulation (fabric + transport core)", best_rate);
      std::printf("%-40s %14.0f\n", "bare event queue push+pop (depth 256)", base);
      std::printf("%-40s %14.4f\n", "ratio", ratio);
    }
    if (checksum == 42) std::printf("\n");  // keeps the baseline loop from being optimised away
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sim-events: %s\n", e.what());
    return 2;
  }
  return 0;
}
