// tandem-perf end to end, as two real processes (server and client) talking
// TCP on 127.0.0.1 and attached over real Unix sockets to a loopback worker
// running in this test (loopback_worker.h: it executes WQEs by copying
// between the two processes' registered memory). The real end-to-end run goes
// through tandem-rnic; this checks the tool's own logic and output.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "loopback_worker.h"

using tandem::rnic::perf::test::LoopbackWorker;
using nlohmann::json;

namespace {

std::string perf_binary() {
  const char* p = std::getenv("TANDEM_PERF");
  return p ? p : "apps/tandem-perf/tandem-perf";
}

uint16_t free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t l = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &l);
  close(fd);
  return ntohs(a.sin_port);
}

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// One tandem-perf process with stdout/stderr in files.
struct Proc {
  pid_t pid = -1;
  std::string out, err;
  int code = -1;

  Proc(const std::string& dir, const std::string& name, std::vector<std::string> args) {
    out = dir + "/" + name + ".out";
    err = dir + "/" + name + ".err";
    args.insert(args.begin(), perf_binary());
    pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int o = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      int e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(o, 1);
      dup2(e, 2);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
  }
  ~Proc() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
  // Exit code, or -1 if it had to be killed after timeout_s.
  int wait(double timeout_s = 60) {
    auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (pid > 0) {
      int st = 0;
      pid_t r = waitpid(pid, &st, WNOHANG);
      if (r == pid) {
        pid = -1;
        code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        break;
      }
      if (std::chrono::steady_clock::now() > until) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
        pid = -1;
        code = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return code;
  }
  std::string stdout_text() const { return slurp(out); }
  std::string stderr_text() const { return slurp(err); }
  json report() const {
    std::string s = stdout_text();
    INFO("stdout: " << s << "\nstderr: " << stderr_text());
    REQUIRE_FALSE(s.empty());
    return json::parse(s);
  }
};

struct Lab {
  std::string dir;
  std::string sock;
  std::unique_ptr<LoopbackWorker> worker;
  uint16_t port = free_port();

  Lab() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "tandem-perf-XXXXXX").string();
    REQUIRE(mkdtemp(tmpl.data()) != nullptr);
    dir = tmpl;
    sock = dir + "/rnic0.sock";
    worker = std::make_unique<LoopbackWorker>(sock);
  }
  ~Lab() {
    worker.reset();
    std::filesystem::remove_all(dir);
  }
  bool json_output = true;
  std::vector<std::string> args(const std::string& test, std::vector<std::string> extra) const {
    std::vector<std::string> a{test, "--device", sock, "-p", std::to_string(port), "--timeout", "20"};
    if (json_output) a.push_back("--json");
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
  Proc server(const std::string& test, std::vector<std::string> extra = {}) {
    return Proc(dir, "server", args(test, extra));
  }
  Proc client(const std::string& test, std::vector<std::string> extra = {}) {
    extra.push_back("127.0.0.1");
    return Proc(dir, "client", args(test, extra));
  }
};

void check_ok(Proc& p, const json& j) {
  INFO(p.stderr_text());
  CHECK(p.code == 0);
  CHECK(j["verify"] == "ok");
  CHECK(j["errors"] == 0);
  CHECK_FALSE(j.contains("error"));
}

struct Reports {
  json c, s;  // client's and server's --json reports
};

// Server and client of one test run to the end; both must succeed (check_ok).
Reports run_ok(Lab& lab, const std::string& test, std::vector<std::string> client_flags) {
  Proc srv = lab.server(test);
  Proc cli = lab.client(test, std::move(client_flags));
  REQUIRE(cli.wait() >= 0);
  REQUIRE(srv.wait() >= 0);
  Reports r{cli.report(), srv.report()};
  check_ok(cli, r.c);
  check_ok(srv, r.s);
  return r;
}

}  // namespace

TEST_CASE("bandwidth tests move every byte correctly through the loopback worker (--verify)") {
  for (std::string test : {"write_bw", "send_bw", "read_bw"}) {
    DYNAMIC_SECTION(test) {
      Lab lab;
      // An odd size (not a multiple of 8), two QPs, a window smaller than the run.
      std::vector<std::string> flags{"-s", "4099", "-n", "300", "-q", "2", "-t", "16", "--verify"};
      auto [c, s] = run_ok(lab, test, flags);
      for (const json* j : {&c, &s}) {
        CHECK((*j)["test"] == test);
        CHECK((*j)["size"] == 4099);
        CHECK((*j)["iterations"] == 300);
        CHECK((*j)["messages"] == 600);
        CHECK((*j)["qps"] == 2);
        CHECK((*j)["bw_avg_gbps"].get<double>() > 0);
        CHECK((*j)["bw_peak_gbps"].get<double>() >= (*j)["bw_avg_gbps"].get<double>());
        CHECK((*j)["msg_rate_mpps"].get<double>() > 0);
      }
      CHECK(s["role"] == "server");  // the server took the client's -s/-n/-q
      if (test != "read_bw") CHECK(c["server_verify"] == "ok");
      CHECK(lab.worker->messages_placed() == 600);
    }
  }
}

TEST_CASE("latency tests ping-pong and report perftest's latency columns (--verify)") {
  for (std::string test : {"write_lat", "send_lat"}) {
    DYNAMIC_SECTION(test) {
      Lab lab;
      auto [c, s] = run_ok(lab, test, {"-s", "200", "-n", "100", "--verify"});
      CHECK(c["iterations"] == 100);
      CHECK(s["iterations"] == 100);
      CHECK(c["t_min_us"].get<double>() > 0);
      CHECK(c["t_min_us"].get<double>() <= c["t_typical_us"].get<double>());
      CHECK(c["t_typical_us"].get<double>() <= c["t_99_us"].get<double>());
      CHECK(c["t_99_us"].get<double>() <= c["t_max_us"].get<double>());
      CHECK(lab.worker->messages_placed() == 200);  // both directions
    }
  }
}

TEST_CASE("read_lat times each READ's round trip and checks the data it read (--verify)") {
  Lab lab;
  auto [c, s] = run_ok(lab, "read_lat", {"-s", "3000", "-n", "80", "--verify"});
  CHECK(c["test"] == "read_lat");
  CHECK(c["iterations"] == 80);
  CHECK(s["iterations"] == 80);
  CHECK(s["verify"] == "ok");  // the client's verdict, reported by the server too
  CHECK(c["t_min_us"].get<double>() > 0);
  CHECK(c["t_typical_us"].get<double>() <= c["t_max_us"].get<double>());
}

TEST_CASE("a small write_lat message goes inline and still verifies") {
  Lab lab;
  run_ok(lab, "write_lat", {"-s", "2", "-n", "50", "--verify"});
}

TEST_CASE("-D runs for a duration and both sides agree on the message count") {
  Lab lab;
  auto [c, s] = run_ok(lab, "write_bw", {"-s", "1024", "-D", "0.3", "--verify"});
  CHECK(c["iterations"].get<uint64_t>() > 0);
  CHECK(c["iterations"] == s["iterations"]);
  CHECK(c["duration_s"] == 0.3);
}

TEST_CASE("a corrupted byte fails verification with its offset and exit code 1") {
  for (std::string test : {"write_bw", "send_bw", "read_bw"}) {
    DYNAMIC_SECTION(test) {
      Lab lab;
      // Eight slots for eight messages, so nothing is overwritten: corrupt
      // the 5th message placed (message 4), at its byte size/2 = 2048.
      lab.worker->corrupt_message(5);
      Proc srv = lab.server(test);
      Proc cli = lab.client(test, {"-s", "4096", "-n", "8", "-t", "8", "--verify"});
      REQUIRE(cli.wait() == 1);
      REQUIRE(srv.wait() >= 0);
      json c = cli.report();
      CHECK(c["verify"] == "failed");
      CHECK(c["first_mismatch"]["offset"] == 2048);
      CHECK(c["first_mismatch"]["iteration"] == 4);
      CHECK(cli.stderr_text().find("offset 2048") != std::string::npos);
      // Both sides fail and say where (the checker is the server for WRITE and
      // SEND, the client for READ; the other side reports its verdict).
      CHECK(srv.code == 1);
      json s = srv.report();
      CHECK(s["verify"] == "failed");
      CHECK(s["first_mismatch"]["offset"] == 2048);
      CHECK(s["first_mismatch"]["iteration"] == 4);
      CHECK(srv.stderr_text().find("offset 2048") != std::string::npos);
    }
  }
}

TEST_CASE("without a worker socket: one clear line and exit 2") {
  Lab lab;
  Proc p(lab.dir, "nowhere", {"write_bw", "--device", lab.dir + "/missing.sock"});
  CHECK(p.wait() == 2);
  std::string err = p.stderr_text();
  CHECK(err.find("no RNIC worker at") != std::string::npos);
  CHECK(std::count(err.begin(), err.end(), '\n') == 1);
}

TEST_CASE("the client stops with an error when the server process dies mid-run") {
  Lab lab;
  Proc srv = lab.server("write_bw");
  Proc cli = lab.client("write_bw", {"-s", "4096", "-D", "30"});
  // Wait until data flows, then kill the server.
  for (int i = 0; i < 2000 && lab.worker->messages_placed() < 100; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  REQUIRE(lab.worker->messages_placed() >= 100);
  kill(srv.pid, SIGKILL);
  srv.wait();
  int code = cli.wait(25);
  CHECK(code == 1);
  std::string err = cli.stderr_text();
  INFO(err);
  CHECK((err.find("peer disconnected") != std::string::npos ||
         err.find("completion error") != std::string::npos));
  json c = cli.report();
  CHECK(c.contains("error"));
}

TEST_CASE("server and client running different tests refuse each other") {
  Lab lab;
  Proc srv = lab.server("write_bw");
  Proc cli = lab.client("send_bw", {"-n", "10"});
  CHECK(cli.wait() == 1);
  CHECK(srv.wait() == 1);
  CHECK(cli.stderr_text().find("test mismatch") != std::string::npos);
  CHECK(srv.stderr_text().find("test mismatch") != std::string::npos);
}

TEST_CASE("without --json both sides print perftest's table with the QP details swapped") {
  Lab lab;
  lab.json_output = false;
  Proc srv = lab.server("write_bw");
  Proc cli = lab.client("write_bw", {"-s", "65536", "-n", "200", "--verify"});
  REQUIRE(cli.wait() == 0);
  REQUIRE(srv.wait() == 0);
  std::string c = cli.stdout_text();
  std::string s = srv.stdout_text();
  INFO(c);
  for (const std::string* t : {&c, &s}) {
    CHECK(t->find("RDMA_Write BW Test") != std::string::npos);
    CHECK(t->find(" local address: QPN") != std::string::npos);
    CHECK(t->find(" remote address: QPN") != std::string::npos);
    CHECK(t->find("GID ::ffff:127.0.0.1") != std::string::npos);
    CHECK(t->find("#bytes     #iterations    BW peak[Gb/sec]") != std::string::npos);
    CHECK(t->find(" 65536      200") != std::string::npos);
  }
  CHECK(c.find("Verify         : ok, server: ok") != std::string::npos);
}

TEST_CASE("the server stops with an error when the client process dies mid-run") {
  for (std::string test : {"write_bw", "send_bw", "write_lat"}) {
    DYNAMIC_SECTION(test) {
      Lab lab;
      Proc srv = lab.server(test);
      Proc cli = lab.client(test, {"-D", "30"});
      for (int i = 0; i < 2000 && lab.worker->messages_placed() < 100; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      REQUIRE(lab.worker->messages_placed() >= 100);
      kill(cli.pid, SIGKILL);
      cli.wait();
      CHECK(srv.wait(25) == 1);
      std::string err = srv.stderr_text();
      INFO(err);
      // Whichever the server sees first: the TCP exchange closing, or (ping-pong)
      // its reply to the vanished QP failing.
      CHECK((err.find("peer disconnected") != std::string::npos ||
             err.find("completion error") != std::string::npos));
    }
  }
}
