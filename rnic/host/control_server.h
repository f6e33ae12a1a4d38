// The host server's control half: the control thread's only (rnic/host/
// README.md "Two halves"). It accepts applications on the Unix socket,
// answers their requests (attach, PDs, MRs, CQs, QPs, SRQs), maps their
// memfds, has the device map MRs, allocates handles and doorbell bits, keeps
// PD/CQ/SRQ reference counts and the fair shares, and notices deaths. Each
// finished object goes to the fast half (FastPath, the data lcore) as one
// message on the link (host_link.h); the reply to the application waits for
// the fast half's answer. Mappings the fast half let go of are unmapped here
// once the port and the device let go too.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "rnic/host/host_protocol.h"
#include "rnic/host/host_status.h"
#include "rnic/host/resource_quota.h"
#include "rnic/host/server_types.h"
#include "rnic/host/shm_region.h"

namespace tandem::rnic::host {

struct HostLink;
struct ControlMsg;
struct ControlResult;

class ControlServer {
 public:
  // Binds and listens (an existing socket file is replaced). Throws
  // std::runtime_error on failure: start-up only.
  explicit ControlServer(const ServerConfig& config);
  ~ControlServer();
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  // ServerConfig::mr_in_flight, set before the control thread starts (the
  // port's device exists only after the server).
  void set_mr_in_flight(std::function<bool(uint32_t mr_index)> f) { config_.mr_in_flight = std::move(f); }
  uint32_t max_mrs() const noexcept { return config_.max_mrs; }

  // Each control change then waits for the fast half to apply it (so a reply
  // never precedes what it promises): call before starting the threads.
  void set_threaded(bool threaded) noexcept { threaded_ = threaded; }
  // Accepts applications, answers their requests, notices the ones that went
  // away, releases retired mappings. Blocks in epoll_wait up to timeout_ms.
  // `now` must come from the same clock as apply_control's.
  void serve_control(uint64_t now, int timeout_ms);
  // A control thread waiting for the fast half gives up (the lcore stopped).
  void stop_control() noexcept { stopping_.store(true, std::memory_order_release); }
  // Serve the application on connected socket `fd` (placed here by the
  // port's listening server). Takes the fd (closed on refusal).
  void adopt(int fd);
  // What serve_control waits on (epoll: the socket, applications, the wake eventfd).
  int wait_fd() const noexcept { return epoll_fd_; }

  // Accounting: the control thread, or poll()'s thread.
  HostMemory memory() const noexcept;  // the control half's tables (HostServer::memory adds the fast half's)
  std::size_t app_count() const noexcept;
  std::size_t list_apps(std::span<AppInfo> out) const noexcept;
  std::size_t qp_count() const noexcept { return qp_count_; }
  std::size_t cq_count() const noexcept { return cq_count_; }
  std::size_t mr_count() const noexcept { return mr_count_; }
  std::size_t srq_count() const noexcept { return srq_count_; }
  // Per-vNIC usage and refusals against ServerConfig::limits: any thread.
  const TenantQuotas& quotas() const noexcept;

  // The records (control_records.h).
  struct App;
  struct QpCtl;
  struct CqCtl;
  struct MrCtl;
  struct PdSlot;
  struct SrqCtl;

 protected:
  // For the fast half's construction (HostServer).
  const ServerConfig& config() const noexcept { return config_; }
  HostLink& link() noexcept { return *link_; }

 private:
  // control_server.cc: sockets, attach, the handoff, teardown.
  void listen_on();  // the socket applications connect to (ServerConfig::listen)
  void accept_apps();
  // Closes silent connections past hello_timeout_ns (a scan only while any exist).
  void expire_silent();
  // Closes the oldest silent connection (of `uid`, or of anyone if any_uid) with no
  // message waiting; false if there is none.
  bool evict_silent(uint32_t uid, bool any_uid);
  void serve(uint32_t app_index);
  void handle(uint32_t app_index, const Request& req, int* fds, std::size_t nfds,
              Reply* rep, int* rfds, std::size_t* nrfds);
  void drop_app(uint32_t app_index, bool died);
  void retire(ShmRegion&& region, bool device_mapped = false, uint32_t mr_index = UINT32_MAX);
  bool release_retired(int budget);  // budget: device unmaps; true if more are due
  // Hands msg to the fast half and waits until it is applied (threaded), or
  // applies it here (poll()). False if the lcore stopped before applying it.
  bool send_to_fast(ControlMsg& msg, ControlResult* result = nullptr);
  void count(std::atomic<uint64_t>& c) noexcept { c.fetch_add(1, std::memory_order_relaxed); }
  Status on_hello(App& app, uint32_t app_index, const Request& req, int* fds, std::size_t nfds,
                  Reply* rep, int* rfds, std::size_t* nrfds);
  Status on_async_events(App& app, uint32_t app_index, int* fds, std::size_t nfds);
  bool may_attach(const App& app, uint32_t vnic_ip);  // takes the link's vnic_mu

  // control_objects.cc: each handler fills the reply body, returns its status.
  Status on_alloc_pd(App& app, Reply* rep);
  Status on_dealloc_pd(App& app, const Request& req);
  Status on_reg_mr(App& app, const Request& req, int* fds, std::size_t nfds, Reply* rep);
  Status on_dereg_mr(App& app, const Request& req);
  Status on_rereg_mr(App& app, const Request& req);
  Status on_resize_cq(App& app, const Request& req, int* fds, std::size_t nfds);
  Status on_create_cq(App& app, const Request& req, int* fds, std::size_t nfds, Reply* rep);
  Status on_destroy_cq(App& app, const Request& req);
  Status on_create_qp(App& app, uint32_t app_index, const Request& req, int* fds, std::size_t nfds,
                      Reply* rep);
  Status on_modify_qp(App& app, const Request& req, Reply* rep);
  Status on_destroy_qp(App& app, const Request& req);
  Status on_query_qp(App& app, const Request& req, Reply* rep);
  Status on_create_srq(App& app, uint32_t app_index, const Request& req, int* fds, std::size_t nfds,
                       Reply* rep);
  Status on_destroy_srq(App& app, const Request& req);
  Status on_modify_srq(App& app, const Request& req);
  QpCtl* find_qp_ctl(uint32_t qpn) noexcept;
  CqCtl* find_cq_ctl(uint32_t handle) noexcept;
  MrCtl* find_mr_ctl(uint32_t key) noexcept;
  SrqCtl* find_srq_ctl(uint32_t handle) noexcept;
  // The usage of the application at `index` if it is still `id` (null: it is gone).
  ResourceAmounts* usage_of(uint32_t index, uint32_t id) noexcept;
  // An application's doorbell bits (QPs and SRQs share them): take one
  // (UINT32_MAX: none left), give it back.
  static uint32_t take_doorbell_bit(App& app) noexcept;
  void give_doorbell_bit(uint32_t app_index, uint32_t app_id, uint32_t bit);
  // A reference on the application's PD `pd` (false: not its PD), and its release.
  bool take_pd_ref(uint32_t pd, uint32_t app_id) noexcept;
  void drop_pd_ref(uint32_t pd) noexcept;
  // Control-side releases, once the fast half dropped the object.
  void free_qp(uint32_t index, bool died);
  void free_cq(uint32_t index);
  void free_mr(uint32_t index);
  void free_pd(uint32_t index);  // gives its quota back
  void free_srq(uint32_t index);

  ServerConfig config_;
  std::unique_ptr<HostLink> link_;  // what the fast half shares with us
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  ShmRegion worker_page_;

  bool threaded_ = false;
  std::atomic<bool> stopping_{false};
  uint64_t now_ = 0;
  uint32_t next_app_id_ = 1;
  uint64_t sent_seq_ = 0;
  std::vector<std::unique_ptr<App>> apps_;  // index = epoll tag - 2; nullptr when free
  std::vector<QpCtl> qps_ctl_;
  std::vector<uint32_t> free_qps_;
  std::vector<CqCtl> cqs_ctl_;
  std::vector<uint32_t> free_cqs_;
  std::vector<MrCtl> mrs_ctl_;
  std::vector<uint32_t> free_mrs_;
  std::vector<PdSlot> pds_;
  std::vector<uint32_t> free_pds_;
  std::vector<SrqCtl> srqs_ctl_;
  std::vector<uint32_t> free_srqs_;
  std::size_t srq_count_ = 0;
  std::size_t qp_count_ = 0;
  std::size_t cq_count_ = 0;
  std::size_t mr_count_ = 0;
  std::atomic<std::size_t> mapped_bytes_{0};
  std::atomic<std::size_t> retired_bytes_{0};
  // A mapping the fast half has let go of. It is unmapped once the port has
  // consumed the events of every message up to `seq` (the link's
  // consumed_seq: the transport dropped the object too, and checks a
  // region's key before each use) and, for an MR, once the device holds none
  // of its payloads; no fixed grace period. An MR's slot is reused only then.
  struct Retired {
    ShmRegion region;
    uint64_t seq;         // sent_seq_ when retired
    bool device_mapped;   // an MR mapping given to the DeviceMapper
    uint32_t mr_index;    // its MR slot (UINT32_MAX: not an MR)
  };
  std::deque<Retired> retired_;
  std::size_t silent_count_ = 0;  // connections that have not said hello yet
  std::shared_ptr<TenantQuotas> quotas_;  // the fair shares: taken at create, given back at free
};

}  // namespace tandem::rnic::host
