// tandem-sysfs: runs a command with a sysfs tree of the registered Tandem
// devices over /sys/class, in a private mount namespace (rnic/verbs/sysfs_tree.h),
// or writes that tree into a directory. scripts/tandem-run calls it.
#include <CLI/CLI.hpp>
#include <sys/auxv.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "common/log/log_cli.h"
#include "rnic/host/device_registry.h"
#include "rnic/verbs/sysfs_tree.h"

namespace tv = tandem::rnic::verbs;
namespace th = tandem::rnic::host;

int main(int argc, char** argv) {
  namespace log = tandem::common::log;
  log::init("tandem-sysfs");
  // It makes namespaces and mounts and then runs a command the caller names: set-uid or
  // set-gid (or with file capabilities: AT_SECURE) it would hand that power to any user.
  // User namespaces give an unprivileged caller all it needs.
  if (getauxval(AT_SECURE) != 0 || getuid() != geteuid() || getgid() != getegid()) {
    log::error("refusing to run set-uid, set-gid or with file capabilities (it needs none: install it as an "
               "ordinary program)");
    return 126;
  }
  CLI::App app{
      "tandem-sysfs: gives stock verbs binaries that read /sys/class/infiniband themselves (UCX, NCCL,\n"
      "perftest's NUMA check) the registered Tandem devices there. With a command: runs it in a private\n"
      "mount namespace whose /sys/class holds the host's classes plus infiniband/ and infiniband_verbs/\n"
      "for the devices live now (the host's /sys is untouched; a device registered later is not in it).\n"
      "  tandem-sysfs -- ucx_info -d\n"
      "  tandem-sysfs --write /tmp/tree        # only write the tree (infiniband/, infiniband_verbs/)"};
  app.set_help_flag("-h,--help", "Show this help and exit");
  std::string dir = th::device_dir(), out;
  bool strict = false, netdev = false;
  std::vector<std::string> cmd;
  app.add_option("--device-dir", dir, "Where workers register their devices (default $TANDEM_DEVICES, else /run/tandem)");
  app.add_option("--write", out, "Write the tree into this directory and exit");
  app.add_flag("--strict", strict, "Fail when the namespace cannot be made (default: warn and run without the tree)");
  app.add_flag("--netdev", netdev,
               "Also a private network namespace with a tap per device (tandem0, ...) holding its vNIC's MAC\n"
               "and address, listed under the device's device/net/, for programs that find a RoCE device's\n"
               "address through its netdev (rdma-core's test_rdmacm). The taps carry no traffic, and the\n"
               "command cannot reach the host's network (loopback included)");
  std::string log_level = "info";
  log::add_level_option(app, log_level);
  app.prefix_command();  // everything from the command on is the command's
  CLI11_PARSE(app, argc, argv);
  log::set_level(*log::parse_level(log_level));
  cmd = app.remaining();
  if (!cmd.empty() && cmd[0] == "--") cmd.erase(cmd.begin());

  const std::vector<th::DeviceRecord> devs = th::read_devices(dir);
  if (!out.empty()) {
    const std::string err = tv::write_sysfs_tree(out, devs, netdev);
    if (!err.empty()) log::error("{}", err);
    return err.empty() ? 0 : 1;
  }
  if (cmd.empty()) {
    log::error("no command (or --write DIR)");
    return 2;
  }
  const std::string err = tv::enter_sysfs_namespace(devs, netdev);
  if (!err.empty()) {
    log::warn("no sysfs tree for {} ({}){}", cmd[0], err, strict ? "" : ": running it without");
    if (strict) return 1;
  }
  std::vector<char*> args;
  for (std::string& a : cmd) args.push_back(a.data());
  args.push_back(nullptr);
  execvp(args[0], args.data());
  log::error("cannot run {}: {}", args[0], std::strerror(errno));
  return 127;
}
