// Regressions found by tests/fuzz/fuzz_host_server (inputs kept in
// tests/fuzz/regressions/fuzz_host_server/): each replays the finding through
// a raw client on the socket, which sends what the application library never would.
#include <catch2/catch.hpp>

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "rnic/host/host_protocol.h"
#include "rnic/host/host_server.h"
#include "rnic/host/queue_layout.h"
#include "rnic/host/shm_region.h"
#include "rnic/host/unix_channel.h"
#include "server_thread.h"

using namespace tandem::rnic::host;
namespace test = tandem::rnic::host::test;

namespace {

// An application speaking the protocol by hand to a server polled here.
class RawClient {
 public:
  explicit RawClient(HostServer& server, const std::string& path) : server_(server) {
    fd_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::strcpy(sa.sun_path, path.c_str());
    REQUIRE(connect(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
  }
  ~RawClient() { close(fd_); }

  Request request(MsgType t) {
    Request r{};
    r.hdr.magic = kProtocolMagic;
    r.hdr.type = static_cast<uint16_t>(t);
    r.hdr.seq = ++seq_;
    return r;
  }

  // Sends req (with fds) and returns the reply; fails the test if none comes.
  Reply call(const Request& req, const int* fds = nullptr, std::size_t nfds = 0) {
    REQUIRE(send_message(fd_, &req, sizeof req, fds, nfds) == sizeof req);
    Reply rep{};
    int rfds[kMaxFdsPerMessage];
    std::size_t nr = 0;
    ssize_t n = -EAGAIN;
    for (int k = 0; k < 10 && n == -EAGAIN; ++k) {  // accept and serve take separate polls
      server_.poll(now_ += 1000);
      n = recv_message(fd_, &rep, sizeof rep, rfds, kMaxFdsPerMessage, &nr, true);
    }
    REQUIRE(n == sizeof rep);
    for (std::size_t i = 0; i < nr; ++i) close(rfds[i]);
    return rep;
  }

  // hello, a PD, a CQ and an RC QP: returns the QPN.
  uint32_t make_qp() {
    REQUIRE(ShmRegion::create("db", sizeof(DoorbellPage), false, &doorbells_) == Status::kOk);
    Request r = request(MsgType::kHello);
    r.body.hello.version_min = r.body.hello.version_max = 1;
    int fd = doorbells_.fd();
    REQUIRE(call(r, &fd, 1).hdr.status == 0);
    Reply rep = call(request(MsgType::kAllocPd));
    REQUIRE(rep.hdr.status == 0);
    const uint32_t pd = rep.body.pd.pd;
    REQUIRE(ShmRegion::create("cq", cq_layout(16).bytes, false, &cq_) == Status::kOk);
    r = request(MsgType::kCreateCq);
    r.body.create_cq.depth = 16;
    fd = cq_.fd();
    rep = call(r, &fd, 1);
    REQUIRE(rep.hdr.status == 0);
    const uint32_t cq = rep.body.cq.cq;
    REQUIRE(ShmRegion::create("qp", qp_queue_layout(16, 16).bytes, false, &qp_) == Status::kOk);
    r = request(MsgType::kCreateQp);
    r.body.create_qp = CreateQpRequest{pd, cq, cq, 16, 16, IBV_QPT_RC, 0, 0};
    fd = qp_.fd();
    rep = call(r, &fd, 1);
    REQUIRE(rep.hdr.status == 0);
    return rep.body.create_qp.qpn;
  }

  // Drives the QP to RTS with the attributes each step needs.
  void to_rts(uint32_t qpn) {
    const ibv_qp_state steps[] = {IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS};
    const uint32_t masks[] = {IBV_QP_STATE, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN,
                              IBV_QP_STATE | IBV_QP_SQ_PSN};
    for (int i = 0; i < 3; ++i) {
      Request r = request(MsgType::kModifyQp);
      r.body.modify_qp.qpn = qpn;
      r.body.modify_qp.attr_mask = masks[i];
      r.body.modify_qp.qp_state = steps[i];
      r.body.modify_qp.path_mtu = IBV_MTU_1024;
      r.body.modify_qp.dest_qp_num = 0x100;
      REQUIRE(call(r).hdr.status == 0);
    }
  }
  // Writes w into the next SQ slot and moves the producer index past it.
  void post_raw(const SendWqe& w) {
    const QpQueueLayout l = qp_queue_layout(16, 16);
    auto* ctl = reinterpret_cast<RingControl*>(qp_.data() + l.sq_control);
    const uint32_t p = ctl->producer.load();
    reinterpret_cast<SendWqe*>(qp_.data() + l.sq_entries)[p & 15] = w;
    ctl->producer.store(p + 1, std::memory_order_release);
  }
  // The CQE at index i of the CQ ring.
  const Cqe& cqe(uint32_t i) const {
    return reinterpret_cast<const Cqe*>(cq_.data() + cq_layout(16).entries)[i & 15];
  }

 private:
  HostServer& server_;
  int fd_ = -1;
  uint32_t seq_ = 0;
  uint64_t now_ = 0;
  ShmRegion doorbells_, cq_, qp_;
};

}  // namespace

TEST_CASE("modify_qp with a qp_state outside ibv_qp_state is refused as invalid and leaves the QP unchanged") {
  // Found by fuzz_host_server: the worker cast the application's number to
  // ibv_qp_state before checking it (UBSan: invalid enum load).
  const std::string dir = test::make_temp_dir();
  ServerConfig cfg;
  cfg.socket_path = dir + "/rnic0.sock";
  HostServer server(cfg);
  {
    RawClient app(server, cfg.socket_path);
    const uint32_t qpn = app.make_qp();
    for (uint32_t bad : {uint32_t{IBV_QPS_ERR} + 1, 8u, 83886306u, UINT32_MAX}) {
      Request r = app.request(MsgType::kModifyQp);
      r.body.modify_qp.qpn = qpn;
      r.body.modify_qp.attr_mask = IBV_QP_STATE;
      r.body.modify_qp.qp_state = bad;
      CHECK(app.call(r).hdr.status == static_cast<uint32_t>(Status::kInvalidArgument));
    }
    REQUIRE(server.qp_info(qpn) != nullptr);
    CHECK(server.qp_info(qpn)->state == IBV_QPS_RESET);
    Request r = app.request(MsgType::kModifyQp);  // a good one still works
    r.body.modify_qp.qpn = qpn;
    r.body.modify_qp.attr_mask = IBV_QP_STATE;
    r.body.modify_qp.qp_state = IBV_QPS_INIT;
    CHECK(app.call(r).hdr.status == 0);
    CHECK(server.qp_info(qpn)->state == IBV_QPS_INIT);
  }
  server.poll(1'000'000'000);
  CHECK(server.app_count() == 0);
  std::filesystem::remove_all(dir);
}

TEST_CASE("a send WQE whose opcode byte is past ibv_wr_opcode completes in error and then flushes") {
  // Found by fuzz_host_server: the worker cast the application's opcode byte
  // to ibv_wr_opcode before checking it, and the error and flush paths read it
  // back as one (UBSan, in the sanitized build: invalid enum load).
  const std::string dir = test::make_temp_dir();
  ServerConfig cfg;
  cfg.socket_path = dir + "/rnic0.sock";
  HostServer server(cfg);
  {
    RawClient app(server, cfg.socket_path);
    const uint32_t qpn = app.make_qp();
    app.to_rts(qpn);
    SendWqe w{};
    w.wr_id = 7;
    w.opcode = 68;
    w.send_flags = IBV_SEND_SIGNALED;
    app.post_raw(w);
    w.wr_id = 8;
    w.opcode = 255;
    app.post_raw(w);
    SendWork out[4];
    CHECK(server.fetch_send(qpn, out) == 0);
    CHECK(server.qp_info(qpn)->state == IBV_QPS_ERR);
    CHECK(server.counters().bad_wqe == 1);
    CHECK(server.fetch_send(qpn, out) == 0);  // in ERR: the second one is flushed
    CHECK(app.cqe(0).wr_id == 7);
    CHECK(app.cqe(0).status == IBV_WC_LOC_QP_OP_ERR);
    CHECK(app.cqe(0).opcode == IBV_WC_SEND);
    CHECK(app.cqe(1).wr_id == 8);
    CHECK(app.cqe(1).status == IBV_WC_WR_FLUSH_ERR);
    CHECK(app.cqe(1).opcode == IBV_WC_SEND);
    CHECK(server.send_queued(qpn) == 0);
  }
  server.poll(1'000'000'000);
  CHECK(server.app_count() == 0);
  std::filesystem::remove_all(dir);
}
