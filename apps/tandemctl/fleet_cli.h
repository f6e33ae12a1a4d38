// tandemctl fleet: the desired state in etcd (dpu/fleet/fleet_admin.h does the work).
#pragma once
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <string>

namespace tandem::dpu::ctl {

struct FleetCli {
  std::string endpoints = "127.0.0.1:2379";
  std::string cacert, cert, key, user;
};

// Adds `fleet ...`: each leaf fills req (cmd "fleet.*").
void add_fleet_commands(CLI::App& app, nlohmann::json& req, FleetCli& o);
// Runs a "fleet.*" request against etcd.
nlohmann::json fleet_call(const FleetCli& o, const nlohmann::json& req);

}  // namespace tandem::dpu::ctl
