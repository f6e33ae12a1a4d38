// MemoryGuard (memory_guard.h): a fixed registry of guarded ranges that the
// SIGBUS handler scans (no allocation, no lock in the handler), and the
// handler that maps anonymous memory over the faulting page.
#include "rnic/host/memory_guard.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <vector>

namespace tandem::rnic::host {

namespace {

// Enough for every ring and region of a worker's applications (QPs, CQs, MRs
// of several lcores' servers); 6 MB of the worker's memory.
constexpr std::size_t kSlots = 1 << 18;

struct Slot {
  std::atomic<uintptr_t> begin{0};  // 0: free
  std::atomic<uintptr_t> end{0};
  std::atomic<uintptr_t> page{0};
};

Slot* g_slots = nullptr;                 // allocated once at install
std::atomic<std::size_t> g_hi{0};         // slots [0, g_hi) may be in use
std::atomic<uint64_t> g_recovered{0};
std::atomic<uint64_t> g_unguarded{0};
std::atomic<std::size_t> g_guarded{0};
std::atomic<bool> g_installed{false};
std::mutex g_mu;                          // add/remove (never the handler)
std::vector<std::size_t>* g_free = nullptr;  // slots below g_hi freed by remove (under g_mu)

void on_sigbus(int sig, siginfo_t* si, void*) {
  const auto a = reinterpret_cast<uintptr_t>(si->si_addr);
  const std::size_t hi = g_hi.load(std::memory_order_acquire);
  for (std::size_t i = 0; g_slots != nullptr && i < hi; ++i) {
    const uintptr_t b = g_slots[i].begin.load(std::memory_order_acquire);
    if (b == 0 || a < b || a >= g_slots[i].end.load(std::memory_order_relaxed)) continue;
    const uintptr_t page = g_slots[i].page.load(std::memory_order_relaxed);
    const uintptr_t at = a & ~(page - 1);
    // The raw system call: nothing of libc's that could take a lock.
    const auto r = syscall(SYS_mmap, at, page, PROT_READ | PROT_WRITE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (r == static_cast<long>(at)) {
      g_recovered.fetch_add(1, std::memory_order_relaxed);
      return;  // the access is made again, on the new page
    }
    break;
  }
  // Not ours (or no memory to mend it): the default action, as if never caught.
  signal(sig, SIG_DFL);
}

}  // namespace

void MemoryGuard::install() noexcept {
  std::lock_guard lk(g_mu);
  if (g_installed.load(std::memory_order_relaxed)) return;
  g_slots = new (std::nothrow) Slot[kSlots];
  g_free = new (std::nothrow) std::vector<std::size_t>();
  if (g_slots == nullptr || g_free == nullptr) return;
  struct sigaction sa {};
  sa.sa_sigaction = on_sigbus;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGBUS, &sa, nullptr) == 0) g_installed.store(true, std::memory_order_release);
}

bool MemoryGuard::installed() noexcept { return g_installed.load(std::memory_order_acquire); }

bool MemoryGuard::add(const void* addr, std::size_t len, std::size_t page) noexcept {
  if (!installed() || addr == nullptr || len == 0) return false;
  std::lock_guard lk(g_mu);
  std::size_t i = g_hi.load(std::memory_order_relaxed);
  if (!g_free->empty()) {
    i = g_free->back();
    g_free->pop_back();
  } else if (i == kSlots) {
    g_unguarded.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  const auto b = reinterpret_cast<uintptr_t>(addr);
  g_slots[i].end.store(b + len, std::memory_order_relaxed);
  g_slots[i].page.store(page ? page : 4096, std::memory_order_relaxed);
  g_slots[i].begin.store(b, std::memory_order_release);
  if (i == g_hi.load(std::memory_order_relaxed)) g_hi.store(i + 1, std::memory_order_release);
  g_guarded.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void MemoryGuard::remove(const void* addr) noexcept {
  if (!installed()) return;
  std::lock_guard lk(g_mu);
  const auto b = reinterpret_cast<uintptr_t>(addr);
  const std::size_t hi = g_hi.load(std::memory_order_relaxed);
  for (std::size_t i = hi; i-- > 0;) {  // the latest mapped are the likeliest to go
    if (g_slots[i].begin.load(std::memory_order_relaxed) != b) continue;
    g_slots[i].begin.store(0, std::memory_order_release);
    try {
      g_free->push_back(i);
    } catch (...) {  // no memory for the list: the slot stays unused
    }
    g_guarded.fetch_sub(1, std::memory_order_relaxed);
    return;
  }
}

uint64_t MemoryGuard::recovered() noexcept { return g_recovered.load(std::memory_order_relaxed); }
std::size_t MemoryGuard::guarded() noexcept { return g_guarded.load(std::memory_order_relaxed); }
uint64_t MemoryGuard::unguarded() noexcept { return g_unguarded.load(std::memory_order_relaxed); }

}  // namespace tandem::rnic::host
