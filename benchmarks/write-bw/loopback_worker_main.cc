// The benchmark's baseline worker: the loopback "RNIC" of tandem-perf's tests
// (tests/unit/perf/loopback_worker.h: WQEs executed by memcpy between the two
// applications' registered memory, no transport, no packets) as a process.
// usage: perf_loopback_worker SOCKET_PATH   (runs until SIGINT/SIGTERM)
#include <csignal>
#include <cstdio>
#include <exception>
#include <thread>

#include "tests/unit/perf/loopback_worker.h"

namespace {
volatile std::sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }
}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: perf_loopback_worker SOCKET_PATH\n");
    return 2;
  }
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  try {
    tandem::rnic::perf::test::LoopbackWorker w(argv[1]);
    std::printf("perf_loopback_worker: serving %s\n", argv[1]);
    std::fflush(stdout);
    while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::printf("perf_loopback_worker: %llu messages placed\n",
                static_cast<unsigned long long>(w.messages_placed()));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "perf_loopback_worker: %s\n", e.what());
    return 2;
  }
  return 0;
}
