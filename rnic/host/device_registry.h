// Where applications find Tandem devices: each worker registers one device per
// vNIC (as an SR-IOV VF is one device per tenant) as a small text file in a run
// directory, and the drop-in libibverbs (rnic/verbs) lists them. A device names
// the worker's host socket and the vNIC it binds to; the worker still decides
// what an application may reach (the vNIC's tenant routes only).
//
// Directory: $TANDEM_DEVICES, else /run/tandem. File <dir>/<name>.dev, lines
// "key value": name, socket, vnic_ip, vnic_id, mac, mtu, max_qps, pid. A file
// whose pid is gone is stale (a worker that crashed) and is skipped.
//
// Applications trust what they read here (they hand their memory to the named
// socket), so a record is used only if it is a regular file (no symlink)
// owned by root, by the reader's real uid or by the directory's owner; its
// name is a plain device name (letters, digits, '_', '-', '.', not starting
// with '.': it becomes a path component in sysfs trees) and its socket an
// absolute path. owner_uid (the file's owner, i.e. the worker that wrote it)
// is what the worker's socket must belong to (verbs.h DeviceAttr::worker_uid).
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
  uint32_t owner_uid = 0;  // read_devices: the record file's owner (not part of the text)
};

// A name safe as one path component: 1..63 of [A-Za-z0-9_.-], not starting with '.'.
bool valid_device_name(const std::string& name);

// $TANDEM_DEVICES (read with secure_getenv: ignored in a set-uid program) or /run/tandem.
std::string device_dir();
// Writes <dir>/<name>.dev atomically (temp file + rename); "" or an error message
// (also for a name valid_device_name refuses).
std::string write_device(const std::string& dir, const DeviceRecord& d);
void remove_device(const std::string& dir, const std::string& name);
// Every live device in dir, sorted by name. Malformed files, and files owned by
// someone the reader does not trust (above), are skipped.
std::vector<DeviceRecord> read_devices(const std::string& dir);
// One record from its text; false if a required key is missing or bad (a name
// valid_device_name refuses, a socket path that is not absolute).
bool parse_device(const std::string& text, DeviceRecord& out);
std::string format_device(const DeviceRecord& d);

}  // namespace tandem::rnic::host
