// Memory an application allocated itself (what unmodified verbs programs
// register): adopt_buf moves its pages onto a memfd in place, contents kept,
// for unaligned and nested ranges; partial overlaps and unmapped memory are
// refused; the worker side then maps the same bytes.
#include <catch2/catch.hpp>

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <csignal>
#include <cstring>
#include <string>

#include "rnic/host/host_server.h"
#include "rnic/host/verbs.h"
#include "server_thread.h"

using namespace tandem::rnic::host;
using tandem::rnic::host::test::ServerThread;

TEST_CASE("malloc'd, unaligned memory is registered in place with its contents kept") {
  ServerThread st;
  Context* ctx = open_device(st.path.c_str());
  REQUIRE(ctx != nullptr);
  Pd* pd = alloc_pd(ctx);
  REQUIRE(pd != nullptr);
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  // An unaligned buffer in the middle of pages other data share.
  auto* block = static_cast<uint8_t*>(std::aligned_alloc(page, 8 * page));
  for (std::size_t i = 0; i < 8 * page; ++i) block[i] = static_cast<uint8_t>(i * 7);
  uint8_t* buf = block + page + 100;
  const std::size_t len = 3 * page;

  REQUIRE(reg_mr(pd, buf, len, IBV_ACCESS_LOCAL_WRITE) == nullptr);  // not shared yet
  REQUIRE(adopt_buf(ctx, buf, len) == 0);
  for (std::size_t i = 0; i < 8 * page; ++i) REQUIRE(block[i] == static_cast<uint8_t>(i * 7));
  Mr* mr = reg_mr(pd, buf, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  REQUIRE(mr != nullptr);
  // Writes after the move land in the shared pages and stay visible to the application.
  buf[5] = 0xAB;
  CHECK(buf[5] == 0xAB);

  SECTION("a range inside the moved pages registers again without moving") {
    CHECK(adopt_buf(ctx, buf + 10, 100) == 0);
    Mr* inner = reg_mr(pd, buf + 10, 100, IBV_ACCESS_LOCAL_WRITE);
    CHECK(inner != nullptr);
    CHECK(dereg_mr(inner) == 0);
  }
  SECTION("a range that partly overlaps them is refused") {
    CHECK(adopt_buf(ctx, buf + len - 10, 2 * page) != 0);
    CHECK(last_status() == Status::kInvalidArgument);
  }
  SECTION("after the last deregistration the pages can be registered again, contents kept") {
    REQUIRE(dereg_mr(mr) == 0);
    mr = nullptr;
    REQUIRE(adopt_buf(ctx, buf, len) == 0);
    CHECK(buf[5] == 0xAB);
    mr = reg_mr(pd, buf, len, IBV_ACCESS_LOCAL_WRITE);
    CHECK(mr != nullptr);
  }
  if (mr) CHECK(dereg_mr(mr) == 0);
  CHECK(dealloc_pd(pd) == 0);
  CHECK(close_device(ctx) == 0);
  // The moved pages stay a shared memfd mapping: hand the allocator private ones back, or
  // the fork test's child (same process, later) shares this heap memory and corrupts ours.
  REQUIRE(mmap(block + page, 4 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) ==
          block + page);
  std::free(block);
}

TEST_CASE("unmapped memory cannot be registered") {
  ServerThread st;
  Context* ctx = open_device(st.path.c_str());
  REQUIRE(ctx != nullptr);
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  void* p = mmap(nullptr, 2 * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(p != MAP_FAILED);
  CHECK(adopt_buf(ctx, p, page) != 0);
  CHECK(last_status() == Status::kBadRegion);
  munmap(p, 2 * page);
  CHECK(close_device(ctx) == 0);
}

TEST_CASE("a huge-page buffer registered in place stays on huge pages, contents kept") {
  const std::size_t huge = huge_page_size();
  void* p = mmap(nullptr, 2 * huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
  if (p == MAP_FAILED) {
    WARN("no huge pages free: skipped");
    return;
  }
  ServerThread st;
  Context* ctx = open_device(st.path.c_str());
  REQUIRE(ctx != nullptr);
  Pd* pd = alloc_pd(ctx);
  REQUIRE(pd != nullptr);
  auto* block = static_cast<uint8_t*>(p);
  for (std::size_t i = 0; i < 2 * huge; ++i) block[i] = static_cast<uint8_t>(i * 13 + 1);
  CHECK(ShmRegion::page_size_at(block + 5) == huge);
  // An unaligned range across the two huge pages: both move, whole.
  uint8_t* buf = block + huge - 1000;
  REQUIRE(adopt_buf(ctx, buf, 5000) == 0);
  CHECK(ShmRegion::page_size_at(block) == huge);  // still a hugetlb mapping
  CHECK(buf_is_hugetlb(ctx, buf));
  for (std::size_t i = 0; i < 2 * huge; ++i) REQUIRE(block[i] == static_cast<uint8_t>(i * 13 + 1));
  Mr* mr = reg_mr(pd, buf, 5000, IBV_ACCESS_LOCAL_WRITE);
  REQUIRE(mr != nullptr);
  CHECK(mr->hugetlb);
  // The worker finds the memfd on hugetlbfs itself (fstatfs), as it reports to the DPDK layer.
  const bool worker_sees_huge = st.with([&](HostServer& s) {
    HostEvent e;
    bool huge_mr = false;
    while (s.next_event(&e))
      if (e.kind == HostEventKind::kMrRegistered && e.lkey == mr->lkey) huge_mr = e.hugetlb;
    return huge_mr;
  });
  CHECK(worker_sees_huge);
  buf[0] = 0x42;
  CHECK(block[huge - 1000] == 0x42);
  CHECK(dereg_mr(mr) == 0);
  CHECK(dealloc_pd(pd) == 0);
  CHECK(close_device(ctx) == 0);
  munmap(p, 2 * huge);
}

namespace {

// How a forked child of the caller ends after touching *p: 0 if it read the
// byte and wrote `v`, else the signal that ended it.
int child_touch(volatile uint8_t* p, uint8_t v) {
  const pid_t pid = fork();
  if (pid == 0) {
    std::signal(SIGSEGV, SIG_DFL);  // die by the signal, not by a sanitizer's handler
    (void)*p;
    *p = v;
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status);
}

}  // namespace

TEST_CASE("fork: registered pages are shared with a child, or absent from it after fork protection") {
  ServerThread st;
  const std::string path = st.path;
  // Fork protection is process-wide and permanent: try it in a child process of its own.
  const pid_t pid = fork();
  if (pid == 0) {
    Context* ctx = open_device(path.c_str());
    Pd* pd = ctx ? alloc_pd(ctx) : nullptr;
    if (pd == nullptr) _exit(10);
    const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    auto* a = static_cast<uint8_t*>(std::aligned_alloc(page, 4 * page));
    auto* b = static_cast<uint8_t*>(std::aligned_alloc(page, 4 * page));
    a[100] = 1;
    b[100] = 1;
    if (adopt_buf(ctx, a, 4 * page) != 0 || reg_mr(pd, a, 4 * page, IBV_ACCESS_LOCAL_WRITE) == nullptr) _exit(11);
    // Without it: the child shares the registered pages (its write shows here).
    if (child_touch(a + 100, 0x77) != 0 || a[100] != 0x77) _exit(12);
    ShmRegion::protect_from_fork();
    if (adopt_buf(ctx, b, 4 * page) != 0 || reg_mr(pd, b, 4 * page, IBV_ACCESS_LOCAL_WRITE) == nullptr) _exit(13);
    // With it: the child has no such pages (SIGSEGV), and ours are untouched.
    if (child_touch(b + 100, 0x77) != SIGSEGV || b[100] != 1) _exit(14);
    _exit(0);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);  // 12: not shared before; 14: the child still had the pages
}
