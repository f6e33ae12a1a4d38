#include "rnic/host/shm_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "rnic/host/memory_guard.h"

namespace tandem::rnic::host {
namespace {

constexpr long kHugetlbfsMagic = 0x958458f6;
constexpr unsigned kSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

std::size_t round_up(std::size_t v, std::size_t a) { return (v + a - 1) / a * a; }

std::atomic<bool> g_dontfork{false};

void keep_from_fork(void* p, std::size_t n) {
  if (g_dontfork.load(std::memory_order_relaxed)) madvise(p, n, MADV_DONTFORK);
}

Status try_create(const char* name, std::size_t bytes, bool huge, uint8_t** data, int* fd_out,
                  std::size_t* size_out) {
  unsigned flags = MFD_CLOEXEC | MFD_ALLOW_SEALING | (huge ? MFD_HUGETLB : 0u);
  int fd = memfd_create(name, flags);
  if (fd < 0) return Status::kNoMemory;
  std::size_t page = huge ? huge_page_size() : static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  std::size_t size = round_up(bytes == 0 ? 1 : bytes, page);
  if (ftruncate(fd, static_cast<off_t>(size)) != 0 || fcntl(fd, F_ADD_SEALS, kSeals) != 0) {
    close(fd);
    return Status::kNoMemory;
  }
  // MAP_SHARED on hugetlbfs reserves the pages now, so a shortage shows up
  // here rather than as SIGBUS on first touch.
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    close(fd);
    return Status::kNoMemory;
  }
  keep_from_fork(p, size);
  *data = static_cast<uint8_t*>(p);
  *fd_out = fd;
  *size_out = size;
  return Status::kOk;
}

}  // namespace

std::size_t huge_page_size() noexcept {
  static const std::size_t size = [] {
    std::size_t kb = 2048;
    if (FILE* f = std::fopen("/proc/meminfo", "r")) {
      char line[128];
      while (std::fgets(line, sizeof line, f)) {
        unsigned long v = 0;
        if (std::sscanf(line, "Hugepagesize: %lu kB", &v) == 1) kb = v;
      }
      std::fclose(f);
    }
    return kb * 1024;
  }();
  return size;
}

ShmRegion& ShmRegion::operator=(ShmRegion&& o) noexcept {
  if (this != &o) {
    reset();
    data_ = o.data_;
    size_ = o.size_;
    fd_ = o.fd_;
    hugetlb_ = o.hugetlb_;
    borrowed_ = o.borrowed_;
    o.borrowed_ = false;
    guarded_ = o.guarded_;
    o.guarded_ = false;
    o.data_ = nullptr;
    o.size_ = 0;
    o.fd_ = -1;
    o.hugetlb_ = false;
  }
  return *this;
}

std::size_t ShmRegion::page_size_at(const void* addr) {
  const auto base = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  FILE* f = std::fopen("/proc/self/smaps", "r");
  if (f == nullptr) return base;
  const auto a = reinterpret_cast<uintptr_t>(addr);
  char line[256];
  bool in = false;
  std::size_t page = base;
  while (std::fgets(line, sizeof line, f)) {
    unsigned long lo = 0, hi = 0;
    unsigned long kb = 0;
    if (std::sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {  // a mapping's first line
      if (in) break;  // past the mapping
      in = a >= lo && a < hi;
    } else if (in && std::sscanf(line, "KernelPageSize: %lu kB", &kb) == 1) {
      page = kb * 1024;
      break;
    }
  }
  std::fclose(f);
  return page;
}

namespace {

// Huge pages: a hugetlb memfd of the mapping's page size, filled through a
// temporary mapping (hugetlbfs has no write()). -1 if no huge pages are free.
int huge_copy(void* addr, std::size_t bytes, std::size_t page) {
  unsigned flags = MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_HUGETLB;
  // The page size as log2 << 26: MFD_HUGE_SHIFT, which equals MAP_HUGE_SHIFT (glibc has only the latter).
  if (page != huge_page_size()) flags |= static_cast<unsigned>(__builtin_ctzll(page)) << MAP_HUGE_SHIFT;
  int fd = memfd_create("tandem-mr", flags);
  if (fd < 0) return -1;
  void* tmp = MAP_FAILED;
  if (ftruncate(fd, static_cast<off_t>(bytes)) == 0)
    tmp = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);  // reserves the pages
  if (tmp == MAP_FAILED) {
    close(fd);
    return -1;
  }
  std::memcpy(tmp, addr, bytes);
  munmap(tmp, bytes);
  return fd;
}

}  // namespace

Status ShmRegion::adopt(void* addr, std::size_t bytes, ShmRegion* out) {
  const std::size_t page = page_size_at(addr);
  if (addr == nullptr || bytes == 0 || reinterpret_cast<uintptr_t>(addr) % page || bytes % page)
    return Status::kInvalidArgument;
  const bool huge_vma = page > static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  // The memfd now holds the pages at addr: out borrows them (they stay the application's).
  auto adopted = [&](int memfd, bool hugetlb) {
    keep_from_fork(addr, bytes);
    out->reset();
    out->data_ = static_cast<uint8_t*>(addr);
    out->size_ = bytes;
    out->fd_ = memfd;
    out->hugetlb_ = hugetlb;
    out->borrowed_ = true;
    return Status::kOk;
  };
  int fd = huge_vma ? huge_copy(addr, bytes, page) : -1;
  if (fd >= 0) {
    if (fcntl(fd, F_ADD_SEALS, kSeals) != 0 ||
        mmap(addr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) != addr) {
      close(fd);
      return Status::kBadRegion;
    }
    return adopted(fd, true);
  }
  fd = memfd_create("tandem-mr", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return Status::kNoMemory;
  // pwrite copies from the old pages (EFAULT if any is unmapped) before they are replaced.
  std::size_t done = 0;
  bool ok = ftruncate(fd, static_cast<off_t>(bytes)) == 0;
  while (ok && done < bytes) {
    const ssize_t n = pwrite(fd, static_cast<uint8_t*>(addr) + done, bytes - done, static_cast<off_t>(done));
    if (n <= 0) ok = false;
    else done += static_cast<std::size_t>(n);
  }
  if (!ok || fcntl(fd, F_ADD_SEALS, kSeals) != 0) {
    close(fd);
    return errno == EFAULT ? Status::kBadRegion : Status::kNoMemory;
  }
  void* p = mmap(addr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
  if (p != addr) {
    close(fd);
    return Status::kBadRegion;
  }
  return adopted(fd, false);
}

void ShmRegion::protect_from_fork() noexcept { g_dontfork.store(true, std::memory_order_relaxed); }
bool ShmRegion::fork_protected() noexcept { return g_dontfork.load(std::memory_order_relaxed); }

void ShmRegion::reset() noexcept {
  if (guarded_) MemoryGuard::remove(data_);
  guarded_ = false;
  if (data_ != nullptr && !borrowed_) munmap(data_, size_);
  borrowed_ = false;
  close_fd();
  data_ = nullptr;
  size_ = 0;
  hugetlb_ = false;
}

void ShmRegion::close_fd() noexcept {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

Status ShmRegion::create(const char* name, std::size_t bytes, bool try_huge, ShmRegion* out) {
  out->reset();
  uint8_t* data = nullptr;
  int fd = -1;
  std::size_t size = 0;
  Status st = Status::kNoMemory;
  if (try_huge) {
    st = try_create(name, bytes, true, &data, &fd, &size);
    if (st == Status::kOk) out->hugetlb_ = true;
  }
  if (st != Status::kOk) st = try_create(name, bytes, false, &data, &fd, &size);
  if (st != Status::kOk) return st;
  out->data_ = data;
  out->fd_ = fd;
  out->size_ = size;
  return Status::kOk;
}

Status ShmRegion::create_peer_read_only(const char* name, std::size_t bytes, ShmRegion* out) {
  out->reset();
  const int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return Status::kNoMemory;
  const std::size_t size = round_up(bytes == 0 ? 1 : bytes, static_cast<std::size_t>(sysconf(_SC_PAGESIZE)));
  void* p = MAP_FAILED;
  if (ftruncate(fd, static_cast<off_t>(size)) == 0 && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0)
    p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  // Our writable mapping exists: from here on nobody gets another.
  if (p == MAP_FAILED || fcntl(fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE | F_SEAL_SEAL) != 0) {
    if (p != MAP_FAILED) munmap(p, size);
    close(fd);
    return Status::kNoMemory;
  }
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  const int ro = open(path, O_RDONLY | O_CLOEXEC);  // a new open file, read-only
  close(fd);
  if (ro < 0) {
    munmap(p, size);
    return Status::kNoMemory;
  }
  keep_from_fork(p, size);
  out->data_ = static_cast<uint8_t*>(p);
  out->fd_ = ro;
  out->size_ = size;
  return Status::kOk;
}

Status ShmRegion::map_fd(int fd, std::size_t min_bytes, std::size_t max_bytes, bool writable,
                         ShmRegion* out) {
  out->reset();
  struct stat st {};
  int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
      st.st_size <= 0 || static_cast<std::size_t>(st.st_size) < min_bytes ||
      static_cast<std::size_t>(st.st_size) > max_bytes) {
    close(fd);
    return Status::kBadRegion;
  }
  struct statfs fs {};
  bool huge = fstatfs(fd, &fs) == 0 && static_cast<long>(fs.f_type) == kHugetlbfsMagic;
  std::size_t size = static_cast<std::size_t>(st.st_size);
  int prot = PROT_READ | (writable ? PROT_WRITE : 0);
  void* p = mmap(nullptr, size, prot, MAP_SHARED, fd, 0);
  close(fd);  // the mapping keeps the memory alive; no fd per region on the worker
  if (p == MAP_FAILED) return Status::kBadRegion;
  out->data_ = static_cast<uint8_t*>(p);
  out->size_ = size;
  out->hugetlb_ = huge;
  // The peer's pages may go under us (a hole punched in a hugetlb memfd): a
  // worker that installed the guard survives the fault (memory_guard.h).
  // (The page size from fstatfs, not page_size_at: that reads /proc/self/smaps, whose
  // cost grows with the mappings, i.e. with the QPs.)
  out->guarded_ = MemoryGuard::add(
      p, size, huge ? static_cast<std::size_t>(fs.f_bsize) : static_cast<std::size_t>(sysconf(_SC_PAGESIZE)));
  return Status::kOk;
}

}  // namespace tandem::rnic::host
