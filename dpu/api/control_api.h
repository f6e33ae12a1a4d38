// The agent's control API: one JSON request in, one JSON reply out (what
// tandemctl sends over the control socket). Validates every request fully
// before anything changes (unknown command, missing/ill-typed field, bad
// address: {"ok":false,"error":"..."} and nothing modified), then runs the
// change through check -> persist (SQLite, durable) -> apply, so an "ok" reply
// means "on disk". Sans-I/O: the agent owns the socket and the RNIC channels,
// reached through AgentHooks.
//
// A mapping import can be millions of rows: begin_line() starts it as a job
// that step() advances a bounded number of rows per agent loop iteration, and
// step() hands back its reply when the whole import is durable and applied.
// Meanwhile read-only requests are answered and changes are held back (kBusy:
// the socket hands them in again later), so level 1 stays what the import was
// validated against.
#pragma once
#include <cstdint>
#include <istream>
#include <streambuf>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>
#include "dpu/model/change.h"
#include "dpu/model/level1_state.h"
#include "dpu/store/mapping_import.h"
#include "dpu/store/store.h"

namespace tandem::dpu {

// What the API needs from the agent around it (RNIC channels and their tables).
class AgentHooks {
 public:
  virtual ~AgentHooks() = default;
  // After a change was persisted and applied; `removed` is the vNIC a
  // RemoveVnic took away (its address is needed to withdraw level-2 entries).
  virtual void changed(const Change& c, const std::optional<Vnic>& removed) = 0;
  // After an import (persisted and applied) replaced these mappings: what the
  // RNICs hold derived from them must follow (one call for the whole import).
  virtual void mappings_replaced(const std::vector<MappingKey>& keys) = 0;
  // Every RNIC the agent has a channel for: name, state, versions, BAR counters.
  virtual nlohmann::json rnics() const = 0;
  // The installed level-2 table of one RNIC (the agent's committed shadow), or
  // null if the agent has no channel of that name.
  virtual nlohmann::json level2(const std::string& rnic) const = 0;
  // `tandemctl trace start|stop`: install the trace rule (common/trace text
  // form; "off" stops it, "" asks) in the agent's own trace ring, whose
  // set-up records (resolutions, commits) join the workers'. Returns the
  // ring's state, or null if this agent has no ring. Throws
  // std::invalid_argument for a bad rule.
  virtual nlohmann::json trace(const std::string& rule) {
    (void)rule;
    return nullptr;
  }
};

// Who sent a request line (the control socket knows from the peer's
// credentials). A mapping import reads only what its caller could read:
// the file the caller opened and passed along (`fd`, taken by the API when
// the request says "fd": true), or a path, which the agent opens itself only
// for a caller who could open anything it can (root, or its own user).
struct Caller {
  bool may_open_paths = true;
  int fd = -1;  // a descriptor that came with the request; set to -1 when the API takes it
};

// What begin_line() did with a request line.
struct ControlReply {
  enum class Kind : uint8_t {
    kDone,     // `text` is the reply
    kStarted,  // a job: its reply comes from step()
    kBusy,     // a change while a job runs: hand the same line in again later
  };
  Kind kind = Kind::kDone;
  std::string text;
};

class ControlApi {
 public:
  // Rows of a job handled per step(): about a millisecond of work.
  static constexpr std::size_t kStepRows = 4096;

  ControlApi(Level1State& state, Store& store, AgentHooks* hooks = nullptr)
      : state_(state), store_(store), hooks_(hooks) {}
  ~ControlApi();
  // Never throws: malformed input becomes an error reply. Runs a mapping
  // import to completion (a caller with no loop to keep alive).
  nlohmann::json handle(const nlohmann::json& request);
  std::string handle_line(const std::string& line);  // one JSON text -> one line (no '\n')

  // For the agent loop: a mapping import becomes a job (kStarted); changes
  // while it runs are kBusy; everything else is answered at once.
  ControlReply begin_line(const std::string& line, Caller& caller);
  ControlReply begin_line(const std::string& line) {
    Caller trusted;
    return begin_line(line, trusted);
  }
  // Advances the job by kStepRows rows; its reply line once it has finished.
  std::optional<std::string> step();
  bool busy() const noexcept { return job_ != nullptr; }
  Store& store() noexcept { return store_; }
  // What the running job is doing ("parse", "sort", "write", "commit", "apply", ...).
  const char* job_phase() const noexcept { return job_ ? job_->import->phase_name() : "none"; }

 private:
  struct Job {
    std::unique_ptr<std::streambuf> buf;  // the caller's file, or one opened by path
    std::unique_ptr<std::istream> in;
    std::unique_ptr<MappingImport> import;
  };
  nlohmann::json accept(const Change& c);
  nlohmann::json dispatch(const std::string& cmd, const nlohmann::json& r);
  std::unique_ptr<Job> start_import(const nlohmann::json& r, Caller& caller);
  nlohmann::json finish_import(Job& job);
  std::optional<nlohmann::json> step_job(std::size_t rows);
  nlohmann::json list_mappings(const nlohmann::json& r) const;
  nlohmann::json table_dump(const nlohmann::json& r) const;

  Level1State& state_;
  Store& store_;
  AgentHooks* hooks_;
  std::unique_ptr<Job> job_;
};

// True for requests that change level 1 (held back while an import runs).
bool is_change_command(const std::string& cmd);

// Request error: the reply's message (thrown only inside ControlApi::handle).
class RequestError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// JSON forms shared by the API and tandemctl.
nlohmann::json tenant_json(const Tenant& t);
nlohmann::json rnic_json(const Rnic& r);
nlohmann::json vnic_json(const Vnic& v);
nlohmann::json level2_entry_json(const common::Level2Entry& e);

}  // namespace tandem::dpu
