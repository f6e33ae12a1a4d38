// The verbs unit tests' one device: a record for the in-process server's
// socket in a devices directory next to it, TANDEM_DEVICES pointing there,
// and that device opened through the drop-in library.
#pragma once

#include <catch2/catch.hpp>
#include <infiniband/verbs.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "../host/server_thread.h"
#include "rnic/host/device_registry.h"

namespace tandem::rnic::host::test {

struct OneDevice {
  ibv_device** list = nullptr;
  ibv_context* ctx = nullptr;

  OneDevice(const ServerThread& st, const char* name, uint32_t vnic_ip) {
    const std::string dir = std::filesystem::path(st.path).parent_path() / "devices";
    DeviceRecord d;
    d.name = name;
    d.socket = st.path;
    d.vnic_ip = vnic_ip;
    d.pid = getpid();
    REQUIRE(write_device(dir, d).empty());
    setenv("TANDEM_DEVICES", dir.c_str(), 1);
    int n = 0;
    list = ibv_get_device_list(&n);
    REQUIRE(n == 1);
    ctx = ibv_open_device(list[0]);
    REQUIRE(ctx != nullptr);
  }
  // Closes what is still open (a test may close the device itself and null ctx).
  ~OneDevice() {
    if (ctx) ibv_close_device(ctx);
    if (list) ibv_free_device_list(list);
    unsetenv("TANDEM_DEVICES");
  }
  OneDevice(const OneDevice&) = delete;
  OneDevice& operator=(const OneDevice&) = delete;
};

}  // namespace tandem::rnic::host::test
