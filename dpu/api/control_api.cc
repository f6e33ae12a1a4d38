#include "dpu/api/control_api.h"

#include <cstdio>
#include <ext/stdio_filebuf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <fstream>

#include "dpu/api/flow_view.h"
#include "dpu/model/address.h"

namespace tandem::dpu {
namespace {

using nlohmann::json;

const json& field(const json& r, const char* name) {
  auto it = r.find(name);
  if (it == r.end()) throw RequestError(std::string("missing field \"") + name + "\"");
  return *it;
}

uint64_t u64(const json& r, const char* name, uint64_t max) {
  const json& v = field(r, name);
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
    throw RequestError(std::string("field \"") + name + "\" must be a non-negative integer");
  uint64_t x = v.get<uint64_t>();
  if (x > max) throw RequestError(std::string("field \"") + name + "\" is larger than " + std::to_string(max));
  return x;
}

uint64_t u64_or(const json& r, const char* name, uint64_t max, uint64_t dflt) {
  return r.contains(name) ? u64(r, name, max) : dflt;
}

std::string str(const json& r, const char* name) {
  const json& v = field(r, name);
  if (!v.is_string()) throw RequestError(std::string("field \"") + name + "\" must be a string");
  return v.get<std::string>();
}

uint32_t ipv4(const json& r, const char* name) {
  std::string s = str(r, name);
  auto ip = parse_ipv4(s);
  if (!ip) throw RequestError(std::string("field \"") + name + "\": \"" + s + "\" is not an IPv4 address");
  return *ip;
}

MacAddr mac(const json& r, const char* name) {
  std::string s = str(r, name);
  auto m = parse_mac(s);
  if (!m) throw RequestError(std::string("field \"") + name + "\": \"" + s + "\" is not a MAC address");
  return *m;
}

bool flag(const json& r, const char* name) {
  auto it = r.find(name);
  if (it == r.end()) return false;
  if (!it->is_boolean()) throw RequestError(std::string("field \"") + name + "\" must be true or false");
  return it->get<bool>();
}

json ok(json j = json::object()) {
  j["ok"] = true;
  return j;
}

json error(const std::string& msg, const char* code = "bad_request") {
  return json{{"ok", false}, {"error", msg}, {"code", code}};
}

}  // namespace

std::string pkey_str(uint16_t entry_pkey) {
  char b[8];
  std::snprintf(b, sizeof b, "0x%04x", common::wire_pkey(entry_pkey));
  return b;
}

json tenant_json(const Tenant& t) {
  return {{"vni", t.vni}, {"name", t.name}, {"partition", t.partition}, {"pkey", pkey_str(t.entry_pkey())},
          {"flow_quota", t.flow_quota}};
}

json rnic_json(const Rnic& r) {
  return {{"name", r.name}, {"underlay_ip", format_ipv4(r.underlay_ip)}, {"mac", format_mac(r.mac)},
          {"path_base_port", r.path_base_port}, {"path_count", r.path_count}};
}

json vnic_json(const Vnic& v) {
  return {{"id", v.id}, {"vni", v.vni}, {"rnic", v.rnic}, {"overlay_ip", format_ipv4(v.overlay_ip)},
          {"overlay_mac", format_mac(v.overlay_mac)}, {"qpns", v.qpns}};
}

json level2_entry_json(const common::Level2Entry& e) {
  json j;
  switch (e.key.kind) {
    case common::EntryKind::kEgress:
      j = {{"kind", "egress"}, {"vnic", e.key.word0}, {"dst_overlay_ip", format_ipv4(e.key.word1)},
           {"underlay_src_ip", format_ipv4(e.egress.underlay_src_ip)},
           {"underlay_dst_ip", format_ipv4(e.egress.underlay_dst_ip)}, {"dst_mac", format_mac(e.egress.dst_mac)},
           {"vni", e.egress.vni}, {"path_base_port", e.egress.path_base_port},
           {"path_count", e.egress.path_count}};
      break;
    case common::EntryKind::kIngressVni:
    case common::EntryKind::kIngressQpn:
      j = {{"kind", e.key.kind == common::EntryKind::kIngressVni ? "ingress_vni" : "ingress_qpn"},
           {"underlay_src_ip", format_ipv4(e.key.word0)}, {"key", e.key.word1},
           {"overlay_src_ip", format_ipv4(e.ingress.overlay_src_ip)},
           {"overlay_dst_ip", format_ipv4(e.ingress.overlay_dst_ip)}, {"vni", e.ingress.vni},
           {"vnic", e.ingress.local_vnic_id}, {"overlay_src_mac", format_mac(e.ingress.overlay_src_mac)}};
      break;
    case common::EntryKind::kVnic:
      j = {{"kind", "vnic"}, {"vnic", e.vnic.vnic_id}, {"overlay_ip", format_ipv4(e.vnic.overlay_ip)},
           {"overlay_mac", format_mac(e.vnic.overlay_mac)}, {"vni", e.vnic.vni}, {"pkey", pkey_str(e.vnic.pkey)}};
      break;
    default:
      j = {{"kind", "invalid"}};
  }
  return j;
}

bool is_change_command(const std::string& cmd) {
  for (const char* c : {"tenant.add", "tenant.del", "rnic.add", "vnic.add", "vnic.del", "vnic.bind", "mapping.add",
                        "mapping.del", "mapping.import", "peering.allow"})
    if (cmd == c) return true;
  return false;
}

ControlApi::~ControlApi() = default;

std::string ControlApi::handle_line(const std::string& line) {
  json req;
  try {
    req = json::parse(line);
  } catch (const std::exception& e) {
    return error(std::string("request is not JSON: ") + e.what()).dump();
  }
  return handle(req).dump();
}

namespace {
// Runs f, turning exceptions into error replies.
template <class F>
json guarded(F&& f) {
  try {
    return f();
  } catch (const RequestError& e) {
    return error(e.what());
  } catch (const StoreError& e) {
    return error(std::string("store: ") + e.what(), "store_error");
  } catch (const std::exception& e) {
    return error(e.what(), "internal");
  }
}
}  // namespace

json ControlApi::handle(const json& request) {
  return guarded([&]() -> json {
    if (!request.is_object()) throw RequestError("request must be a JSON object");
    std::string cmd = str(request, "cmd");
    if (job_ && is_change_command(cmd))
      return error("a mapping import is in progress; try again when it is done", "busy");
    if (cmd != "mapping.import") return dispatch(cmd, request);
    Caller trusted;
    job_ = start_import(request, trusted);
    for (;;)
      if (std::optional<json> r = step_job(SIZE_MAX)) return *r;
  });
}

ControlReply ControlApi::begin_line(const std::string& line, Caller& caller) {
  json req = json::parse(line, nullptr, false);
  if (req.is_discarded() || !req.is_object() || !req.contains("cmd") || !req["cmd"].is_string())
    return {ControlReply::Kind::kDone, handle_line(line)};  // the usual error reply
  std::string cmd = req["cmd"].get<std::string>();
  if (job_ && is_change_command(cmd)) return {ControlReply::Kind::kBusy, {}};
  if (cmd != "mapping.import") return {ControlReply::Kind::kDone, handle(req).dump()};
  json err = guarded([&]() -> json {
    job_ = start_import(req, caller);
    return nullptr;
  });
  if (!err.is_null()) return {ControlReply::Kind::kDone, err.dump()};
  return {ControlReply::Kind::kStarted, {}};
}

std::optional<std::string> ControlApi::step() {
  if (!job_) return std::nullopt;
  std::optional<json> r = step_job(kStepRows);
  if (!r) return std::nullopt;
  return r->dump();
}

// One step of the job; its reply when it has ended (then job_ is gone).
std::optional<json> ControlApi::step_job(std::size_t rows) {
  bool finished = true;
  json reply = guarded([&]() -> json {
    finished = job_->import->step(rows);
    return finished ? finish_import(*job_) : json(nullptr);
  });
  if (!finished && reply.is_null()) return std::nullopt;
  job_.reset();
  return reply;
}

json ControlApi::accept(const Change& c) {
  std::optional<Vnic> removed;
  if (auto* rv = std::get_if<RemoveVnic>(&c))
    if (const Vnic* v = state_.vnic(rv->id)) removed = *v;
  ModelResult r = accept_change(state_, store_, c);
  if (!r.ok()) return error(r.message, model_errc_name(r.code));
  if (hooks_) hooks_->changed(c, removed);
  return ok();
}

json ControlApi::dispatch(const std::string& cmd, const json& r) {
  constexpr uint64_t kVniMax = 0xFFFFFF;
  if (cmd == "tenant.add") {
    AddTenant c{static_cast<uint32_t>(u64(r, "vni", kVniMax)), str(r, "name"),
                static_cast<uint16_t>(u64_or(r, "partition", kMaxPartition, 0))};
    if (r.contains("share_partition_with")) {
      const auto with = static_cast<uint32_t>(u64(r, "share_partition_with", kVniMax));
      const Tenant* t = state_.tenant(with);
      if (t == nullptr) return error("tenant " + std::to_string(with) + " does not exist", "unknown_tenant");
      if (t->partition == 0) return error("tenant " + std::to_string(with) + " has no partition", "bad_value");
      c.partition = t->partition;
      c.shared = true;
    }
    return accept(c);
  }
  if (cmd == "tenant.quota")
    return accept(SetTenantQuota{static_cast<uint32_t>(u64(r, "vni", kVniMax)),
                                 static_cast<uint32_t>(u64(r, "flows", 0xFFFFFFFF))});
  if (cmd == "tenant.del") return accept(RemoveTenant{static_cast<uint32_t>(u64(r, "vni", kVniMax))});
  if (cmd == "tenant.list") {
    json a = json::array();
    for (const auto& [vni, t] : state_.tenants()) a.push_back(tenant_json(t));
    return ok({{"tenants", a}});
  }
  if (cmd == "rnic.add") {
    AddRnic c;
    c.name = str(r, "name");
    c.underlay_ip = ipv4(r, "underlay_ip");
    c.mac = mac(r, "mac");
    c.path_base_port = static_cast<uint16_t>(u64_or(r, "path_base_port", 0xFFFF, 0));
    c.path_count = static_cast<uint8_t>(u64_or(r, "path_count", 255, 1));
    return accept(c);
  }
  if (cmd == "rnic.list" || cmd == "rnic.show") {
    json live = hooks_ ? hooks_->rnics() : json::array();
    json a = json::array();
    for (const auto& [name, rn] : state_.rnics()) {
      json j = rnic_json(rn);
      j["state"] = "no_channel";
      for (const json& l : live)
        if (l.value("name", "") == name) {
          j["state"] = l["state"];
          j["rnic_state"] = l["bar"]["state"];
          j["table_version"] = l["table_version"];
          j["channel"] = l;
        }
      a.push_back(j);
    }
    for (const json& l : live)  // channels for RNICs not registered in the model (--rnic only)
      if (!state_.rnic(l.value("name", "")))
        a.push_back(json{{"name", l["name"]}, {"state", l["state"]}, {"rnic_state", l["bar"]["state"]},
                         {"table_version", l["table_version"]}, {"channel", l}});
    if (cmd == "rnic.list") return ok({{"rnics", a}});
    std::string name = str(r, "name");
    for (json& j : a)
      if (j["name"] == name) return ok({{"rnic", j}});
    throw RequestError("no RNIC named \"" + name + "\"");
  }
  if (cmd == "vnic.add") {
    AddVnic c;
    c.id = static_cast<uint32_t>(u64(r, "id", 0xFFFFFFFF));
    c.vni = static_cast<uint32_t>(u64(r, "vni", kVniMax));
    c.rnic = str(r, "rnic");
    c.overlay_ip = ipv4(r, "overlay_ip");
    c.overlay_mac = mac(r, "overlay_mac");
    return accept(c);
  }
  if (cmd == "vnic.del") return accept(RemoveVnic{static_cast<uint32_t>(u64(r, "id", 0xFFFFFFFF))});
  if (cmd == "vnic.bind") {
    return accept(BindQp{static_cast<uint32_t>(u64(r, "vnic", 0xFFFFFFFF)),
                         static_cast<uint32_t>(u64(r, "qpn", 0xFFFFFF))});
  }
  if (cmd == "vnic.list") {
    json a = json::array();
    for (const auto& [id, v] : state_.vnics()) a.push_back(vnic_json(v));
    return ok({{"vnics", a}});
  }
  if (cmd == "mapping.add") {
    AddMapping c;
    c.vni = static_cast<uint32_t>(u64(r, "vni", kVniMax));
    c.overlay_ip = ipv4(r, "overlay_ip");
    c.underlay_ip = ipv4(r, "underlay_ip");
    c.next_hop_mac = mac(r, "next_hop_mac");
    c.rnic = str(r, "rnic");
    c.replace = flag(r, "replace");
    bool existed = state_.mapping(c.vni, c.overlay_ip).has_value();
    json j = accept(c);
    if (j["ok"] == true) j["replaced"] = existed;
    return j;
  }
  if (cmd == "mapping.del")
    return accept(RemoveMapping{static_cast<uint32_t>(u64(r, "vni", kVniMax)), ipv4(r, "overlay_ip")});
  if (cmd == "mapping.list") return list_mappings(r);
  if (cmd == "mapping.import") throw RequestError("mapping.import runs as a job (handle or begin_line)");
  if (cmd == "peering.allow") {
    return accept(AllowPeering{static_cast<uint32_t>(u64(r, "a", kVniMax)),
                               static_cast<uint32_t>(u64(r, "b", kVniMax))});
  }
  if (cmd == "table.dump") return table_dump(r);
  if (cmd == "trace") {
    json t;
    try {
      t = hooks_ ? hooks_->trace(r.contains("rule") ? str(r, "rule") : std::string()) : json(nullptr);
    } catch (const std::invalid_argument& e) {
      throw RequestError(std::string("rule: ") + e.what());
    }
    if (t.is_null()) throw RequestError("this agent has no trace ring");
    return ok({{"trace", t}});
  }
  if (cmd == "flow.show")
    return ok({{"flow", flow_view(state_, store_, hooks_, static_cast<uint32_t>(u64(r, "vni", kVniMax)),
                                  ipv4(r, "src"), ipv4(r, "dst"))}});
  throw RequestError("unknown command \"" + cmd + "\"");
}

json ControlApi::list_mappings(const json& r) const {
  bool by_vni = r.contains("vni");
  uint32_t vni = by_vni ? static_cast<uint32_t>(u64(r, "vni", 0xFFFFFF)) : 0;
  uint64_t limit = u64_or(r, "limit", UINT64_MAX, 100000);
  json a = json::array();
  uint64_t total = 0;
  state_.mappings().for_each([&](const MappingKey& k, const Mapping& m) {
    if (by_vni && k.vni != vni) return;
    ++total;
    if (a.size() >= limit) return;
    a.push_back({{"vni", k.vni}, {"overlay_ip", format_ipv4(k.overlay_ip)},
                 {"underlay_ip", format_ipv4(m.underlay_ip)}, {"next_hop_mac", format_mac(m.next_hop_mac)},
                 {"rnic", state_.rnic_name(m.rnic)}});
  });
  return ok({{"mappings", a}, {"total", total}, {"truncated", total > a.size()}});
}

std::unique_ptr<ControlApi::Job> ControlApi::start_import(const json& r, Caller& caller) {
  std::string path = str(r, "path");
  std::string fmt = r.contains("format") ? str(r, "format") : std::string("");
  if (fmt.empty()) fmt = path.size() > 6 && path.ends_with(".jsonl") ? "jsonl" : "csv";
  if (fmt != "csv" && fmt != "jsonl") throw RequestError("format must be csv or jsonl");
  bool replace = flag(r, "replace");
  auto job = std::make_unique<Job>();
  int fd = -1;
  if (flag(r, "fd")) {
    // The caller opened the file with its own rights and passed it along.
    if (caller.fd < 0) throw RequestError("\"fd\": true but no file descriptor came with the request");
    std::swap(fd, caller.fd);
  } else {
    if (!caller.may_open_paths)
      throw RequestError("forbidden: the agent opens a path only for root or its own user; send the file itself "
                         "(tandemctl mapping import does)");
    fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);  // a FIFO must not block the loop
    if (fd < 0) throw RequestError("cannot open \"" + path + "\"");
  }
  // A regular file only: a pipe or a device would block the agent's loop on a read.
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw RequestError("\"" + path + "\" is not a regular file");
  }
  auto fb = std::make_unique<__gnu_cxx::stdio_filebuf<char>>(fd, std::ios::in, 1 << 16);
  if (!fb->is_open()) {
    ::close(fd);
    throw RequestError("\"" + path + "\" cannot be read (the descriptor is not open for reading)");
  }
  job->buf = std::move(fb);  // closes fd
  job->in = std::make_unique<std::istream>(job->buf.get());
  job->import = std::make_unique<MappingImport>(store_, state_, *job->in,
                                                fmt == "csv" ? ImportFormat::kCsv : ImportFormat::kJsonl, replace);
  return job;
}

json ControlApi::finish_import(Job& job) {
  const ImportResult& res = job.import->result();
  if (!res.result.ok()) return error(res.result.message, model_errc_name(res.result.code));
  if (hooks_ && !res.replaced.empty()) hooks_->mappings_replaced(res.replaced);
  return ok({{"imported", res.imported}, {"replaced", res.replaced.size()}});
}

json ControlApi::table_dump(const json& r) const {
  uint64_t level = u64(r, "level", 2);
  if (level == 1) {
    json t = json::array();
    for (const auto& [vni, x] : state_.tenants()) t.push_back(tenant_json(x));
    json v = json::array();
    for (const auto& [id, x] : state_.vnics()) v.push_back(vnic_json(x));
    json p = json::array();
    for (const auto& [a, b] : state_.peerings())
      if (a < b) p.push_back({a, b});
    json m = list_mappings(json::object());
    return ok({{"level", 1}, {"tenants", t}, {"vnics", v}, {"peerings", p}, {"mappings", m["mappings"]},
               {"mappings_total", m["total"]}});
  }
  if (level != 2) throw RequestError("level must be 1 or 2");
  if (!hooks_) throw RequestError("no RNIC channels in this process");
  json out = json::object();
  if (r.contains("rnic")) {
    std::string name = str(r, "rnic");
    json t = hooks_->level2(name);
    if (t.is_null()) throw RequestError("no RNIC channel named \"" + name + "\"");
    out[name] = t;
  } else {
    for (const json& l : hooks_->rnics()) {
      std::string name = l.value("name", "");
      out[name] = hooks_->level2(name);
    }
  }
  return ok({{"level", 2}, {"rnics", out}});
}

}  // namespace tandem::dpu
