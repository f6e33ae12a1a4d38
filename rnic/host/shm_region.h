// A memfd-backed shared memory region: created by one side (huge pages
// first, plain memfd as the fallback), sealed so it cannot shrink under the
// peer, passed as a file descriptor and mapped by the other side.
#pragma once

#include <cstddef>
#include <cstdint>

#include "rnic/host/host_status.h"

namespace tandem::rnic::host {

class ShmRegion {
 public:
  ShmRegion() = default;
  ~ShmRegion() { reset(); }
  ShmRegion(ShmRegion&& o) noexcept { *this = static_cast<ShmRegion&&>(o); }
  ShmRegion& operator=(ShmRegion&& o) noexcept;
  ShmRegion(const ShmRegion&) = delete;
  ShmRegion& operator=(const ShmRegion&) = delete;

  // Creates a sealed memfd of at least `bytes`, mapped read-write. With
  // `try_huge`, MFD_HUGETLB is tried first; hugetlb() says which one it got.
  static Status create(const char* name, std::size_t bytes, bool try_huge, ShmRegion* out);

  // A region this process writes and its peers may only read (the worker
  // page every application of a worker maps): an ordinary memfd mapped
  // read-write here, then sealed F_SEAL_FUTURE_WRITE (no new writable mapping
  // or write() by anyone, whatever fd they reopen it through), and fd() is a
  // read-only descriptor (O_RDONLY: its mappings cannot be mprotect'ed
  // writable).
  static Status create_peer_read_only(const char* name, std::size_t bytes, ShmRegion* out);

  // Maps a received fd (taking ownership of it: it is closed here whatever
  // happens). Rejects files that are not sealed against shrinking (a peer
  // could truncate them and fault us), shorter than `min_bytes`, or larger
  // than `max_bytes`. Huge pages are detected from the file system, not
  // taken from the peer's word.
  static Status map_fd(int fd, std::size_t min_bytes, std::size_t max_bytes, bool writable,
                       ShmRegion* out);

  // Moves the pages [addr, addr + bytes) (aligned to page_size_at(addr),
  // mapped read-write by the caller) onto a sealed memfd mapped at the same
  // address, contents kept, so memory an application allocated itself can be
  // shared with the worker. Huge pages (a MAP_HUGETLB or hugetlbfs mapping)
  // move onto a hugetlb memfd of the same page size, so they stay huge; only
  // if the system has no free huge pages left for the copy do they move onto
  // ordinary pages (hugetlb() says which). The mapping then belongs to the
  // application: reset() closes the fd only. kBadRegion if the range is not
  // readable (unmapped memory).
  static Status adopt(void* addr, std::size_t bytes, ShmRegion* out);
  // The page size of the mapping holding addr (the huge page size of a
  // hugetlb mapping; the base page size otherwise, or if addr is unmapped).
  static std::size_t page_size_at(const void* addr);

  // Fork protection (ibv_fork_init): from now on, every region created or
  // adopted in this process is marked MADV_DONTFORK, so a forked child does
  // not get it at all (it would otherwise share, not copy, the pages the
  // worker writes). Process-wide, never switched off (as rdma-core's).
  static void protect_from_fork() noexcept;
  static bool fork_protected() noexcept;

  void reset() noexcept;
  void close_fd() noexcept;

  uint8_t* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  bool hugetlb() const noexcept { return hugetlb_; }
  int fd() const noexcept { return fd_; }
  bool valid() const noexcept { return data_ != nullptr; }
  bool borrowed() const noexcept { return borrowed_; }

 private:
  uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
  int fd_ = -1;
  bool hugetlb_ = false;
  bool borrowed_ = false;  // adopt(): the application's mapping, never unmapped here
  bool guarded_ = false;   // map_fd(): registered with MemoryGuard
};

// Size of the default huge page (from /proc/meminfo; 2 MB if unknown).
std::size_t huge_page_size() noexcept;

}  // namespace tandem::rnic::host
