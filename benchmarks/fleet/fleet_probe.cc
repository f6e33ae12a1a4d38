// fleet_probe: times one desired-state change from its write to "committed in
// the RNIC" (the RNIC's BAR: committed entry count), from inside one process,
// so neither side pays for starting a CLI. Two writers of the same change (a
// vNIC added to a server):
//   etcd  SERVER:RNIC:CHANNEL_FILE ...   a put of /tandem/v1/desired/vnics/<id> (fleet agents)
//   socket SOCKET:RNIC:CHANNEL_FILE      {"cmd":"vnic.add"} on one agent's control socket (tandemctl's path)
// Prints one JSON object: per writer, the ms from the write until it was
// acknowledged and until the RNIC committed it.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/channel/channel_region.h"
#include "dpu/fleet/desired_state.h"
#include "dpu/fleet/etcd_client.h"

using nlohmann::json;
using Clock = std::chrono::steady_clock;
namespace tf = tandem::dpu::fleet;

namespace {

struct Target {
  std::string where, rnic;  // server (etcd) or socket path
  const tandem::common::Bar* bar = nullptr;
};

Target parse_target(const std::string& s) {
  std::stringstream in(s);
  Target t;
  std::string chan;
  std::getline(in, t.where, ':');
  std::getline(in, t.rnic, ':');
  std::getline(in, chan);
  int fd = ::open(chan.c_str(), O_RDONLY);
  if (fd < 0) throw std::runtime_error("cannot open " + chan);
  off_t size = ::lseek(fd, 0, SEEK_END);
  void* base = ::mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED) throw std::runtime_error("cannot map " + chan);
  t.bar = &tandem::common::channel_bar(base);
  return t;
}

uint64_t entries(const Target& t) {
  for (;;)
    if (auto c = tandem::common::bar_read_table(*t.bar)) return c->entry_count;
}

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Waits (spinning with 20 us naps) until the RNIC's committed entry count exceeds n0.
double wait_commit(const Target& t, uint64_t n0, Clock::time_point t0) {
  while (entries(t) <= n0) {
    if (ms_since(t0) > 20000) throw std::runtime_error("RNIC " + t.rnic + " never committed the change");
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  return ms_since(t0);
}

std::string socket_call(const std::string& path, const json& req) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    throw std::runtime_error("cannot connect to " + path);
  }
  std::string line = req.dump() + "\n", reply;
  if (::write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) throw std::runtime_error("write");
  char buf[4096];
  while (reply.find('\n') == std::string::npos) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    reply.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return reply;
}

json vnic_value(uint32_t vni, const std::string& server, const std::string& rnic, int k) {
  char ip[32], mac[32];
  std::snprintf(ip, sizeof ip, "192.169.%d.%d", k / 250, k % 250 + 1);
  std::snprintf(mac, sizeof mac, "02:00:01:%02x:%02x:01", k / 250, k % 250 + 1);
  return {{"vni", vni}, {"server", server}, {"rnic", rnic}, {"overlay_ip", ip}, {"overlay_mac", mac}};
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string endpoints;
    int rounds = 50, first_id = 5000;
    uint32_t vni = 100;
    std::vector<Target> fleet;
    Target sock;
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      auto next = [&]() -> std::string {
        if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
        return argv[++i];
      };
      if (a == "--etcd") endpoints = next();
      else if (a == "--rounds") rounds = std::stoi(next());
      else if (a == "--first-id") first_id = std::stoi(next());
      else if (a == "--vni") vni = static_cast<uint32_t>(std::stoul(next()));
      else if (a == "--fleet") fleet.push_back(parse_target(next()));
      else if (a == "--socket") sock = parse_target(next());
      else throw std::runtime_error("unknown argument " + a);
    }
    if (endpoints.empty() || fleet.empty() || !sock.bar)
      throw std::runtime_error("usage: fleet_probe --etcd EPS --fleet SERVER:RNIC:CHAN ... --socket SOCK:RNIC:CHAN [--rounds N]");
    tf::EtcdOptions o;
    o.endpoints = endpoints;
    tf::EtcdClient etcd(o);
    json out{{"etcd_ack_ms", json::array()}, {"etcd_commit_ms", json::array()},
             {"socket_ack_ms", json::array()}, {"socket_commit_ms", json::array()}};
    for (int k = 0; k < rounds; ++k) {
      const Target& t = fleet[static_cast<size_t>(k) % fleet.size()];
      const int id = first_id + k;
      uint64_t n0 = entries(t);
      auto t0 = Clock::now();
      etcd.put(tf::vnic_key(static_cast<uint32_t>(id)), vnic_value(vni, t.where, t.rnic, k).dump());
      out["etcd_ack_ms"].push_back(ms_since(t0));
      out["etcd_commit_ms"].push_back(wait_commit(t, n0, t0));
      // The same change through one agent's control socket (what tandemctl sends).
      json v = vnic_value(vni, "", sock.rnic, k);
      json req{{"cmd", "vnic.add"}, {"id", id}, {"vni", vni}, {"rnic", sock.rnic},
               {"overlay_ip", v["overlay_ip"]}, {"overlay_mac", v["overlay_mac"]}};
      n0 = entries(sock);
      t0 = Clock::now();
      std::string reply = socket_call(sock.where, req);
      out["socket_ack_ms"].push_back(ms_since(t0));
      if (reply.find("\"ok\":true") == std::string::npos) throw std::runtime_error("vnic.add refused: " + reply);
      out["socket_commit_ms"].push_back(wait_commit(sock, n0, t0));
    }
    std::printf("%s\n", out.dump().c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fleet_probe: %s\n", e.what());
    return 2;
  }
}
