// What level-1 events mean for the level-2 tables the agent has installed:
// a punted miss becomes a change set installing the resolved entries; a
// removed mapping or vNIC becomes change sets deleting every installed entry
// derived from it, so an RNIC never keeps forwarding on state the agent has
// withdrawn (the next packet punts and is resolved afresh). Everything needed
// is in the entries themselves (egress: vNIC id, VNI, destination overlay IP;
// ingress: local vNIC, VNI, source overlay IP), so a restarted agent needs no
// extra index: it scans the shadows it reloads.
//
// vNIC entries (protocol v3): each vNIC of level 1 is also a level-2 entry on
// its own RNIC, so the worker learns its vNICs from the agent. They are put
// when the vNIC is added, deleted with everything else the vNIC withdraws,
// and reconciled against level 1 whenever a channel (re)negotiates v3.
#pragma once

#include <functional>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/channel/messages.h"
#include "dpu/model/level1_state.h"
#include "dpu/txn/change_set.h"
#include "dpu/txn/level2_shadow.h"
#include "dpu/txn/pending_punts.h"

namespace tandem::dpu {

// An egress miss (vNIC, dst overlay IP) resolved against level 1: the change
// set (egress + matching ingress entry) for *rnic, or nullopt with the
// reason in *why (unknown vNIC, no mapping, denied by isolation, or an
// ingress-side miss, which the agent cannot attribute and answers with kNoMapping).
//
// The ingress key (underlay src, VNI) cannot tell apart two overlay addresses
// of one tenant behind the same underlay host, nor two local vNICs talking to
// it. If `installed` (that RNIC's shadow) already maps the key to another
// (sender, receiver) pair, the ambiguous entry is deleted instead of
// overwritten, so no packet is ever attributed to the wrong sender or handed
// to the wrong vNIC; such peers need QPN-keyed ingress entries. `pending`
// (that RNIC's resolutions not committed yet) is checked first: two misses
// resolved before either commits would otherwise both see the key free and
// the second would overwrite the first.
std::optional<ChangeSet> change_set_for_miss(const Level1State& state, const common::EntryKey& missed,
                                             uint64_t tag, std::string* rnic, ResolveStatus* why,
                                             const Level2Shadow* installed = nullptr,
                                             const PendingPunts* pending = nullptr);

// Takes the cache misses resolving these punts will take, all at once, a
// chunk of 32 at a time: each egress miss's level-1 mapping slot (own tenant)
// and, with `installed`, its egress and ingress shadow slots (loaded, not
// prefetched: prefetched, they still missed in change_set_for_miss and the
// txn's digest). On large tables each is a cache and TLB miss that
// change_set_for_miss would otherwise wait for one punt after another.
// Reads only; changes nothing.
void warm_for_punts(const Level1State& state, const Level2Shadow* installed,
                    const std::vector<common::PuntMsg>& punts) noexcept;

// A resolution of `missed` that put `puts` on `rnic` has committed; level 1
// may have changed while it was queued or in flight (its mapping deleted or
// replaced, its vNIC removed), after the withdrawal for that change was
// computed from the committed shadow alone. If resolving `missed` now would
// not put exactly `puts` on `rnic`, the DELs of those of them `installed`
// still holds unchanged (empty otherwise): the RNIC must not keep an entry
// level 1 no longer backs; the next packet punts and is resolved afresh.
ChangeSet revalidate_resolution(const Level1State& state, const Level2Shadow& installed, const std::string& rnic,
                                const common::EntryKey& missed, const std::vector<common::Level2Entry>& puts);

// Whether a resolution computed when level 1 was at generation `resolved_at`
// needs revalidate_resolution when it commits. Not if level 1 has not changed
// since: resolve() reads level 1 alone, so resolving now gives the same
// entries for the same RNIC and the resolution stands; skipping saves a
// second level-1 lookup (a cache miss on a large table) per new flow.
// resolved_at 0 (unknown) always needs it.
inline bool needs_revalidation(const Level1State& state, uint64_t resolved_at) noexcept {
  return resolved_at == 0 || state.generation() != resolved_at;
}

// DELs for every entry in `installed` derived from mapping m.
ChangeSet deletions_for_mapping(const Level2Shadow& installed, const MappingKey& m);
// DELs for every flow entry `installed` holds that level 1 no longer gives:
// an egress entry whose resolution is gone or different, an ingress entry
// whose local vNIC or mapping (vni, source address -> underlay source) is
// gone. For a level 1 that changed while the RNICs did not hear of it (an
// agent killed between its SQLite commit and the change set): the RNIC
// punts again for a flow that is still wanted. vNIC entries are
// changes_for_vnics'.
ChangeSet stale_entries(const Level1State& state, const Level2Shadow& installed);
// The same for many mappings in one pass over `installed` (a fleet batch of
// thousands would otherwise scan the whole shadow once per mapping).
ChangeSet deletions_for_mappings(const Level2Shadow& installed, const std::vector<MappingKey>& keys);
// Mappings `keys` were replaced in level 1 (new underlay IP, next-hop MAC or
// RNIC): every (vNIC, address) pair `installed` on `rnic` holds entries for is
// resolved afresh, as one change set: the egress entry is overwritten in
// place (PUT), an ingress entry whose key moved with the underlay IP is PUT
// at the new key and DELeted at the old one, and what no longer resolves to
// this RNIC is DELeted. One change set is one transaction, so the RNIC never
// sees a version without the entry. Ambiguous ingress keys follow
// change_set_for_miss (deleted, never overwritten).
ChangeSet changes_for_replaced_mappings(const Level1State& state, const Level2Shadow& installed,
                                        const std::string& rnic, const std::vector<MappingKey>& keys);
// DELs for every entry in `installed` that belongs to the vNIC (id) or is
// derived from its own address (vni, overlay_ip): what removing it withdraws,
// its own vNIC entry included, in one change set (one transaction).
ChangeSet deletions_for_vnic(const Level2Shadow& installed, uint32_t vnic, uint32_t vni, uint32_t overlay_ip);

// The vNIC entry (v3) level 1 means for vNIC v, installed on v.rnic.
common::Level2Entry vnic_entry(const Level1State& state, const Vnic& v, bool with_pkey = true) noexcept;
// What makes the vNIC entries `installed` on `rnic` equal level 1's vNICs
// bound to that RNIC: PUT those missing or different, DEL the others (vNICs
// removed or unknown). Empty when they agree. For an agent that starts with a
// shadow from an older agent, or a channel that moves to v3.
// `with_pkey(v)`: whether v's entry carries its tenant's partition key
// (empty: always).
ChangeSet changes_for_vnics(const Level1State& state, const Level2Shadow& installed, const std::string& rnic,
                            const std::function<bool(const Vnic&)>& with_pkey = {});

}  // namespace tandem::dpu
