// A bulk mapping import done in bounded steps, so the agent loop that drives
// it keeps serving its RNICs (heartbeats, punts) between them. All or nothing,
// as one import always was: every row is parsed and validated against the
// level-1 state (and the other rows) first, then all are written in one SQLite
// transaction, then applied to level 1 once that is durable. A failure before
// the COMMIT leaves disk and memory as they were.
//
//   parse+validate (budget lines a step) -> sort by key (merge sort, 8 x
//   budget rows a step; a key twice in the file is refused) -> INSERT in key
//   order (budget/4 rows a step, one open transaction) -> COMMIT -> WAL
//   checkpoint -> make room in level 1 -> apply to level 1 (budget rows a step)
//
// Level 1 must not change under a running import (the control API refuses or
// holds other changes meanwhile). Rows applied so far are visible between the
// apply steps; each is on disk already.
#pragma once

#include <future>
#include <cstddef>
#include <cstdint>
#include <istream>
#include <string>
#include <vector>

#include "dpu/model/level1_state.h"
#include "dpu/store/store.h"

namespace tandem::dpu {

class MappingImport {
 public:
  // `in` must outlive the import. With `replace`, a key level 1 already maps
  // is replaced (an add otherwise); without, it is refused as a duplicate.
  MappingImport(Store& store, Level1State& state, std::istream& in, ImportFormat fmt, bool replace);
  ~MappingImport();
  MappingImport(const MappingImport&) = delete;
  MappingImport& operator=(const MappingImport&) = delete;

  // Does about `budget` rows of work; true once finished (then result()).
  // A store failure throws StoreError, after rolling the import back.
  bool step(std::size_t budget);
  bool done() const noexcept { return phase_ == Phase::kDone; }
  const ImportResult& result() const noexcept { return result_; }
  std::size_t lines_read() const noexcept { return lineno_; }
  const char* phase_name() const noexcept;

 private:
  enum class Phase : uint8_t {
    kParse, kSortRuns, kMerge, kDuplicates, kWrite, kCommit, kCheckpoint, kReserve, kApply, kDone
  };
  struct Row {
    uint32_t vni = 0, overlay_ip = 0, underlay_ip = 0;
    common::MacAddr mac{};
    uint16_t rnic = 0;     // index into rnics_
    uint32_t line = 0;     // top bit: the key was mapped before (a replace)
  };
  static constexpr uint32_t kExisted = 0x80000000u;

  bool parse_line(const std::string& line);  // false: result_ holds the error
  void fail(ModelErrc code, const std::string& why, uint32_t line);
  std::size_t merge_some(std::size_t budget);
  bool less(uint32_t a, uint32_t b) const noexcept;
  AddMapping change(const Row& r) const;

  Store& store_;
  Level1State& state_;
  std::istream& in_;
  ImportFormat fmt_;
  bool replace_;
  Phase phase_ = Phase::kParse;
  ImportResult result_;
  std::size_t lineno_ = 0;
  std::vector<Row> rows_;
  std::vector<std::string> rnics_;
  std::vector<uint32_t> idx_, tmp_;  // row order being sorted
  std::size_t pos_ = 0;              // cursor of the current phase
  // Bottom-up merge: runs of width_ in idx_ merged pairwise into tmp_.
  std::size_t width_ = 0, lo_ = 0, mid_ = 0, hi_ = 0, i_ = 0, j_ = 0, k_ = 0;
  bool merging_ = false;
  bool txn_open_ = false;
  // kReserve: level 1's mapping table with room for the import, built on
  // another thread while the agent goes on (it only reads level 1 meanwhile:
  // other changes wait for the import), taken when ready if level 1 is still
  // at the generation it was built from.
  std::future<MappingTable> grown_;
  uint64_t grown_from_ = 0;
};

}  // namespace tandem::dpu
