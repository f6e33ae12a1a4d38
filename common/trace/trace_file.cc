#include "common/trace/trace_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <stdexcept>

namespace tandem::common::trace {

RingFile RingFile::create(const std::string& path, uint64_t capacity, int64_t clock_offset_ns, const char* process) {
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
  ring_init(mem, capacity, clock_offset_ns, process);
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

int64_t monotonic_raw_offset(uint64_t now_ns) {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
  const int64_t raw = static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
  return raw - static_cast<int64_t>(now_ns);
}

}  // namespace tandem::common::trace
