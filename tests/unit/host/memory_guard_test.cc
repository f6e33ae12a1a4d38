// MemoryGuard (rnic/host/memory_guard.h): a worker that touches tenant
// memory whose pages went away (a punched hugetlb hole with no free huge
// page, here a truncated memfd: the same SIGBUS) reads zeros instead of
// dying, and only inside regions it guards.
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "rnic/host/memory_guard.h"
#include "rnic/host/shm_region.h"

using tandem::rnic::host::MemoryGuard;

namespace {

// Two pages of a memfd, mapped shared, whose file is then cut to nothing.
uint8_t* map_then_truncate(int* fd_out) {
  const int fd = memfd_create("guard-test", 0);
  REQUIRE(fd >= 0);
  REQUIRE(ftruncate(fd, 8192) == 0);
  auto* p = static_cast<uint8_t*>(mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  REQUIRE(p != MAP_FAILED);
  p[0] = 0x55;
  p[4096] = 0x66;
  *fd_out = fd;
  return p;
}

}  // namespace

TEST_CASE("a fault in guarded tenant memory is mended with zero pages and counted") {
  MemoryGuard::install();
  REQUIRE(MemoryGuard::installed());
  int fd = -1;
  uint8_t* p = map_then_truncate(&fd);
  REQUIRE(MemoryGuard::add(p, 8192, 4096));
  REQUIRE(ftruncate(fd, 0) == 0);  // the pages are gone: a touch is SIGBUS
  const uint64_t before = MemoryGuard::recovered();
  volatile uint8_t* v = p;
  CHECK(v[10] == 0);
  v[4096 + 3] = 7;  // the second page: a write lands in the mended page
  CHECK(v[4096 + 3] == 7);
  CHECK(MemoryGuard::recovered() == before + 2);
  MemoryGuard::remove(p);
  munmap(p, 8192);
  close(fd);
}

TEST_CASE("a fault outside guarded memory keeps its default action (the process dies of SIGBUS)") {
  MemoryGuard::install();
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    int fd = -1;
    uint8_t* p = map_then_truncate(&fd);
    if (ftruncate(fd, 0) != 0) _exit(2);
    volatile uint8_t* v = p;
    _exit(v[0]);  // not guarded: SIGBUS here
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGBUS);
}

TEST_CASE("regions the worker maps from an application are guarded while mapped") {
  MemoryGuard::install();
  tandem::rnic::host::ShmRegion made;
  REQUIRE(tandem::rnic::host::ShmRegion::create("guard-test", 4096, false, &made) ==
          tandem::rnic::host::Status::kOk);
  const std::size_t before = MemoryGuard::guarded();
  tandem::rnic::host::ShmRegion mapped;
  REQUIRE(tandem::rnic::host::ShmRegion::map_fd(dup(made.fd()), 4096, 1 << 20, true, &mapped) ==
          tandem::rnic::host::Status::kOk);
  CHECK(MemoryGuard::guarded() == before + 1);
  tandem::rnic::host::ShmRegion moved = std::move(mapped);  // the guard follows the mapping
  mapped.reset();
  CHECK(MemoryGuard::guarded() == before + 1);
  moved.reset();
  CHECK(MemoryGuard::guarded() == before);
}
