// The agent's control API: one JSON request in, one JSON reply out (what
// tandemctl sends over the control socket). Validates every request fully
// before anything changes (unknown command, missing/ill-typed field, bad
// address: {"ok":false,"error":"..."} and nothing modified), then runs the
// change through check -> persist (SQLite, durable) -> apply, so an "ok" reply
// means "on disk". Sans-I/O: the agent owns the socket and the RNIC channels,
// reached through AgentHooks.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include "dpu/model/change.h"
#include "dpu/model/level1_state.h"
#include "dpu/store/store.h"

namespace tandem::dpu {

// What the API needs from the agent around it (RNIC channels and their tables).
class AgentHooks {
 public:
  virtual ~AgentHooks() = default;
  // After a change was persisted and applied; `removed` is the vNIC a
  // RemoveVnic took away (its address is needed to withdraw level-2 entries).
  virtual void changed(const Change& c, const std::optional<Vnic>& removed) = 0;
  // Every RNIC the agent has a channel for: name, state, versions, BAR counters.
  virtual nlohmann::json rnics() const = 0;
  // The installed level-2 table of one RNIC (the agent's committed shadow), or
  // null if the agent has no channel of that name.
  virtual nlohmann::json level2(const std::string& rnic) const = 0;
};

class ControlApi {
 public:
  ControlApi(Level1State& state, Store& store, AgentHooks* hooks = nullptr)
      : state_(state), store_(store), hooks_(hooks) {}
  // Never throws: malformed input becomes an error reply.
  nlohmann::json handle(const nlohmann::json& request);
  std::string handle_line(const std::string& line);  // one JSON text -> one line (no '\n')

 private:
  nlohmann::json accept(const Change& c);
  nlohmann::json dispatch(const std::string& cmd, const nlohmann::json& r);
  nlohmann::json import_mappings(const nlohmann::json& r);
  nlohmann::json list_mappings(const nlohmann::json& r) const;
  nlohmann::json table_dump(const nlohmann::json& r) const;

  Level1State& state_;
  Store& store_;
  AgentHooks* hooks_;
};

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
