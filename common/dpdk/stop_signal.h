// SIGINT/SIGTERM set a flag that every polling loop checks; the loop then
// returns and the process shuts its ports down cleanly.
#pragma once

namespace tandem::common::dpdk {

void install_stop_handlers() noexcept;
bool stop_requested() noexcept;
void request_stop() noexcept;

}  // namespace tandem::common::dpdk
