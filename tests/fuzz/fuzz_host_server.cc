// libFuzzer target: the RNIC worker's host interface (rnic/host HostServer)
// fed everything a hostile application can write. The fuzzer plays up to two
// applications in-process: it connects to the server's Unix socket, sends
// control requests (well-formed ones with fuzzed fields, and raw ones with any
// type, length, magic and descriptors), and scribbles on the shared memory it
// owns (SQ/RQ/SRQ descriptors, SGEs, lkeys, inline lengths, ring indices,
// doorbell and summary words, CQ consumer indices). Between its moves it runs
// both halves of the server the way a worker does (poll = apply_control +
// serve_control; ready_qps, fetch_send/recv/srq_recv, complete_*,
// translate_remote, qp_error). No DPDK.
//
// Beyond ASan/UBSan, every WQE the server hands over is checked: its segments
// lie inside a registered MR of the QP's (or SRQ's) own application, in the
// worker's mapping (found from kMrRegistered events), and are touched; SGE
// count, inline length and total length are within limits; translate_remote
// answers inside the MR of the same application.
//
// The fair shares are on (small limits on every resource, queue depths charged
// in bytes, few SRQs, a short hello timeout, two silent connections per uid):
// after every step no vNIC holds more than its share and the server no more
// SRQs than its room; the worker page it handed out can never be written
// (mapped writable, mprotect'ed, reopened, written); connections that never
// say hello are closed; and when every application is gone, every share is
// back to zero.
//
// Input: records of one op byte (mod kOps) and its operands, read from the
// front; missing bytes read as zero. tests/fuzz/host_seeds.py writes seeds.
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "rnic/host/host_protocol.h"
#include "rnic/host/host_server.h"
#include "rnic/host/queue_layout.h"
#include "rnic/host/shm_region.h"
#include "rnic/host/unix_channel.h"

using namespace tandem::rnic::host;

namespace {

constexpr uint32_t kVnic = 0x0A000001;  // the one vNIC the server knows
constexpr int kApps = 2;

enum Op : uint8_t {
  kOpHello, kOpAllocPd, kOpDeallocPd, kOpRegMr, kOpDeregMr, kOpCreateCq, kOpDestroyCq, kOpCreateQp,
  kOpModifyQp, kOpDestroyQp, kOpCreateSrq, kOpDestroySrq, kOpQueryQp, kOpRawRequest, kOpWriteSqWqe,
  kOpWriteRqWqe, kOpWriteSrqWqe, kOpPost, kOpSetIndex, kOpDoorbellWord, kOpWorkerStep, kOpComplete,
  kOpFetchDirect, kOpTranslateRemote, kOpCloseApp, kOpDrainCq, kOpQpError, kOpArmCq, kOpPoll,
  kOpSilentConnect, kOpAdvanceClock, kOpPokeWorkerPage,
  // Protocol v2: the event ring, SRQ limits, the port's state.
  kOpAsyncEvents, kOpModifySrq, kOpSrqLimit, kOpPortState, kOpEventIndex,
  kOps
};

class Reader {
 public:
  Reader(const uint8_t* d, std::size_t n) : d_(d), n_(n) {}
  bool empty() const { return i_ >= n_; }
  uint8_t u8() { return i_ < n_ ? d_[i_++] : 0; }
  uint16_t u16() { return static_cast<uint16_t>(u8() | u8() << 8); }
  uint32_t u32() { return u16() | static_cast<uint32_t>(u16()) << 16; }
  uint64_t u64() { return u32() | static_cast<uint64_t>(u32()) << 32; }
  void bytes(void* out, std::size_t len) {
    auto* o = static_cast<uint8_t*>(out);
    for (std::size_t k = 0; k < len; ++k) o[k] = u8();
  }

 private:
  const uint8_t* d_;
  std::size_t n_;
  std::size_t i_ = 0;
};

struct Region {
  ShmRegion shm;
};
using RegionPtr = std::shared_ptr<Region>;

struct Qp {
  uint32_t qpn;
  uint32_t bit;
  uint32_t sq_depth, rq_depth;
  RegionPtr mem;
};
struct Srq {
  uint32_t handle;
  uint32_t bit;
  uint32_t depth;
  RegionPtr mem;
};
struct Cq {
  uint32_t handle;
  uint32_t depth;
  RegionPtr mem;
  int channel = -1;  // our end of the completion channel eventfd
};

struct AppSide {
  int sock = -1;
  int worker_page = -1;  // the worker page's descriptor from the hello reply
  uint32_t seq = 0;
  uint32_t app_id = 0;  // from the hello reply (0: none yet)
  RegionPtr doorbells;
  std::vector<uint32_t> pds, lkeys;
  std::vector<Cq> cqs;
  std::vector<Qp> qps;
  std::vector<Srq> srqs;
  RegionPtr events;  // the async event ring (v2), once registered
  int event_fd = -1;
};

struct MrRange {
  uint32_t app_id;
  uint8_t* addr;
  uint64_t length;
};

struct Held {  // work the "transport" holds, completed later
  bool send;
  uint32_t qpn;
  SendWork s;
  RecvWork r;
};

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_host_server: invariant broken: %s\n", what);
  std::abort();
}

RegionPtr make_region(std::size_t bytes) {
  auto r = std::make_shared<Region>();
  if (ShmRegion::create("fuzz-host", bytes, false, &r->shm) != Status::kOk) return nullptr;
  return r;
}

template <typename T>
T* pick(std::vector<T>& v, uint8_t i) {
  return v.empty() ? nullptr : &v[i % v.size()];
}

class Harness {
 public:
  explicit Harness(const ServerConfig& cfg) : server_(cfg), path_(cfg.socket_path), cfg_(cfg) {}
  ~Harness() {
    for (AppSide& a : apps_) close_app(a);
    for (int fd : silent_) close(fd);
  }

  void run(Reader& in) {
    while (!in.empty()) {
      const uint8_t op = in.u8() % kOps;
      step(op, in);
      drain_events();
      check_shares();
    }
    // Everyone leaves: the server gives every share back and closes every silent connection.
    for (AppSide& a : apps_) close_app(a);
    for (int fd : silent_) close(fd);
    silent_.clear();
    silent_since_.clear();
    for (int i = 0; i < 4; ++i) poll();
    if (server_.app_count() != 0) fail("applications left after every connection closed");
    std::vector<TenantQuotas::Row> rows(TenantQuotas::kMaxAccounts);
    rows.resize(server_.quotas().rows(rows));
    for (const TenantQuotas::Row& r : rows)
      for (std::size_t i = 0; i < kResourceCount; ++i)
        if (r.used[i] != 0) {
          std::fprintf(stderr, "vNIC 0x%x still holds %lu of %s\n", r.vnic_ip, static_cast<unsigned long>(r.used[i]),
                       kResourceNames[i]);
          fail("a share not given back when its applications went away");
        }
    if (std::getenv("FUZZ_HOST_VERBOSE") != nullptr) {  // to see how far a seed gets
      const HostCounters c = server_.counters();
#define TANDEM_FUZZ_PRINT(name, doc) std::fprintf(stderr, "%s=%lu ", #name, static_cast<unsigned long>(c.name));
      TANDEM_FOREACH_HOST_COUNTER(TANDEM_FUZZ_PRINT)
#undef TANDEM_FUZZ_PRINT
      std::fprintf(stderr, "held=%zu mrs=%zu\n", held_.size(), mrs_.size());
    }
  }

 private:
  void poll() {
    now_ += 1'000'000;
    server_.poll(now_);
    drain_events();
  }

  void drain_events() {
    HostEvent e;
    while (server_.next_event(&e)) {
      if (e.kind == HostEventKind::kMrRegistered) {
        mrs_[e.lkey] = MrRange{e.app_id, e.addr, e.length};
      } else if (e.kind == HostEventKind::kMrDeregistered) {
        mrs_.erase(e.lkey);
      }
    }
  }

  // No vNIC over its share, the server within its SRQ room.
  void check_shares() {
    std::vector<TenantQuotas::Row> rows(TenantQuotas::kMaxAccounts);
    rows.resize(server_.quotas().rows(rows));
    for (const TenantQuotas::Row& r : rows)
      for (std::size_t i = 0; i < kResourceCount; ++i)
        if (r.used[i] > cfg_.limits.per_vnic[i]) fail("a vNIC holds more than its share");
    if (server_.srq_count() > cfg_.max_srqs) fail("more SRQs than the server's room");
    if (server_.app_count() > cfg_.max_apps) fail("more connections than max_apps");
  }

  // Every way an application could write the worker page must fail.
  void poke_worker_page(int fd, uint8_t how) {
    const std::size_t len = 4096;
    uint32_t v = 0xdeadbeef;
    switch (how % 4) {
      case 0: {
        void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p != MAP_FAILED) fail("the worker page mapped writable");
        break;
      }
      case 1: {
        void* p = mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, 0);
        if (p != MAP_FAILED) {
          if (mprotect(p, len, PROT_READ | PROT_WRITE) == 0) fail("the worker page mprotect'ed writable");
          munmap(p, len);
        }
        break;
      }
      case 2:
        if (pwrite(fd, &v, sizeof v, 0) > 0) fail("the worker page written with pwrite");
        break;
      default: {
        char path[64];
        std::snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        const int rw = open(path, O_RDWR | O_CLOEXEC);
        if (rw >= 0) {
          void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, rw, 0);
          if (p != MAP_FAILED) fail("the worker page writable through /proc/self/fd");
          if (pwrite(rw, &v, sizeof v, 0) > 0) fail("the worker page written through /proc/self/fd");
          close(rw);
        }
        break;
      }
    }
  }

  void close_app(AppSide& a) {
    if (a.worker_page >= 0) close(a.worker_page);
    if (a.sock >= 0) close(a.sock);
    for (Cq& c : a.cqs)
      if (c.channel >= 0) close(c.channel);
    if (a.event_fd >= 0) close(a.event_fd);
    a = AppSide{};
  }

  // Sends one message (our descriptors are only lent: the kernel duplicates
  // them), lets the server serve it and takes its reply. False if the server
  // dropped us (the connection is then closed here too).
  bool transact(AppSide& a, const void* msg, std::size_t len, const int* fds, std::size_t nfds, Reply* rep,
                int* keep_first = nullptr) {
    if (a.sock < 0) return false;
    if (send_message(a.sock, msg, len, fds, nfds) < 0) {
      close_app(a);
      poll();
      return false;
    }
    poll();
    int rfds[kMaxFdsPerMessage];
    std::size_t nr = 0;
    std::memset(rep, 0, sizeof *rep);
    ssize_t n = recv_message(a.sock, rep, sizeof *rep, rfds, kMaxFdsPerMessage, &nr, true);
    for (std::size_t i = 0; i < nr; ++i) {
      if (i == 0 && keep_first != nullptr && n == static_cast<ssize_t>(sizeof *rep) && rep->hdr.status == 0) {
        *keep_first = rfds[0];
        continue;
      }
      close(rfds[i]);
    }
    if (n != static_cast<ssize_t>(sizeof *rep)) {
      if (n == -EAGAIN) return false;  // no answer (yet): fine for a raw request
      close_app(a);
      poll();
      return false;
    }
    if (rep->hdr.magic != kProtocolMagic) fail("reply without magic");
    return true;
  }

  // Descriptors to attach, chosen by a byte: the ones a correct application
  // sends, none, an extra one, or the wrong kind.
  struct Fds {
    int fd[kMaxFdsPerMessage];
    std::size_t n = 0;
    std::vector<int> owned;
    ~Fds() {
      for (int f : owned) close(f);
    }
    void add(int f, bool own) {
      if (f < 0 || n == kMaxFdsPerMessage) return;
      fd[n++] = f;
      if (own) owned.push_back(f);
    }
  };
  static void add_odd_fd(Fds& f, uint8_t kind) {
    switch (kind % 4) {
      case 0:
        f.add(eventfd(0, EFD_CLOEXEC), true);
        break;
      case 1: {  // a memfd not sealed against shrinking
        int m = memfd_create("fuzz-unsealed", MFD_CLOEXEC);
        if (m >= 0 && ftruncate(m, 1 << 16) != 0) {
          close(m);
          m = -1;
        }
        f.add(m, true);
        break;
      }
      case 2: {
        int p[2];
        if (pipe2(p, O_CLOEXEC) == 0) {
          f.add(p[0], true);
          close(p[1]);
        }
        break;
      }
      default:
        f.add(open("/dev/null", O_RDONLY | O_CLOEXEC), true);
        break;
    }
  }
  // mode: 0 the right ones, 1 none, 2 the right ones and an odd one, 3 an odd one instead.
  static void choose_fds(Fds& f, uint8_t mode, const int* right, std::size_t nright) {
    switch (mode % 8) {
      case 1:
        break;
      case 2:
        for (std::size_t i = 0; i < nright; ++i) f.add(right[i], false);
        add_odd_fd(f, mode >> 3);
        break;
      case 3:
        add_odd_fd(f, mode >> 3);
        break;
      default:  // mostly the right ones
        for (std::size_t i = 0; i < nright; ++i) f.add(right[i], false);
        break;
    }
  }

  Request request(AppSide& a, MsgType t) {
    Request r{};
    r.hdr.magic = kProtocolMagic;
    r.hdr.type = static_cast<uint16_t>(t);
    r.hdr.seq = ++a.seq;
    return r;
  }

  // Region sizes: byte 0 the exact layout size, else a few shorter and longer ones.
  static std::size_t region_bytes(std::size_t exact, uint8_t mode) {
    switch (mode % 8) {
      case 1:
        return exact > 64 ? exact - 64 : 1;
      case 2:
        return exact + (std::size_t{4} << 20);  // larger than the server accepts for rings
      default:
        return exact;
    }
  }

  static uint32_t depth_of(uint8_t b) { return b < 240 ? 1u << (b % 8) : b; }  // mostly powers of two

  void step(uint8_t op, Reader& in) {
    AppSide& a = apps_[in.u8() % kApps];
    switch (op) {
      case kOpHello: {
        if (a.sock < 0) connect_app(a);
        Request r = request(a, MsgType::kHello);
        r.body.hello.version_min = in.u8() % 3;
        r.body.hello.version_max = in.u8() % 3;
        uint8_t v = in.u8();
        r.body.hello.vnic_ip = v % 4 == 0 ? 0 : v % 4 == 1 ? kVnic : in.u32();
        std::snprintf(r.body.hello.name, sizeof r.body.hello.name, "fuzz%u", a.seq);
        if (in.u8() % 16 == 0) std::memset(r.body.hello.name, 'x', sizeof r.body.hello.name);  // no NUL
        RegionPtr db = make_region(region_bytes(sizeof(DoorbellPage), in.u8()));
        Fds f;
        int right = db ? db->shm.fd() : -1;
        choose_fds(f, in.u8(), &right, db ? 1 : 0);
        Reply rep;
        int page = -1;
        if (transact(a, &r, sizeof r, f.fd, f.n, &rep, &page) && rep.hdr.status == 0) {
          a.app_id = rep.body.hello.app_id;
          a.doorbells = db;
          if (a.worker_page >= 0) close(a.worker_page);
          a.worker_page = page;
        } else if (page >= 0) {
          close(page);
        }
        break;
      }
      case kOpAllocPd: {
        Request r = request(a, MsgType::kAllocPd);
        Reply rep;
        if (transact(a, &r, sizeof r, nullptr, 0, &rep) && rep.hdr.status == 0) a.pds.push_back(rep.body.pd.pd);
        break;
      }
      case kOpDeallocPd: {
        Request r = request(a, MsgType::kDeallocPd);
        uint32_t* pd = pick(a.pds, in.u8());
        r.body.pd.pd = pd ? *pd : in.u32();
        Reply rep;
        transact(a, &r, sizeof r, nullptr, 0, &rep);
        break;
      }
      case kOpRegMr: {
        Request r = request(a, MsgType::kRegMr);
        uint32_t* pd = pick(a.pds, in.u8());
        r.body.reg_mr.pd = pd ? *pd : in.u32();
        uint8_t acc = in.u8();
        r.body.reg_mr.access = acc & 0x0F;  // LOCAL_WRITE, REMOTE_WRITE, REMOTE_READ, REMOTE_ATOMIC
        std::size_t bytes = 4096u * (1 + in.u8() % 4);
        uint8_t lm = in.u8();
        r.body.reg_mr.fd_offset = lm & 0x80 ? in.u32() : 64u * (lm & 0x0F);
        r.body.reg_mr.length = lm & 0x40 ? in.u64() : bytes - r.body.reg_mr.fd_offset % bytes - (lm & 0x30);
        r.body.reg_mr.addr = in.u64();
        RegionPtr mem = make_region(bytes);
        Fds f;
        int right = mem ? mem->shm.fd() : -1;
        choose_fds(f, in.u8(), &right, mem ? 1 : 0);
        Reply rep;
        if (transact(a, &r, sizeof r, f.fd, f.n, &rep) && rep.hdr.status == 0) {
          a.lkeys.push_back(rep.body.reg_mr.lkey);
          mr_mem_.push_back(mem);  // keep our side mapped while the input runs
        }
        break;
      }
      case kOpDeregMr: {
        Request r = request(a, MsgType::kDeregMr);
        uint32_t* k = pick(a.lkeys, in.u8());
        r.body.dereg_mr.lkey = k ? *k : in.u32();
        Reply rep;
        transact(a, &r, sizeof r, nullptr, 0, &rep);
        break;
      }
      case kOpCreateCq: {
        Request r = request(a, MsgType::kCreateCq);
        uint32_t depth = depth_of(in.u8());
        r.body.create_cq.depth = depth;
        uint8_t ch = in.u8();
        r.body.create_cq.has_channel = ch % 3 == 0 ? 1 : ch % 3 == 1 ? 0 : ch;
        uint8_t fl = in.u8();  // v2: mostly none or timestamps, sometimes any flags
        r.body.create_cq.flags = fl < 128 ? 0 : fl < 240 ? kCqWithTimestamps : fl;
        RegionPtr mem = make_region(region_bytes(cq_layout(depth % 4096, fl >= 128).bytes, in.u8()));
        int efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        int right[2] = {mem ? mem->shm.fd() : -1, efd};
        Fds f;
        choose_fds(f, in.u8(), right, r.body.create_cq.has_channel == 1 ? 2 : 1);
        Reply rep;
        if (transact(a, &r, sizeof r, f.fd, f.n, &rep) && rep.hdr.status == 0) {
          a.cqs.push_back(Cq{rep.body.cq.cq, depth, mem, efd});
        } else if (efd >= 0) {
          close(efd);
        }
        break;
      }
      case kOpDestroyCq: {
        Request r = request(a, MsgType::kDestroyCq);
        Cq* c = pick(a.cqs, in.u8());
        r.body.destroy_cq.cq = c ? c->handle : in.u32();
        Reply rep;
        transact(a, &r, sizeof r, nullptr, 0, &rep);
        break;
      }
      case kOpCreateQp: {
        Request r = request(a, MsgType::kCreateQp);
        CreateQpRequest& c = r.body.create_qp;
        uint32_t* pd = pick(a.pds, in.u8());
        c.pd = pd ? *pd : 0;
        Cq* scq = pick(a.cqs, in.u8());
        Cq* rcq = pick(a.cqs, in.u8());
        c.send_cq = scq ? scq->handle : 0;
        c.recv_cq = rcq ? rcq->handle : 0;
        c.sq_depth = depth_of(in.u8());
        c.rq_depth = depth_of(in.u8());
        uint8_t t = in.u8();
        c.qp_type = t % 8 == 7 ? IBV_QPT_UC : IBV_QPT_RC;
        c.sq_sig_all = t >> 7;
        uint8_t s = in.u8();
        Srq* srq = s % 2 ? pick(a.srqs, s >> 1) : nullptr;
        c.srq = srq ? srq->handle : 0;
        RegionPtr mem = make_region(region_bytes(qp_queue_layout(c.sq_depth % 4096, c.rq_depth % 4096).bytes, in.u8()));
        Fds f;
        int right = mem ? mem->shm.fd() : -1;
        choose_fds(f, in.u8(), &right, mem ? 1 : 0);
        Reply rep;
        if (transact(a, &r, sizeof r, f.fd, f.n, &rep) && rep.hdr.status == 0) {
          a.qps.push_back(Qp{rep.body.create_qp.qpn, rep.body.create_qp.doorbell_bit, c.sq_depth, c.rq_depth, mem});
        }
        break;
      }
      case kOpModifyQp: {
        Request r = request(a, MsgType::kModifyQp);
        ModifyQpRequest& m = r.body.modify_qp;
        Qp* q = pick(a.qps, in.u8());
        uint8_t how = in.u8();
        if (how % 8 == 7) {
          in.bytes(&m, sizeof m);  // any attributes
        } else {
          // The usual ladder: RESET, INIT, RTR, RTS, ERR (with what each step needs).
          const ibv_qp_state states[] = {IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPS_ERR};
          m.qp_state = states[how % 5];
          m.attr_mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
          m.qp_access_flags = in.u8() & 0x0F;
          m.port_num = 1;
          if (m.qp_state == IBV_QPS_RTR) {
            m.attr_mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
            m.path_mtu = IBV_MTU_1024;
            m.dest_qp_num = in.u16();
            m.rq_psn = in.u16();
          } else if (m.qp_state == IBV_QPS_RTS) {
            m.attr_mask = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                          IBV_QP_MAX_QP_RD_ATOMIC;
            m.sq_psn = in.u16();
          }
        }
        if (q != nullptr && how % 16 != 15) m.qpn = q->qpn;
        Reply rep;
        transact(a, &r, sizeof r, nullptr, 0, &rep);
        break;
      }
      case kOpDestroyQp:
      case kOpQueryQp: {
        Request r = request(a, op == kOpDestroyQp ? MsgType::kDestroyQp : MsgType::kQueryQp);
        Qp* q = pick(a.qps, in.u8());
        r.body.destroy_qp.qpn = q ? q->qpn : in.u32();  // query_qp.qpn is at the same place
        Reply rep;
        transact(a, &r, sizeof r, nullptr, 0, &rep);
        break;
      }
      case kOpCreateSrq: {
        Request r = request(a, MsgType::kCreateSrq);
        uint32_t* pd = pick(a.pds, in.u8());
        r.body.create_srq.pd = pd ? *pd : in.u32();
        r.body.create_srq.depth = depth_of(in.u8());
        r.body.create_srq.limit = in.u8() % 2 ? in.u16() : 0;  // v2: armed at creation
        RegionPtr mem = make_region(region_bytes(srq_layout(r.body.create_srq.depth % 4096).bytes, in.u8()));
        Fds f;
        int right = mem ? mem->shm.fd() : -1;
        choose_fds(f, in.u8(), &right, mem ? 1 : 0);
        Reply rep;
        if (transact(a, &r, sizeof r, f.fd, f.n, &rep) && rep.hdr.status == 0) {
          a.srqs.push_back(Srq{rep.body.create_srq.srq, rep.body.create_srq.doorbell_bit, r.body.create_srq.depth, mem});
        }
        break;
      }
      case kOpDestroySrq: {
        Request r = request(a, MsgType::kDestroySrq);
        Srq* s = pick(a.srqs, in.u8());
        r.body.destroy_srq.srq = s ? s->handle : in.u32();
        Reply rep;
        transact(a, &r, sizeof r, nullptr, 0, &rep);
        break;
      }
      case kOpRawRequest: {
        if (a.sock < 0 && in.u8() % 2 == 0) connect_app(a);
        uint8_t buf[sizeof(Request) + 16];
        in.bytes(buf, sizeof buf);
        uint8_t shape = in.u8();
        auto* hdr = reinterpret_cast<MsgHeader*>(buf);
        if (shape & 1) hdr->magic = kProtocolMagic;
        if (shape & 2) hdr->type = static_cast<uint16_t>(1 + hdr->type % 14);
        std::size_t len = shape & 4 ? sizeof(Request) : (shape & 8 ? sizeof buf : in.u8() % sizeof buf);
        Fds f;
        if (shape & 16) add_odd_fd(f, in.u8());
        if (shape & 32) {
          RegionPtr mem = make_region(4096u << (in.u8() % 6));
          if (mem) {
            f.add(dup(mem->shm.fd()), true);
            raw_mem_.push_back(mem);
          }
        }
        Reply rep;
        transact(a, buf, len, f.fd, f.n, &rep);
        break;
      }
      case kOpWriteSqWqe: {
        Qp* q = pick(a.qps, in.u8());
        uint16_t slot = in.u16();
        SendWqe w{};
        uint8_t mode = in.u8();
        if (mode % 4 == 3) {
          in.bytes(&w, sizeof w);
        } else {
          w.wr_id = in.u32();
          w.opcode = in.u8() % 8;  // 0..7: the valid ones and a few beyond
          w.send_flags = in.u8() & 0x0F;
          w.remote_addr = in.u64();
          w.rkey = in.u32();
          w.imm_data = in.u32();
          if (w.send_flags & IBV_SEND_INLINE) {
            w.inline_len = mode & 0x80 ? in.u16() : in.u8() % (kMaxInline + 1);
            in.bytes(w.inline_data, w.inline_len % (kMaxInline + 1));
          } else {
            w.num_sge = mode & 0x80 ? in.u8() : in.u8() % (kMaxSge + 1);
            fill_sges(a, in, w.sge, w.num_sge);
          }
        }
        if (q != nullptr) {
          QpQueueLayout l = qp_queue_layout(q->sq_depth, q->rq_depth);
          auto* e = reinterpret_cast<SendWqe*>(q->mem->shm.data() + l.sq_entries);
          e[slot & (q->sq_depth - 1)] = w;
        }
        break;
      }
      case kOpWriteRqWqe:
      case kOpWriteSrqWqe: {
        uint8_t idx = in.u8();
        uint16_t slot = in.u16();
        RecvWqe w{};
        uint8_t mode = in.u8();
        if (mode % 4 == 3) {
          in.bytes(&w, sizeof w);
        } else {
          w.wr_id = in.u32();
          w.num_sge = mode & 0x80 ? in.u32() : in.u8() % (kMaxSge + 1);
          fill_sges(a, in, w.sge, w.num_sge);
        }
        if (op == kOpWriteRqWqe) {
          if (Qp* q = pick(a.qps, idx)) {
            QpQueueLayout l = qp_queue_layout(q->sq_depth, q->rq_depth);
            reinterpret_cast<RecvWqe*>(q->mem->shm.data() + l.rq_entries)[slot & (q->rq_depth - 1)] = w;
          }
        } else if (Srq* s = pick(a.srqs, idx)) {
          reinterpret_cast<RecvWqe*>(s->mem->shm.data() + srq_layout(s->depth).entries)[slot & (s->depth - 1)] = w;
        }
        break;
      }
      case kOpPost:
      case kOpSetIndex: {
        // Which ring: 0 SQ, 1 RQ, 2 SRQ, 3 CQ. Post: producer += n and the doorbell.
        // Set: any field to any value (or a small step from where it is).
        uint8_t sel = in.u8();
        uint8_t idx = in.u8();
        RingControl* rc = nullptr;
        uint32_t bit = UINT32_MAX;
        switch (sel % 4) {
          case 0:
          case 1:
            if (Qp* q = pick(a.qps, idx)) {
              QpQueueLayout l = qp_queue_layout(q->sq_depth, q->rq_depth);
              rc = reinterpret_cast<RingControl*>(q->mem->shm.data() + (sel % 4 == 0 ? l.sq_control : l.rq_control));
              bit = q->bit;
            }
            break;
          case 2:
            if (Srq* s = pick(a.srqs, idx)) {
              rc = reinterpret_cast<RingControl*>(s->mem->shm.data());
              bit = s->bit;
            }
            break;
          default:
            if (Cq* c = pick(a.cqs, idx)) rc = reinterpret_cast<RingControl*>(c->mem->shm.data());
            break;
        }
        if (op == kOpPost) {
          uint8_t n = in.u8();
          if (rc != nullptr) rc->producer.fetch_add(n, std::memory_order_release);
          if (bit != UINT32_MAX) ring_doorbell(a, bit);
        } else {
          uint8_t field = in.u8();
          uint32_t v = in.u32();
          if (rc == nullptr) break;
          std::atomic<uint32_t>& f = field % 3 == 0 ? rc->producer : field % 3 == 1 ? rc->consumer : rc->completed;
          f.store(field & 0x80 ? v : f.load() + static_cast<int8_t>(v), std::memory_order_release);
        }
        break;
      }
      case kOpDoorbellWord: {
        uint16_t w = in.u16();
        uint64_t v = in.u64();
        if (a.doorbells == nullptr) break;
        auto* db = reinterpret_cast<DoorbellPage*>(a.doorbells->shm.data());
        if (w & 0x8000)
          db->summary[w % DoorbellPage::kSummaryWords].store(v, std::memory_order_release);
        else
          db->words[w % DoorbellPage::kWords].store(v, std::memory_order_release);
        break;
      }
      case kOpWorkerStep: {
        uint32_t ready[64];
        std::size_t burst = 1 + in.u8() % 32;
        std::size_t n = server_.ready_qps(std::span<uint32_t>(ready, 1 + in.u8() % 64));
        for (std::size_t i = 0; i < n; ++i) fetch(ready[i], burst);
        break;
      }
      case kOpFetchDirect: {
        Qp* q = pick(a.qps, in.u8());
        uint8_t how = in.u8();
        if (how & 1) {
          Srq* s = pick(a.srqs, in.u8());
          if (s != nullptr) fetch(kSrqDoorbell | s->handle, 1 + how % 32);
        } else {
          fetch(q != nullptr ? q->qpn : in.u32(), 1 + how % 32);
        }
        break;
      }
      case kOpComplete: {
        uint8_t n = in.u8();
        for (uint8_t k = 0; k < n % 16 && !held_.empty(); ++k) {
          uint8_t st = in.u8();
          const Held& h = held_[st % held_.size()];
          ibv_wc_status status = st & 0x80 ? static_cast<ibv_wc_status>(st % 22) : IBV_WC_SUCCESS;
          if (h.send) {
            server_.complete_send(h.qpn, h.s, status);
          } else {
            server_.complete_recv(h.qpn, h.r, status, in.u32(), st & 0x40 ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV,
                                  st & 0x20, in.u32(), in.u32());
          }
          held_.erase(held_.begin() + st % held_.size());
        }
        break;
      }
      case kOpTranslateRemote: {
        Qp* q = pick(a.qps, in.u8());
        uint32_t* k = pick(a.lkeys, in.u8());
        uint32_t rkey = k ? *k : in.u32();
        uint64_t addr = in.u64();
        uint32_t len = in.u16();
        int access = in.u8() % 2 ? IBV_ACCESS_REMOTE_WRITE : IBV_ACCESS_REMOTE_READ;
        uint32_t qpn = q ? q->qpn : in.u32();
        uint8_t* p = server_.translate_remote(qpn, rkey, addr, len, access);
        if (p != nullptr) {
          const QpInfo* info = server_.qp_info(qpn);
          if (info == nullptr) fail("translate_remote answered for an unknown QP");
          check_segment(info->app_id, p, len);
        }
        break;
      }
      case kOpCloseApp:
        close_app(a);
        poll();
        break;
      case kOpDrainCq: {
        // What an application's poll_cq does: take what the worker wrote.
        Cq* c = pick(a.cqs, in.u8());
        if (c == nullptr) break;
        auto* rc = reinterpret_cast<RingControl*>(c->mem->shm.data());
        rc->consumer.store(rc->producer.load(std::memory_order_acquire), std::memory_order_release);
        break;
      }
      case kOpQpError: {
        Qp* q = pick(a.qps, in.u8());
        server_.qp_error(q ? q->qpn : in.u32());
        break;
      }
      case kOpArmCq: {
        Cq* c = pick(a.cqs, in.u8());
        if (c == nullptr) break;
        auto* n = reinterpret_cast<CqNotify*>(c->mem->shm.data() + cq_layout(c->depth).notify);
        n->armed.store(in.u8(), std::memory_order_release);
        break;
      }
      case kOpSilentConnect: {  // a connection that never says hello (up to 8 held)
        if (silent_.size() >= 8) {
          close(silent_.front());
          silent_.erase(silent_.begin());
          silent_since_.erase(silent_since_.begin());
        }
        int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        sockaddr_un sa{};
        sa.sun_family = AF_UNIX;
        std::snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path_.c_str());
        const bool ok = s >= 0 && connect(s, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0;
        if (!ok && s >= 0) close(s);
        poll();  // accepted here, at now_
        if (ok) {
          silent_.push_back(s);
          silent_since_.push_back(now_);
        }
        break;
      }
      case kOpAdvanceClock: {  // time passes: silent connections past the hello timeout must go
        now_ += cfg_.hello_timeout_ns / 4 * (1 + in.u8() % 8);
        poll();
        for (std::size_t i = 0; i < silent_.size();) {
          char b;
          if (recv(silent_[i], &b, 1, MSG_DONTWAIT) == 0) {  // closed by the worker (evicted or timed out)
            close(silent_[i]);
            silent_.erase(silent_.begin() + static_cast<std::ptrdiff_t>(i));
            silent_since_.erase(silent_since_.begin() + static_cast<std::ptrdiff_t>(i));
            continue;
          }
          if (now_ - silent_since_[i] > cfg_.hello_timeout_ns) fail("a silent connection outlived the hello timeout");
          ++i;
        }
        break;
      }
      case kOpPokeWorkerPage:
        if (a.worker_page >= 0) poke_worker_page(a.worker_page, in.u8());
        break;
      case kOpAsyncEvents: {
        Request r = request(a, MsgType::kAsyncEvents);
        RegionPtr mem = make_region(region_bytes(async_event_layout().bytes, in.u8()));
        int efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        int right[2] = {mem ? mem->shm.fd() : -1, efd};
        Fds f;
        choose_fds(f, in.u8(), right, 2);
        Reply rep;
        if (transact(a, &r, sizeof r, f.fd, f.n, &rep) && rep.hdr.status == 0 && a.events == nullptr) {
          a.events = mem;
          a.event_fd = efd;
        } else if (efd >= 0) {
          close(efd);
        }
        break;
      }
      case kOpModifySrq: {
        Request r = request(a, MsgType::kModifySrq);
        Srq* s = pick(a.srqs, in.u8());
        r.body.modify_srq.srq = s ? s->handle : in.u32();
        uint8_t how = in.u8();
        r.body.modify_srq.limit = how % 4 == 3 ? in.u32() : in.u8();  // mostly within the depth
        Reply rep;
        transact(a, &r, sizeof r, nullptr, 0, &rep);
        break;
      }
      case kOpSrqLimit: {  // the worker's check after it took WQEs from an SRQ
        Srq* s = pick(a.srqs, in.u8());
        server_.check_srq_limit(s ? s->handle : in.u32(), in.u16());
        break;
      }
      case kOpPortState:
        server_.set_port_active(in.u8() % 2);
        break;
      case kOpEventIndex: {
        // The application owns the ring's consumer index: it may read what was written, or lie.
        if (a.events == nullptr) break;
        auto* rc = reinterpret_cast<RingControl*>(a.events->shm.data() + async_event_layout().control);
        uint8_t how = in.u8();
        uint32_t v = how % 2 ? in.u32() : rc->producer.load(std::memory_order_acquire);
        rc->consumer.store(v, std::memory_order_release);
        break;
      }
      case kOpPoll:
      default:
        poll();
        break;
    }
  }

  void fill_sges(AppSide& a, Reader& in, WqeSge* sge, uint32_t count) {
    for (uint32_t i = 0; i < count && i < kMaxSge; ++i) {
      uint8_t m = in.u8();
      uint32_t* k = pick(a.lkeys, m);
      // Mostly an own key; sometimes the other application's, or any number.
      if (m & 0x80) k = pick(apps_[1 - (&a - apps_)].lkeys, m);
      sge[i].lkey = k != nullptr && (m & 0x40) == 0 ? *k : in.u32();
      sge[i].offset = m & 0x20 ? in.u64() : in.u16();
      sge[i].length = m & 0x10 ? in.u32() : in.u16();
    }
  }

  void ring_doorbell(AppSide& a, uint32_t bit) {
    if (a.doorbells == nullptr || bit >= kMaxQpsPerApp) return;
    auto* db = reinterpret_cast<DoorbellPage*>(a.doorbells->shm.data());
    db->words[bit / 64].fetch_or(uint64_t{1} << (bit % 64), std::memory_order_release);
    db->summary[bit / 4096].fetch_or(uint64_t{1} << (bit / 64 % 64), std::memory_order_release);
  }

  void connect_app(AppSide& a) {
    close_app(a);
    int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path_.c_str());
    if (s < 0 || connect(s, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) fail("cannot connect");
    a.sock = s;
    poll();  // accept
  }

  // The segment [p, p+len) must be inside a registered MR of application app_id.
  void check_segment(uint32_t app_id, const uint8_t* p, uint64_t len) {
    for (const auto& [key, mr] : mrs_) {
      if (mr.app_id == app_id && p >= mr.addr && len <= mr.length && static_cast<uint64_t>(p - mr.addr) <= mr.length - len) {
        if (len > 0) {  // the memory must be mapped: touch both ends
          volatile uint8_t x = p[0];
          x = p[len - 1];
          (void)x;
        }
        return;
      }
    }
    fail("a segment outside every MR of its application");
  }

  uint32_t srq_app(uint32_t handle) {
    for (AppSide& a : apps_)
      for (Srq& s : a.srqs)
        if (s.handle == (handle & ~kSrqDoorbell)) return a.app_id;
    return 0;
  }

  void check_recv(uint32_t app_id, const RecvWork& w) {
    if (w.num_sge > kMaxSge) fail("recv: too many SGEs");
    uint64_t total = 0;
    for (uint32_t i = 0; i < w.num_sge; ++i) {
      check_segment(app_id, w.sge[i].addr, w.sge[i].length);
      total += w.sge[i].length;
    }
    if (total != w.length) fail("recv: length is not the sum of its SGEs");
  }

  void fetch(uint32_t id, std::size_t burst) {
    SendWork sends[32];
    RecvWork recvs[32];
    if (id & kSrqDoorbell) {
      uint32_t app_id = srq_app(id);
      std::size_t n = server_.fetch_srq_recv(id, std::span<RecvWork>(recvs, burst));
      if (n > 0 && app_id == 0) fail("an SRQ we do not own handed out work");
      for (std::size_t i = 0; i < n; ++i) {
        check_recv(app_id, recvs[i]);
        hold(false, 0, nullptr, &recvs[i]);  // completed on a QP of ours later, maybe
      }
      return;
    }
    const QpInfo* info = server_.qp_info(id);
    std::size_t n = server_.fetch_send(id, std::span<SendWork>(sends, burst));
    if (n > 0 && info == nullptr) fail("fetch_send: work from an unknown QP");
    for (std::size_t i = 0; i < n; ++i) {
      const SendWork& w = sends[i];
      if (w.num_sge > kMaxSge || w.inline_len > kMaxInline) fail("send: SGE count or inline length");
      if (w.inline_len > 0) {
        if (w.length != w.inline_len) fail("send: inline length");
      } else {
        uint64_t total = 0;
        for (uint32_t j = 0; j < w.num_sge; ++j) {
          check_segment(info->app_id, w.sge[j].addr, w.sge[j].length);
          total += w.sge[j].length;
        }
        if (total != w.length) fail("send: length is not the sum of its SGEs");
      }
      hold(true, id, &w, nullptr);
    }
    info = server_.qp_info(id);
    n = server_.fetch_recv(id, std::span<RecvWork>(recvs, burst));
    if (n > 0 && info == nullptr) fail("fetch_recv: work from an unknown QP");
    for (std::size_t i = 0; i < n; ++i) {
      check_recv(info->app_id, recvs[i]);
      hold(false, id, nullptr, &recvs[i]);
    }
  }

  void hold(bool send, uint32_t qpn, const SendWork* s, const RecvWork* r) {
    if (held_.size() >= 256) held_.erase(held_.begin());  // the transport dropped it (never completed)
    Held h{};
    h.send = send;
    h.qpn = qpn;
    if (s) h.s = *s;
    if (r) h.r = *r;
    if (!send && qpn == 0 && !apps_[0].qps.empty()) h.qpn = apps_[0].qps[0].qpn;  // an SRQ receive lands on some QP
    held_.push_back(h);
  }

  HostServer server_;
  std::string path_;
  uint64_t now_ = 1'000'000'000;
  AppSide apps_[kApps];
  std::map<uint32_t, MrRange> mrs_;  // lkey -> the worker's view, from events
  std::vector<Held> held_;
  std::vector<RegionPtr> mr_mem_, raw_mem_;
  ServerConfig cfg_;
  std::vector<int> silent_;            // connections that never said hello
  std::vector<uint64_t> silent_since_;  // now_ when each was accepted
};

ServerConfig make_config() {
  ServerConfig cfg;
  cfg.socket_path = "/tmp/tandem-fuzz-host-" + std::to_string(getpid()) + ".sock";
  cfg.max_apps = 4;
  cfg.max_qps = 64;
  cfg.max_cqs = 64;
  cfg.max_mrs = 64;
  cfg.max_queue_depth = 256;        // rings small enough to create per input
  cfg.max_mr_bytes = 1u << 20;
  // Retired mappings go once its events are drained (next_event): stale use faults.
  cfg.vnic_ips = {kVnic};
  // Fair shares on, small enough to be reached within an input.
  cfg.max_srqs = 3;
  cfg.hello_timeout_ns = 50'000'000;  // each poll advances the clock 1 ms
  cfg.max_silent_per_uid = 2;
  cfg.qp_worker_bytes = [](uint32_t sq, uint32_t rq, bool on_srq, bool) {
    return uint64_t{sq} * 256 + (on_srq ? 0 : uint64_t{rq} * 128) + 4096;
  };
  cfg.srq_worker_bytes = [](uint32_t depth) { return uint64_t{depth} * 128 + 1024; };
  auto& v = cfg.limits.per_vnic;
  auto& p = cfg.limits.per_app;
  v[resource_index(Resource::kQps)] = 6;
  v[resource_index(Resource::kCqs)] = 6;
  v[resource_index(Resource::kMrs)] = 8;
  v[resource_index(Resource::kPds)] = 4;
  v[resource_index(Resource::kSrqs)] = 2;
  v[resource_index(Resource::kBytes)] = 24 * 1024;
  v[resource_index(Resource::kQueueBytes)] = 512 * 1024;
  p[resource_index(Resource::kQps)] = 4;
  p[resource_index(Resource::kQueueBytes)] = 256 * 1024;
  return cfg;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  static const ServerConfig cfg = make_config();
  Reader in(data, size);
  Harness h(cfg);
  h.run(in);
  return 0;
}
