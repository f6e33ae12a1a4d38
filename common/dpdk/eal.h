// EAL start-up shared by every Tandem process: the app passes the arguments
// it received after `--`, and gets loud warnings for set-ups that would
// probe the machine's own NIC or share another process's hugepage files.
#pragma once

#include <string>
#include <vector>

namespace tandem::common::dpdk {

// Initialises the EAL with argv[0] = `prog` followed by `eal_args`.
// Throws std::runtime_error with rte_strerror's text on failure.
void eal_init(const std::string& prog, const std::vector<std::string>& eal_args);

// What eal_init would warn about (empty when the arguments are safe):
// no --no-pci and no -a/--allow (PCI probing may take the host's NIC), no
// --file-prefix (shares hugepage files with other primaries).
std::vector<std::string> eal_arg_warnings(const std::vector<std::string>& eal_args);

// Lets dpdk-dumpcap (a secondary process) capture this process's ports.
void pdump_init();

void eal_cleanup() noexcept;

}  // namespace tandem::common::dpdk
