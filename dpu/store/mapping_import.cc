// Bulk mapping import in bounded steps.
#include "dpu/store/mapping_import.h"

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <string_view>

#include "dpu/model/address.h"

namespace tandem::dpu {

namespace {

constexpr std::size_t kRun = 4096;  // rows std::sort'ed at once before the merge passes

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

bool parse_u32(std::string_view s, uint32_t& out) {
  if (s.empty() || s.size() > 10) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  if (v > 0xFFFFFFFFu) return false;
  out = static_cast<uint32_t>(v);
  return true;
}

}  // namespace

MappingImport::MappingImport(Store& store, Level1State& state, std::istream& in, ImportFormat fmt, bool replace)
    : store_(store), state_(state), in_(in), fmt_(fmt), replace_(replace) {}

MappingImport::~MappingImport() {
  if (txn_open_) store_.bulk_rollback();
  if (phase_ == Phase::kCheckpoint) store_.bulk_checkpoint();  // committed: restore the store's settings
}

const char* MappingImport::phase_name() const noexcept {
  switch (phase_) {
    case Phase::kParse: return "parse";
    case Phase::kSortRuns:
    case Phase::kMerge: return "sort";
    case Phase::kDuplicates: return "duplicates";
    case Phase::kWrite: return "write";
    case Phase::kCommit: return "commit";
    case Phase::kCheckpoint: return "checkpoint";
    case Phase::kReserve: return "reserve";
    case Phase::kApply: return "apply";
    case Phase::kDone: return "done";
  }
  return "?";
}

void MappingImport::fail(ModelErrc code, const std::string& why, uint32_t line) {
  result_.result = {code, "line " + std::to_string(line) + ": " + why};
  rows_ = {};
  idx_ = {};
  tmp_ = {};
  phase_ = Phase::kDone;
}

AddMapping MappingImport::change(const Row& r) const {
  return AddMapping{r.vni, r.overlay_ip, r.underlay_ip, r.mac, rnics_[r.rnic], replace_};
}

bool MappingImport::less(uint32_t a, uint32_t b) const noexcept {
  const Row& x = rows_[a];
  const Row& y = rows_[b];
  return x.vni != y.vni ? x.vni < y.vni : x.overlay_ip < y.overlay_ip;
}

bool MappingImport::parse_line(const std::string& line) {
  auto lineno = static_cast<uint32_t>(lineno_);
  std::string_view l = trim(line);
  if (l.empty() || l[0] == '#') return true;
  Row row;
  row.line = lineno;
  std::string_view fields[5];
  std::string mac_s, oip_s, uip_s, rnic_s;
  if (fmt_ == ImportFormat::kCsv) {
    if (lineno == 1 && l.substr(0, 3) == "vni") return true;  // header
    std::size_t n = 0;
    for (;;) {
      std::size_t comma = l.find(',');
      if (n < 5) fields[n] = trim(l.substr(0, comma));
      ++n;
      if (comma == std::string_view::npos) break;
      l.remove_prefix(comma + 1);
    }
    if (n != 5) {
      fail(ModelErrc::kBadValue, "expected 5 fields: vni,overlay_ip,underlay_ip,next_hop_mac,rnic", lineno);
      return false;
    }
    if (!parse_u32(fields[0], row.vni)) {
      fail(ModelErrc::kBadValue, "bad VNI '" + std::string(fields[0]) + "'", lineno);
      return false;
    }
  } else {
    nlohmann::json j = nlohmann::json::parse(l.begin(), l.end(), nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("vni") || !j["vni"].is_number_unsigned() ||
        !j.value("overlay_ip", nlohmann::json()).is_string() ||
        !j.value("underlay_ip", nlohmann::json()).is_string() ||
        !j.value("next_hop_mac", nlohmann::json()).is_string() || !j.value("rnic", nlohmann::json()).is_string()) {
      fail(ModelErrc::kBadValue,
           "expected {\"vni\":N,\"overlay_ip\":..,\"underlay_ip\":..,\"next_hop_mac\":..,\"rnic\":..}", lineno);
      return false;
    }
    uint64_t vni = j["vni"].get<uint64_t>();
    row.vni = vni > 0xFFFFFFFFu ? 0xFFFFFFFFu : static_cast<uint32_t>(vni);
    oip_s = j["overlay_ip"].get<std::string>();
    uip_s = j["underlay_ip"].get<std::string>();
    mac_s = j["next_hop_mac"].get<std::string>();
    rnic_s = j["rnic"].get<std::string>();
    fields[1] = oip_s;
    fields[2] = uip_s;
    fields[3] = mac_s;
    fields[4] = rnic_s;
  }
  auto oip = parse_ipv4(fields[1]);
  auto uip = parse_ipv4(fields[2]);
  auto mac = parse_mac(fields[3]);
  if (!oip || !uip || !mac) {
    fail(ModelErrc::kBadAddress,
         "cannot parse address '" + std::string(!oip ? fields[1] : !uip ? fields[2] : fields[3]) + "'", lineno);
    return false;
  }
  row.overlay_ip = *oip;
  row.underlay_ip = *uip;
  row.mac = *mac;
  auto it = std::find(rnics_.begin(), rnics_.end(), fields[4]);
  if (it == rnics_.end()) {
    if (rnics_.size() >= 0xFFFF) {
      fail(ModelErrc::kBadValue, "too many distinct RNIC names", lineno);
      return false;
    }
    rnics_.emplace_back(fields[4]);
    it = rnics_.end() - 1;
  }
  row.rnic = static_cast<uint16_t>(it - rnics_.begin());
  // Validated against level 1 as it is; duplicates within the file are found
  // once the rows are sorted.
  ModelResult r = state_.check(change(row));
  if (!r.ok()) {
    fail(r.code, r.message, lineno);
    return false;
  }
  if (state_.mapping(row.vni, row.overlay_ip)) row.line |= kExisted;
  rows_.push_back(row);
  return true;
}

// Merges pairs of sorted runs of width_ from idx_ into tmp_, resumably.
std::size_t MappingImport::merge_some(std::size_t budget) {
  std::size_t n = idx_.size(), work = 0;
  while (work < budget) {
    if (!merging_) {
      if (lo_ >= n) {  // pass done
        idx_.swap(tmp_);
        width_ *= 2;
        lo_ = 0;
        if (width_ >= n) return work;
      }
      mid_ = std::min(lo_ + width_, n);
      hi_ = std::min(lo_ + 2 * width_, n);
      i_ = lo_;
      j_ = mid_;
      k_ = lo_;
      merging_ = true;
    }
    std::size_t stop = std::min(hi_ - k_, budget - work);
    for (std::size_t s = 0; s < stop; ++s) {
      if (j_ >= hi_ || (i_ < mid_ && !less(idx_[j_], idx_[i_])))
        tmp_[k_++] = idx_[i_++];
      else
        tmp_[k_++] = idx_[j_++];
    }
    work += stop;
    if (k_ == hi_) {
      merging_ = false;
      lo_ = hi_;
    }
  }
  return work;
}

bool MappingImport::step(std::size_t budget) {
  budget = std::max<std::size_t>(budget, 1);
  auto upto = [&](std::size_t n, std::size_t b) { return n - std::min(pos_, n) <= b ? n : pos_ + b; };
  try {
    switch (phase_) {
      case Phase::kParse: {
        std::string line;
        for (std::size_t n = 0; n < budget; ++n) {
          if (!std::getline(in_, line)) {
            idx_.resize(rows_.size());
            for (uint32_t i = 0; i < idx_.size(); ++i) idx_[i] = i;
            tmp_.resize(idx_.size());
            pos_ = 0;
            phase_ = Phase::kSortRuns;
            break;
          }
          ++lineno_;
          if (!parse_line(line)) break;
        }
        break;
      }
      case Phase::kSortRuns: {
        std::size_t end = upto(idx_.size(), std::max(budget, kRun));
        for (; pos_ < end; pos_ += kRun) {
          auto b = idx_.begin() + static_cast<std::ptrdiff_t>(pos_);
          auto e = idx_.begin() + static_cast<std::ptrdiff_t>(std::min(pos_ + kRun, idx_.size()));
          std::sort(b, e, [this](uint32_t a, uint32_t c) { return less(a, c); });
        }
        if (pos_ >= idx_.size()) {
          width_ = kRun;
          lo_ = 0;
          merging_ = false;
          phase_ = width_ >= idx_.size() ? Phase::kDuplicates : Phase::kMerge;
          pos_ = 1;
        }
        break;
      }
      case Phase::kMerge:
        merge_some(budget > SIZE_MAX / 8 ? budget : budget * 8);  // an index move is cheap next to a parsed line
        if (width_ >= idx_.size()) {
          tmp_ = {};
          pos_ = 1;
          phase_ = Phase::kDuplicates;
        }
        break;
      case Phase::kDuplicates: {
        std::size_t end = upto(idx_.size(), budget);
        for (; pos_ < end; ++pos_) {
          const Row& a = rows_[idx_[pos_ - 1]];
          const Row& b = rows_[idx_[pos_]];
          if (a.vni == b.vni && a.overlay_ip == b.overlay_ip) {
            uint32_t la = a.line & ~kExisted, lb = b.line & ~kExisted;
            fail(ModelErrc::kDuplicate,
                 format_ipv4(b.overlay_ip) + " in tenant " + std::to_string(b.vni) + " is in the file twice (also line " +
                     std::to_string(std::min(la, lb)) + ")",
                 std::max(la, lb));
            return true;
          }
        }
        if (pos_ >= idx_.size()) {
          pos_ = 0;
          phase_ = Phase::kWrite;
        }
        break;
      }
      case Phase::kWrite: {
        // Primary-key order: B-tree appends instead of random leaf updates,
        // which keeps a large import from thrashing the page cache.
        if (!txn_open_) {
          store_.bulk_begin();
          txn_open_ = true;
        }
        std::size_t end = upto(idx_.size(), std::max<std::size_t>(budget / 4, 1));  // ~2 us an INSERT
        for (; pos_ < end; ++pos_) store_.bulk_put_mapping(change(rows_[idx_[pos_]]));
        if (pos_ >= idx_.size()) phase_ = Phase::kCommit;
        break;
      }
      case Phase::kCommit:
        if (txn_open_) store_.bulk_commit();
        txn_open_ = false;
        phase_ = Phase::kCheckpoint;
        break;
      case Phase::kCheckpoint:
        store_.bulk_checkpoint();  // durable already: if it cannot run now, a later commit does it
        phase_ = Phase::kReserve;
        break;
      case Phase::kReserve: {
        const std::size_t want = state_.mappings().size() + rows_.size();
        // One step when nothing grows, or when the caller wants it all now.
        if (budget == SIZE_MAX || MappingTable::grown_slots(want) <= state_.mappings().slots()) {
          state_.reserve_mappings(want);
        } else if (!grown_.valid()) {
          grown_from_ = state_.generation();
          const MappingTable* from = &state_.mappings();
          grown_ = std::async(std::launch::async, [from, want] { return from->grown(want); });
          break;
        } else if (grown_.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
          break;
        } else {
          MappingTable t = grown_.get();
          if (state_.generation() != grown_from_ || !state_.adopt_grown_mappings(t))
            state_.reserve_mappings(want);  // level 1 changed meanwhile: grow in place
        }
        pos_ = 0;
        phase_ = Phase::kApply;
        break;
      }
      case Phase::kApply: {
        std::size_t end = upto(idx_.size(), budget);
        for (; pos_ < end; ++pos_) {
          const Row& r = rows_[idx_[pos_]];
          ModelResult m = state_.apply(change(r));
          if (!m.ok())  // level 1 changed under the import: disk has the row, memory not
            throw StoreError("store: imported row of line " + std::to_string(r.line & ~kExisted) +
                             " no longer applies: " + m.message);
          if (r.line & kExisted) result_.replaced.push_back(MappingKey{r.vni, r.overlay_ip});
        }
        if (pos_ >= idx_.size()) {
          result_.imported = rows_.size();
          rows_ = {};
          idx_ = {};
          phase_ = Phase::kDone;
        }
        break;
      }
      case Phase::kDone:
        break;
    }
  } catch (...) {
    if (txn_open_) store_.bulk_rollback();
    txn_open_ = false;
    rows_ = {};
    idx_ = {};
    tmp_ = {};
    phase_ = Phase::kDone;
    throw;
  }
  return phase_ == Phase::kDone;
}

}  // namespace tandem::dpu
