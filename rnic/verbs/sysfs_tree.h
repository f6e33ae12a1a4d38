// A sysfs tree for the registered Tandem devices, for the stock binaries that
// read /sys/class/infiniband themselves instead of asking libibverbs (UCX's GID
// type and NUMA lookups, NCCL's GID selection, perftest's NUMA check). It holds
// what a soft RoCE device (rxe) shows there, from the registry records; what a
// kernel device has and Tandem does not (a PCI function, a netdev behind the
// GID, /dev/infiniband/uverbsN, counters) is absent, as it is for rxe.
//
// write_sysfs_tree(dir, devs) writes, for the i-th device D:
//   dir/infiniband/D/{node_type,node_guid,sys_image_guid,node_desc}
//   dir/infiniband/D/ports/1/{state,phys_state,link_layer,rate,lid,sm_lid,
//       lid_mask_count,sm_sl,cap_mask,gids/0,gid_attrs/types/0,pkeys/0}
//   dir/infiniband_verbs/abi_version, dir/infiniband_verbs/uverbs<i>/{ibdev,abi_version}
//   with netdevs, also dir/infiniband/D/device/net/tandem<i>/address (vnic_netdevs.h)
// enter_sysfs_namespace(devs) puts such a tree over /sys/class in a private
// mount namespace of the calling process (the host's /sys is untouched), and
// /dev/infiniband/uverbs<i> (UCX lists only devices whose node it may open);
// with netdevs, in a private network namespace holding those taps too.
#pragma once

#include <string>
#include <vector>

#include "rnic/host/device_registry.h"

namespace tandem::rnic::verbs {

// "" or what failed.
std::string write_sysfs_tree(const std::string& dir, const std::vector<host::DeviceRecord>& devs,
                             bool netdevs = false);

// New mount namespace (and, when not root, a user namespace mapping only the
// caller's uid and gid) in which /sys/class and /dev hold every entry they had
// plus the tree and the uverbs nodes. "" or what failed.
std::string enter_sysfs_namespace(const std::vector<host::DeviceRecord>& devs, bool netdevs = false);

// The sysfs spellings, shared with the libibverbs device list.
std::string sysfs_guid(const host::DeviceRecord& d);  // "0200:00ff:fe00:0101"
std::string sysfs_gid(uint32_t ipv4);                 // "0000:...:ffff:c0a8:0701"

}  // namespace tandem::rnic::verbs
