#include "common/trace/trace_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <x86intrin.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <stdexcept>

namespace tandem::common::trace {

namespace {
constexpr std::string_view kLcorePrefix = "tandem-trace.lcore", kLcoreSuffix = ".ring";
}  // namespace

std::string lcore_ring_name(uint32_t lcore) {
  return lcore == 0 ? kRingFileName : std::string(kLcorePrefix) + std::to_string(lcore) + std::string(kLcoreSuffix);
}

std::vector<std::string> process_rings(const std::string& first) {
  std::vector<std::string> out{first};
  const std::filesystem::path p(first);
  if (p.filename() != kRingFileName) return out;
  std::vector<std::pair<unsigned long, std::string>> lcores;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(p.parent_path(), ec)) {
    const std::string n = e.path().filename().string();
    if (n.size() <= kLcorePrefix.size() + kLcoreSuffix.size() || !n.starts_with(kLcorePrefix) || !n.ends_with(kLcoreSuffix))
      continue;
    const std::string k = n.substr(kLcorePrefix.size(), n.size() - kLcorePrefix.size() - kLcoreSuffix.size());
    if (!std::all_of(k.begin(), k.end(), [](char c) { return c >= '0' && c <= '9'; }) || k.size() > 4) continue;
    lcores.emplace_back(std::stoul(k), e.path().string());
  }
  std::sort(lcores.begin(), lcores.end());
  for (auto& [k, path] : lcores) out.push_back(std::move(path));
  return out;
}

RingFile RingFile::create(const std::string& path, uint64_t capacity, int64_t clock_offset_ns, const char* process,
                          uint64_t tsc_base, uint64_t tsc_mult) {
  if (capacity == 0 || (capacity & (capacity - 1)) != 0) throw std::invalid_argument("trace ring: capacity not a power of two");
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("trace ring " + path + ": " + std::strerror(errno));
  const std::size_t bytes = ring_bytes(capacity);
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int e = errno;
    ::close(fd);
    throw std::runtime_error("trace ring " + path + ": " + std::strerror(e));
  }
  void* mem = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (mem == MAP_FAILED) throw std::runtime_error("trace ring " + path + ": mmap: " + std::strerror(errno));
  ring_init(mem, capacity, clock_offset_ns, process, tsc_base, tsc_mult);
  return RingFile(mem, bytes);
}

RingFile RingFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("trace ring " + path + ": " + std::strerror(errno));
  struct stat st{};
  if (::fstat(fd, &st) != 0 || static_cast<std::size_t>(st.st_size) < sizeof(RingHeader)) {
    ::close(fd);
    throw std::runtime_error("trace ring " + path + ": too short");
  }
  const auto bytes = static_cast<std::size_t>(st.st_size);
  void* mem = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (mem == MAP_FAILED) throw std::runtime_error("trace ring " + path + ": mmap: " + std::strerror(errno));
  const auto* h = static_cast<const RingHeader*>(mem);
  if (h->magic != kRingMagic || h->record_size != sizeof(Record) || ring_bytes(h->capacity) > bytes) {
    ::munmap(mem, bytes);
    throw std::runtime_error("trace ring " + path + ": not a Tandem trace ring of this version");
  }
  return RingFile(mem, bytes);
}

RingFile::~RingFile() {
  if (mem_) ::munmap(mem_, bytes_);
}

namespace {
int64_t raw_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}
}  // namespace

int64_t monotonic_raw_offset(uint64_t now_ns) { return raw_ns() - static_cast<int64_t>(now_ns); }

TscCalibration calibrate_tsc(unsigned ms) {
  // Each anchor: the clock read between two TSC reads, the narrowest of a few.
  auto anchor = [](uint64_t& cyc, int64_t& ns) {
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < 16; ++i) {
      const uint64_t a = __rdtsc();
      const int64_t t = raw_ns();
      const uint64_t b = __rdtsc();
      if (b - a < best) {
        best = b - a;
        cyc = a + (b - a) / 2;
        ns = t;
      }
    }
  };
  TscCalibration c;
  uint64_t c0 = 0;
  int64_t t0 = 0;
  anchor(c0, t0);
  ::usleep(ms * 1000);
  anchor(c.anchor_cycles, c.anchor_ns);
  c.hz = static_cast<double>(c.anchor_cycles - c0) * 1e9 / static_cast<double>(c.anchor_ns - t0);
  return c;
}

}  // namespace tandem::common::trace
