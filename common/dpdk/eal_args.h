// Splits a command line at "--": the application's flags before it, the
// EAL's arguments after it (as every Tandem DPDK process takes them).
#pragma once

#include <string>
#include <vector>

namespace tandem::common::dpdk {

struct SplitArgs {
  int app_argc = 0;                    // argv[0..app_argc) are the application's
  std::vector<std::string> eal_args;  // everything after "--"
};

inline SplitArgs split_eal_args(int argc, char** argv) {
  SplitArgs s{argc, {}};
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--") {
      s.app_argc = i;
      s.eal_args.assign(argv + i + 1, argv + argc);
      break;
    }
  return s;
}

}  // namespace tandem::common::dpdk
