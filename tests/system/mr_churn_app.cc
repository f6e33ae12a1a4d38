// A tenant application that registers one large buffer again and again
// (reg_mr, dereg_mr, pause) for a while, so a system test can watch what
// that does to the other QPs of the same worker. The buffer is never touched:
// what costs is the worker's side (mmap, DMA registration, unmapping).
// Prints one JSON object: registrations done, their times, huge pages or not.
// Exit 0 = ran, 2 = set-up failed.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "rnic/host/verbs.h"

using namespace tandem::rnic::host;

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: %s SOCKET MIB SECONDS PAUSE_MS huge|plain\n", argv[0]);
    return 2;
  }
  const std::size_t bytes = std::strtoull(argv[2], nullptr, 0) << 20;
  const double seconds = std::atof(argv[3]);
  const int pause_ms = std::atoi(argv[4]);
  DeviceAttr attr;
  attr.name = "mr-churn";
  attr.huge_buffers = std::strcmp(argv[5], "huge") == 0;
  attr.timeout_ms = 30000;  // a registration on a stalled worker is what we measure, not a failure
  Context* ctx = open_device(argv[1], attr);
  if (ctx == nullptr) {
    std::fprintf(stderr, "mr_churn_app: open_device %s failed: %s\n", argv[1], last_error());
    return 2;
  }
  Pd* pd = alloc_pd(ctx);
  void* buf = pd != nullptr ? alloc_buf(ctx, bytes) : nullptr;
  if (buf == nullptr) {
    std::fprintf(stderr, "mr_churn_app: %zu MiB buffer: %s\n", bytes >> 20, last_error());
    return 2;
  }
  const bool huge = buf_is_hugetlb(ctx, buf);
  uint64_t regs = 0;
  double reg_sum = 0, reg_max = 0, dereg_sum = 0, dereg_max = 0;
  const auto start = std::chrono::steady_clock::now();
  while (ms_since(start) < seconds * 1000) {
    auto t0 = std::chrono::steady_clock::now();
    Mr* mr = reg_mr(pd, buf, bytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    const double r = ms_since(t0);
    if (mr == nullptr) {
      std::fprintf(stderr, "mr_churn_app: reg_mr of %zu MiB failed: %s\n", bytes >> 20, last_error());
      return 2;
    }
    t0 = std::chrono::steady_clock::now();
    if (dereg_mr(mr) != 0) {
      std::fprintf(stderr, "mr_churn_app: dereg_mr failed: %s\n", last_error());
      return 2;
    }
    const double d = ms_since(t0);
    ++regs;
    reg_sum += r;
    dereg_sum += d;
    reg_max = r > reg_max ? r : reg_max;
    dereg_max = d > dereg_max ? d : dereg_max;
    std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
  }
  std::printf("{\"registrations\": %llu, \"mib\": %zu, \"hugetlb\": %s, \"reg_ms_avg\": %.3f, "
              "\"reg_ms_max\": %.3f, \"dereg_ms_avg\": %.3f, \"dereg_ms_max\": %.3f}\n",
              static_cast<unsigned long long>(regs), bytes >> 20, huge ? "true" : "false",
              regs ? reg_sum / regs : 0.0, reg_max, regs ? dereg_sum / regs : 0.0, dereg_max);
  free_buf(ctx, buf);
  dealloc_pd(pd);
  close_device(ctx);
  return 0;
}
