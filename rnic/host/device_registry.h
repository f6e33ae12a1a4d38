// Where applications find Tandem devices: each worker registers one device per
// vNIC (as an SR-IOV VF is one device per tenant) as a small text file in a run
// directory, and the drop-in libibverbs (rnic/verbs) lists them. A device names
// the worker's host socket and the vNIC it binds to; the worker still decides
// what an application may reach (the vNIC's tenant routes only).
//
// Directory: $TANDEM_DEVICES, else /run/tandem. File <dir>/<name>.dev, lines
// "key value": name, socket, vnic_ip, vnic_id, mac, mtu, max_qps, pid. A file
// whose pid is gone is stale (a worker that crashed) and is skipped.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::rnic::host {

struct DeviceRecord {
  std::string name;     // e.g. tandem_A_v1 (at most 63 bytes: IBV_SYSFS_NAME_MAX)
  std::string socket;   // the worker's host socket, absolute
  uint32_t vnic_ip = 0; // overlay IPv4, host order: GID ::ffff:a.b.c.d
  uint32_t vnic_id = 0;
  uint8_t mac[6] = {};
  uint32_t mtu = 1024;  // path MTU bytes the worker runs
  uint32_t max_qps = 0;
  int pid = 0;          // the worker's
};

std::string device_dir();  // $TANDEM_DEVICES or /run/tandem
// Writes <dir>/<name>.dev atomically (temp file + rename); "" or an error message.
std::string write_device(const std::string& dir, const DeviceRecord& d);
void remove_device(const std::string& dir, const std::string& name);
// Every live device in dir, sorted by name. Malformed files are skipped.
std::vector<DeviceRecord> read_devices(const std::string& dir);
// One record from its text; false if a required key is missing or bad.
bool parse_device(const std::string& text, DeviceRecord& out);
std::string format_device(const DeviceRecord& d);

}  // namespace tandem::rnic::host
