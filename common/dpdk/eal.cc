#include "common/dpdk/eal.h"

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_log.h>
#include <rte_pdump.h>

#include <cstdio>
#include <stdexcept>
#include <string_view>

#include "common/log/log.h"

namespace tandem::common::dpdk {

namespace {
bool has_flag(const std::vector<std::string>& args, std::initializer_list<const char*> names) {
  for (const auto& a : args)
    for (const char* n : names) {
      const std::string s(n);
      if (a == s || a.rfind(s + "=", 0) == 0) return true;
      // short options may be glued to their value: -a0000:00:04.0
      if (s.size() == 2 && a.size() > 2 && a.rfind(s, 0) == 0 && a[1] != '-') return true;
    }
  return false;
}
}  // namespace

std::vector<std::string> eal_arg_warnings(const std::vector<std::string>& eal_args) {
  std::vector<std::string> w;
  if (!has_flag(eal_args, {"--no-pci", "-a", "--allow", "--pci-whitelist"}))
    w.push_back("neither --no-pci nor -a/--allow given: the EAL will probe every PCI NIC, "
                "including the one this machine uses for its own network");
  if (!has_flag(eal_args, {"--file-prefix", "--in-memory"}))
    w.push_back("no --file-prefix: this process shares hugepage files with any other "
                "DPDK primary using the default prefix");
  return w;
}

namespace {

// DPDK's own lines (EAL, PMDs) go through the process logger at their own
// level, not to stderr and syslog as the EAL's default stream does. rte_vlog
// writes one message and flushes: the buffer holds a whole one.
ssize_t dpdk_log_write(void*, const char* buf, size_t n) {
  const int l = rte_log_cur_msg_loglevel();
  const common::log::Level level = l <= RTE_LOG_ERR       ? common::log::Level::err
                                   : l == RTE_LOG_WARNING ? common::log::Level::warn
                                   : l <= RTE_LOG_INFO    ? common::log::Level::info
                                                          : common::log::Level::debug;
  std::string_view s(buf, n);
  while (!s.empty()) {
    const std::size_t nl = s.find('\n');
    const std::string_view line = s.substr(0, nl);
    if (!line.empty()) common::log::logger().log(level, "dpdk: {}", line);
    if (nl == std::string_view::npos) break;
    s.remove_prefix(nl + 1);
  }
  return static_cast<ssize_t>(n);
}

void route_dpdk_log() {
  static FILE* const f = [] {
    FILE* s = fopencookie(nullptr, "w", cookie_io_functions_t{nullptr, dpdk_log_write, nullptr, nullptr});
    if (s != nullptr) setvbuf(s, nullptr, _IOFBF, 4096);
    return s;
  }();
  if (f != nullptr) rte_openlog_stream(f);
}

}  // namespace

void eal_init(const std::string& prog, const std::vector<std::string>& eal_args) {
  for (const auto& w : eal_arg_warnings(eal_args))
    common::log::warn("{}", w);
  route_dpdk_log();
  std::vector<std::string> storage;
  storage.reserve(eal_args.size() + 1);
  storage.push_back(prog);
  storage.insert(storage.end(), eal_args.begin(), eal_args.end());
  std::vector<char*> argv;
  for (auto& s : storage) argv.push_back(s.data());
  argv.push_back(nullptr);
  if (rte_eal_init(static_cast<int>(storage.size()), argv.data()) < 0)
    throw std::runtime_error(std::string("EAL initialisation failed: ") + rte_strerror(rte_errno));
}

void pdump_init() {
  if (rte_pdump_init() != 0)
    throw std::runtime_error(std::string("rte_pdump_init failed: ") + rte_strerror(rte_errno));
}

void eal_cleanup() noexcept { rte_eal_cleanup(); }

}  // namespace tandem::common::dpdk
