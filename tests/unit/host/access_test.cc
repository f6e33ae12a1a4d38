// Who may attach is the worker's decision: with owners set, each attach is
// checked on the peer's credentials (SO_PEERCRED), whatever vNIC the
// application names. Other users are driven from forked children that drop to
// their uid/gid, so these cases need root.
#include <catch2/catch.hpp>

#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "rnic/host/verbs.h"
#include "server_thread.h"

using namespace tandem::rnic::host;
using tandem::rnic::host::test::ServerThread;

namespace {

constexpr uint32_t kVnicA = 0xC0A80701, kVnicB = 0xC0A80702;  // 192.168.7.1, .2

// open_device as uid:gid bound to vnic (nullptr: unbound), from a child: its Status.
Status attach_as(const std::string& path, uid_t uid, gid_t gid, const char* vnic) {
  const pid_t pid = fork();
  if (pid == 0) {
    if (setgroups(0, nullptr) != 0 || setresgid(gid, gid, gid) != 0 || setresuid(uid, uid, uid) != 0) _exit(250);
    DeviceAttr attr;
    attr.vnic = vnic;
    attr.timeout_ms = 2000;
    Context* ctx = open_device(path.c_str(), attr);
    const Status st = ctx ? Status::kOk : last_status();
    if (ctx) close_device(ctx);
    _exit(static_cast<int>(st));
  }
  int ws = 0;
  waitpid(pid, &ws, 0);
  REQUIRE(WIFEXITED(ws));
  REQUIRE(WEXITSTATUS(ws) != 250);
  return static_cast<Status>(WEXITSTATUS(ws));
}

ServerConfig owned_config() {
  ServerConfig c;
  c.vnic_ips = {kVnicA, kVnicB};
  c.check_owners = true;
  c.vnic_owners = {{kVnicA, 4242, -1}, {kVnicB, 4343, 4444}};
  return c;
}

void open_dir(const std::string& socket_path) {
  chmod(std::filesystem::path(socket_path).parent_path().c_str(), 0755);  // mkdtemp made it 0700
}

}  // namespace

TEST_CASE("a vNIC admits its owners and root; another user is refused and counted") {
  if (geteuid() != 0) {
    WARN("needs root to act as other users");
    return;
  }
  ServerThread st(owned_config());
  open_dir(st.path);
  struct stat sb{};
  REQUIRE(stat(st.path.c_str(), &sb) == 0);
  CHECK((sb.st_mode & 0777) == 0666);  // the socket no longer decides

  CHECK(attach_as(st.path, 4242, 100, "192.168.7.1") == Status::kOk);
  CHECK(attach_as(st.path, 4343, 100, "192.168.7.1") == Status::kAccessDenied);  // B's owner, not A's
  CHECK(attach_as(st.path, 4343, 100, "192.168.7.2") == Status::kOk);
  CHECK(attach_as(st.path, 5000, 4444, "192.168.7.2") == Status::kOk);  // B's owning group
  CHECK(attach_as(st.path, 65534, 65534, "192.168.7.2") == Status::kAccessDenied);
  // Unbound, it could use either vNIC: only a user admitted to both may attach.
  CHECK(attach_as(st.path, 4242, 100, nullptr) == Status::kAccessDenied);
  CHECK(attach_as(st.path, 0, 0, nullptr) == Status::kOk);
  CHECK(st.with([](HostServer& s) { return s.counters().attach_denied; }) == 3);
  CHECK(st.with([](HostServer& s) { return s.counters().apps_attached; }) == 4);
  // Refused peers were dropped (the last close may still be on its way: wait for it).
  CHECK(st.wait_for([](HostServer& s) { return s.app_count() == 0; }));
}

TEST_CASE("owners follow the vNICs the worker has now") {
  if (geteuid() != 0) {
    WARN("needs root to act as other users");
    return;
  }
  ServerThread st(owned_config());
  open_dir(st.path);
  CHECK(attach_as(st.path, 4242, 100, "192.168.7.1") == Status::kOk);
  st.with([](HostServer& s) { s.set_vnic_owners({{kVnicA, 4343, -1}}); });
  CHECK(attach_as(st.path, 4242, 100, "192.168.7.1") == Status::kAccessDenied);
  CHECK(attach_as(st.path, 4343, 100, "192.168.7.1") == Status::kOk);
  // Policy on with no owner left: only root and the worker's user.
  st.with([](HostServer& s) { s.set_vnic_owners({}); });
  CHECK(attach_as(st.path, 4343, 100, "192.168.7.1") == Status::kAccessDenied);
}

TEST_CASE("without owners the socket's mode decides, as before") {
  ServerThread st;  // check_owners off: the worker leaves the socket's mode to its umask
  Context* ctx = open_device(st.path.c_str());
  REQUIRE(ctx != nullptr);
  close_device(ctx);
  CHECK(st.with([](HostServer& s) { return s.counters().attach_denied; }) == 0);
}
