// etcd v3 over gRPC: the stubs protoc generated from etcd's rpc.proto.
#include "dpu/fleet/etcd_client.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <fstream>
#include <mutex>
#include <sstream>

#include "etcd/etcdserver/etcdserverpb/rpc.grpc.pb.h"

namespace tandem::dpu::fleet {

namespace pb = etcdserverpb;

std::string prefix_end(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    if (static_cast<unsigned char>(end.back()) < 0xFF) {
      end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

namespace {

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw EtcdError("cannot read " + path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// "a:1,http://b:2" -> a gRPC target over all of them ("ipv4:a:1,b:2" when
// they are IPv4 literals; else the first, resolved by DNS).
std::string grpc_target(const std::string& endpoints) {
  std::vector<std::string> eps;
  std::stringstream in(endpoints);
  for (std::string e; std::getline(in, e, ',');) {
    for (const char* scheme : {"http://", "https://"})
      if (e.rfind(scheme, 0) == 0) e = e.substr(std::string(scheme).size());
    if (!e.empty()) eps.push_back(e);
  }
  if (eps.empty()) throw EtcdError("no etcd endpoint given");
  bool ipv4 = true;
  for (const std::string& e : eps)
    for (char c : e.substr(0, e.rfind(':')))
      if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.')) ipv4 = false;
  if (!ipv4) return "dns:///" + eps[0];
  std::string t = "ipv4:";
  for (std::size_t i = 0; i < eps.size(); ++i) t += (i ? "," : "") + eps[i];
  return t;
}

EtcdError status_error(const char* what, const grpc::Status& s) {
  // etcd says "mvcc: required revision has been compacted" (OUT_OF_RANGE).
  bool compacted = s.error_code() == grpc::StatusCode::OUT_OF_RANGE &&
                   s.error_message().find("compacted") != std::string::npos;
  return EtcdError(std::string("etcd ") + what + ": " + s.error_message() + " (gRPC code " +
                       std::to_string(static_cast<int>(s.error_code())) + ")",
                   compacted);
}

}  // namespace

struct EtcdClient::Impl {
  EtcdOptions o;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<pb::KV::Stub> kv;
  std::unique_ptr<pb::Watch::Stub> watch;
  std::unique_ptr<pb::Lease::Stub> lease;
  std::string token;
  std::mutex mu;
  grpc::ClientContext* watching = nullptr;
  bool cancelled = false;

  void setup(grpc::ClientContext& ctx, bool deadline = true) {
    if (deadline) ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(o.timeout_ms));
    std::lock_guard<std::mutex> g(mu);
    if (!token.empty()) ctx.AddMetadata("token", token);
  }

  void authenticate() {
    auto auth = pb::Auth::NewStub(channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(o.timeout_ms));
    pb::AuthenticateRequest req;
    req.set_name(o.user);
    req.set_password(o.password);
    pb::AuthenticateResponse resp;
    grpc::Status s = auth->Authenticate(&ctx, req, &resp);
    if (!s.ok()) throw status_error("authenticate", s);
    std::lock_guard<std::mutex> g(mu);
    token = resp.token();
  }
};

EtcdClient::EtcdClient(const EtcdOptions& o) : impl_(std::make_unique<Impl>()) {
  impl_->o = o;
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (!o.cacert.empty()) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = read_file(o.cacert);
    if (!o.cert.empty()) ssl.pem_cert_chain = read_file(o.cert);
    if (!o.key.empty()) ssl.pem_private_key = read_file(o.key);
    creds = grpc::SslCredentials(ssl);
  } else {
    creds = grpc::InsecureChannelCredentials();
  }
  grpc::ChannelArguments args;
  args.SetLoadBalancingPolicyName("round_robin");  // a dead member drops out of the rotation
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 2000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 2000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, -1);
  impl_->channel = grpc::CreateCustomChannel(grpc_target(o.endpoints), creds, args);
  impl_->kv = pb::KV::NewStub(impl_->channel);
  impl_->watch = pb::Watch::NewStub(impl_->channel);
  impl_->lease = pb::Lease::NewStub(impl_->channel);
  if (!o.user.empty() && o.authenticate_now) impl_->authenticate();
}

void EtcdClient::refresh_token() {
  if (!impl_->o.user.empty()) impl_->authenticate();
}

EtcdClient::~EtcdClient() = default;

RangeResult EtcdClient::range_prefix(const std::string& prefix, int64_t revision) {
  grpc::ClientContext ctx;
  impl_->setup(ctx);
  pb::RangeRequest req;
  req.set_key(prefix);
  req.set_range_end(prefix_end(prefix));
  req.set_revision(revision);
  pb::RangeResponse resp;
  grpc::Status s = impl_->kv->Range(&ctx, req, &resp);
  if (!s.ok()) throw status_error("range", s);
  RangeResult r;
  r.revision = revision ? revision : resp.header().revision();
  r.kvs.reserve(resp.kvs_size());
  for (const auto& kv : resp.kvs())
    r.kvs.push_back(KeyValue{kv.key(), kv.value(), kv.create_revision(), kv.mod_revision(), kv.lease()});
  return r;
}

std::optional<KeyValue> EtcdClient::get(const std::string& key) {
  grpc::ClientContext ctx;
  impl_->setup(ctx);
  pb::RangeRequest req;
  req.set_key(key);
  pb::RangeResponse resp;
  grpc::Status s = impl_->kv->Range(&ctx, req, &resp);
  if (!s.ok()) throw status_error("get", s);
  if (resp.kvs_size() == 0) return std::nullopt;
  const auto& kv = resp.kvs(0);
  return KeyValue{kv.key(), kv.value(), kv.create_revision(), kv.mod_revision(), kv.lease()};
}

std::pair<int64_t, int64_t> EtcdClient::newest_mod_revision(const std::string& prefix) {
  grpc::ClientContext ctx;
  impl_->setup(ctx);
  pb::RangeRequest req;
  req.set_key(prefix);
  req.set_range_end(prefix_end(prefix));
  req.set_limit(1);
  req.set_sort_target(pb::RangeRequest::MOD);
  req.set_sort_order(pb::RangeRequest::DESCEND);
  req.set_keys_only(true);
  pb::RangeResponse resp;
  grpc::Status s = impl_->kv->Range(&ctx, req, &resp);
  if (!s.ok()) throw status_error("range", s);
  return {resp.kvs_size() ? resp.kvs(0).mod_revision() : 0, resp.header().revision()};
}

int64_t EtcdClient::put(const std::string& key, const std::string& value, int64_t lease) {
  grpc::ClientContext ctx;
  impl_->setup(ctx);
  pb::PutRequest req;
  req.set_key(key);
  req.set_value(value);
  req.set_lease(lease);
  pb::PutResponse resp;
  grpc::Status s = impl_->kv->Put(&ctx, req, &resp);
  if (!s.ok()) throw status_error("put", s);
  return resp.header().revision();
}

int64_t EtcdClient::del(const std::string& key, bool prefix) {
  grpc::ClientContext ctx;
  impl_->setup(ctx);
  pb::DeleteRangeRequest req;
  req.set_key(key);
  if (prefix) req.set_range_end(prefix_end(key));
  pb::DeleteRangeResponse resp;
  grpc::Status s = impl_->kv->DeleteRange(&ctx, req, &resp);
  if (!s.ok()) throw status_error("delete", s);
  return resp.deleted();
}

std::pair<bool, int64_t> EtcdClient::txn(const std::vector<TxnCompare>& cmp, const std::vector<TxnOp>& ops) {
  grpc::ClientContext ctx;
  impl_->setup(ctx);
  pb::TxnRequest req;
  for (const TxnCompare& c : cmp) {
    pb::Compare* x = req.add_compare();
    x->set_key(c.key);
    x->set_result(pb::Compare::EQUAL);
    if (c.target == TxnCompare::Target::kCreateRevision) {
      x->set_target(pb::Compare::CREATE);
      x->set_create_revision(c.value);
    } else {
      x->set_target(pb::Compare::MOD);
      x->set_mod_revision(c.value);
    }
  }
  for (const TxnOp& op : ops) {
    pb::RequestOp* r = req.add_success();
    if (op.value) {
      pb::PutRequest* p = r->mutable_request_put();
      p->set_key(op.key);
      p->set_value(*op.value);
      p->set_lease(op.lease);
    } else {
      r->mutable_request_delete_range()->set_key(op.key);
    }
  }
  pb::TxnResponse resp;
  grpc::Status s = impl_->kv->Txn(&ctx, req, &resp);
  if (!s.ok()) throw status_error("txn", s);
  return {resp.succeeded(), resp.header().revision()};
}

void EtcdClient::compact(int64_t revision) {
  grpc::ClientContext ctx;
  impl_->setup(ctx);
  pb::CompactionRequest req;
  req.set_revision(revision);
  pb::CompactionResponse resp;
  grpc::Status s = impl_->kv->Compact(&ctx, req, &resp);
  if (!s.ok()) throw status_error("compact", s);
}

int64_t EtcdClient::lease_grant(int64_t ttl_s) {
  grpc::ClientContext ctx;
  impl_->setup(ctx);
  pb::LeaseGrantRequest req;
  req.set_ttl(ttl_s);
  pb::LeaseGrantResponse resp;
  grpc::Status s = impl_->lease->LeaseGrant(&ctx, req, &resp);
  if (!s.ok()) throw status_error("lease grant", s);
  if (!resp.error().empty()) throw EtcdError("etcd lease grant: " + resp.error());
  return resp.id();
}

int64_t EtcdClient::lease_keepalive(int64_t id) {
  // One request on the keep-alive stream, then closed: a renewal a second is
  // all the status lease needs.
  grpc::ClientContext ctx;
  impl_->setup(ctx);
  auto stream = impl_->lease->LeaseKeepAlive(&ctx);
  pb::LeaseKeepAliveRequest req;
  req.set_id(id);
  pb::LeaseKeepAliveResponse resp;
  if (!stream->Write(req) || !stream->Read(&resp)) {
    stream->WritesDone();
    grpc::Status s = stream->Finish();
    throw status_error("lease keep-alive", s.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "stream ended") : s);
  }
  stream->WritesDone();
  stream->Finish();
  return resp.ttl();
}

void EtcdClient::lease_revoke(int64_t id) {
  grpc::ClientContext ctx;
  impl_->setup(ctx);
  pb::LeaseRevokeRequest req;
  req.set_id(id);
  pb::LeaseRevokeResponse resp;
  grpc::Status s = impl_->lease->LeaseRevoke(&ctx, req, &resp);
  if (!s.ok()) throw status_error("lease revoke", s);
}

void EtcdClient::watch_prefix(const std::string& prefix, int64_t start_revision,
                              const std::function<void(std::vector<WatchEvent>&)>& on_events) {
  grpc::ClientContext ctx;
  impl_->setup(ctx, false);  // a watch lasts; keep-alives notice a dead member
  ctx.AddMetadata("hasleader", "true");  // etcd's require-leader: no silent watch on a cut-off member
  {
    std::lock_guard<std::mutex> g(impl_->mu);
    if (impl_->cancelled) return;
    impl_->watching = &ctx;
  }
  struct Clear {
    Impl* i;
    ~Clear() {
      std::lock_guard<std::mutex> g(i->mu);
      i->watching = nullptr;
    }
  } clear{impl_.get()};
  auto stream = impl_->watch->Watch(&ctx);
  pb::WatchRequest req;
  pb::WatchCreateRequest* c = req.mutable_create_request();
  c->set_key(prefix);
  c->set_range_end(prefix_end(prefix));
  c->set_start_revision(start_revision);
  if (!stream->Write(req)) {
    grpc::Status s = stream->Finish();
    throw status_error("watch", s);
  }
  pb::WatchResponse resp;
  std::vector<WatchEvent> events;
  while (stream->Read(&resp)) {
    if (resp.compact_revision() != 0)
      throw EtcdError("etcd watch: revision " + std::to_string(start_revision) + " is compacted (etcd keeps from " +
                          std::to_string(resp.compact_revision()) + ")",
                      true, resp.compact_revision());
    if (resp.canceled()) throw EtcdError("etcd watch cancelled: " + resp.cancel_reason());
    if (resp.events_size() == 0) continue;
    events.clear();
    events.reserve(resp.events_size());
    for (const auto& e : resp.events()) {
      const auto& kv = e.kv();
      events.push_back(WatchEvent{e.type() == mvccpb::Event::DELETE,
                                  KeyValue{kv.key(), kv.value(), kv.create_revision(), kv.mod_revision(), kv.lease()}});
    }
    on_events(events);
  }
  grpc::Status s = stream->Finish();
  {
    std::lock_guard<std::mutex> g(impl_->mu);
    if (impl_->cancelled) return;
  }
  throw status_error("watch", s.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "stream ended") : s);
}

void EtcdClient::cancel() {
  std::lock_guard<std::mutex> g(impl_->mu);
  impl_->cancelled = true;
  if (impl_->watching) impl_->watching->TryCancel();
}

}  // namespace tandem::dpu::fleet
