#include "rnic/sim/run.h"

#include <filesystem>

#include "rnic/sim/builtin_scenarios.h"
#include "rnic/sim/report.h"
#include "rnic/sim/simulation.h"

namespace tandem::rnic::sim {

Scenario resolve_scenario(const std::string& name_or_path) {
  for (const BuiltinScenario& b : builtin_scenarios()) {
    if (name_or_path == b.name) return parse_scenario(b.yaml, std::string("built-in scenario ") + b.name);
  }
  if (!std::filesystem::exists(name_or_path)) {
    throw ScenarioError("'" + name_or_path + "' is neither a built-in scenario (see `tandem-sim list`) nor a file");
  }
  return load_scenario_file(name_or_path);
}

int list_scenarios(std::ostream& out) {
  for (const BuiltinScenario& b : builtin_scenarios()) {
    Scenario s = parse_scenario(b.yaml, b.name);
    out << s.name << "  " << s.description << "\n";
  }
  return 0;
}

int run(const RunOptions& opt, std::ostream& out, std::ostream& err, const GateFactory& gate) {
  Scenario s;
  std::vector<RunResult> results;
  try {
    s = resolve_scenario(opt.scenario);
    const uint64_t seed = opt.seed.value_or(s.seed);
    results = run_scenario(s, seed, gate);
    if (opt.json) {
      out << results_json(s, seed, results).dump() << "\n";
    } else {
      print_table(out, s, seed, results);
    }
  } catch (const ScenarioError& e) {
    err << "tandem-sim: " << e.what() << "\n";
    return 2;
  }
  return 0;
}

}  // namespace tandem::rnic::sim
