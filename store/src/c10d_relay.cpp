// The node-local relay of --worker-store relay: this node's workers talk PyTorch's TCPStore protocol to
// it (any torch version, as to the server; their connections are c10d_conn.hpp's), and it forwards their
// requests to node 0's workers' store over one connection in the tagged form (c10d_upstream.hpp,
// docs/protocol.md, "Relays"). Node 0 then sees one connection per node instead of one per rank.
#include <unistd.h>

#include <atomic>
#include <unordered_map>

#include <fmt/core.h>

#include "c10d_conn.hpp"
#include "c10d_loop.hpp"
#include "c10d_net.hpp"
#include "c10d_upstream.hpp"
#include "store/c10d_server.hpp"
#include "store/error.hpp"

namespace ddprun::store {

using c10d::Op;
using c10d::Request;

namespace {

// Ops whose answer node 0 sends back (the others are fire-and-forget in torch's protocol).
bool answered(Op op) {
  return op != Op::set && op != Op::append && op != Op::multi_set && op != Op::queue_push;
}
// Ops that change the store: a GET in flight is shared only with requests read before the next one.
bool writes(Op op) {
  return op == Op::set || op == Op::compare_set || op == Op::add || op == Op::delete_key ||
         op == Op::append || op == Op::multi_set || op == Op::queue_push || op == Op::queue_pop;
}

std::string coalesce_key(const Request& q) {
  std::string k(1, static_cast<char>(q.op));
  for (const auto& key : q.keys) c10d::put_bytes(k, key);
  return k;
}

c10d::UpstreamOptions upstream_options(const C10dRelayOptions& o) {
  return {o.upstream_host, o.upstream_port, o.source_host, o.connect_timeout};
}

}  // namespace

struct C10dRelay::Impl final : c10d::Dispatch {
  explicit Impl(C10dRelayOptions o);
  void start();
  void shutdown();

  // The workers' side.
  void on_request(c10d::Conn& w, Request& q) override;
  void on_close(c10d::Conn& w) override { detach_waits(w); }
  std::optional<std::string> refusal(const sockaddr_storage&) override {
    if (!up || up->dead()) return "node 0's store is gone";
    return std::nullopt;
  }
  void forward(c10d::Conn& w, Request& q);
  bool share(c10d::Conn& w, const Request& q, const std::string& key);
  void detach_waits(c10d::Conn& w);

  // Node 0's side.
  void on_answer(std::uint32_t tag, std::string_view body);

  struct Pending {
    Op op = Op::get;
    std::vector<std::uint64_t> workers;  // serials of the workers this answer goes to
    std::uint64_t epoch = 0;             // writes forwarded before it was sent
    std::string key;                     // its entry in `inflight`, when it may be shared
  };

  C10dRelayOptions opts;
  std::shared_ptr<C10dLoop> loop_owner;
  c10d::Loop& loop;
  c10d::Conns workers;
  std::unique_ptr<c10d::Upstream> up;
  std::uint16_t bound_port = 0;
  bool stopped = false;
  std::unordered_map<std::uint32_t, Pending> pending;
  std::unordered_map<std::string, std::uint32_t> inflight;
  // A worker's pending WAITs, by the tag they travel under.
  std::unordered_map<std::uint64_t, std::vector<std::uint32_t>> waits;
  std::uint64_t epoch = 0;
  std::uint32_t next_tag = 0;

  std::atomic<bool> connected{false};
  std::atomic<std::uint64_t> n_forwarded{0};
};

C10dRelay::Impl::Impl(C10dRelayOptions o)
    : opts(std::move(o)),
      loop_owner(opts.loop ? opts.loop : std::make_shared<C10dLoop>()),
      loop(C10dLoopAccess::of(*loop_owner)),
      workers(loop, *this, c10d::ConnOptions{opts, "worker store relay", "this node"}) {
  c10d::UpstreamHooks hooks;
  hooks.answer = [this](std::uint32_t tag, std::string_view body) { on_answer(tag, body); };
  hooks.state = [this](bool is_up) { connected = is_up; };
  hooks.gone = [this](const std::string& line, bool was_up) {
    // Lost with no worker connected, it is no news: this node's workers have ended, and node 0 closed its
    // store for the next attempt's round or at the job's end.
    if (!was_up || workers.size() > 0) workers.log(line);
    workers.close_all("node 0's store is gone");
  };
  up = std::make_unique<c10d::Upstream>(loop, upstream_options(opts), std::move(hooks));
}

void C10dRelay::Impl::start() {
  const int fd = c10d::listen_on(opts.host, opts.port);
  bound_port = c10d::local_port(fd);
  loop.call([this, fd] {
    workers.listen(fd);
    up->start();
  });
}

void C10dRelay::Impl::shutdown() {
  if (stopped) return;
  stopped = true;
  workers.close_listeners();
  workers.close_all("the relay stopped");
  up->stop();
  loop.retire(std::move(up));
}

void C10dRelay::Impl::on_request(c10d::Conn& w, Request& q) {
  switch (q.op) {
    case Op::validate:
      if (q.u32 != c10d::kValidateMagic) {
        throw Error(Error::Kind::protocol, "worker store relay: VALIDATE with a wrong magic number", "c10d");
      }
      return;
    case Op::ping:
      c10d::put_u32(w.out, q.u32);
      workers.answered(w);
      return;
    case Op::cancel_wait:
      detach_waits(w);
      c10d::put_u8(w.out, c10d::kWaitCanceled);
      workers.answered(w);
      return;
    default:
      forward(w, q);
  }
}

// Drops the worker's pending WAITs; a wait no other worker shares is cancelled on node 0 too.
void C10dRelay::Impl::detach_waits(c10d::Conn& w) {
  const auto mine = waits.find(w.serial);
  if (mine == waits.end()) return;
  for (const std::uint32_t tag : mine->second) {
    const auto it = pending.find(tag);
    if (it == pending.end()) continue;
    std::erase(it->second.workers, w.serial);
    if (!it->second.workers.empty()) continue;
    if (!it->second.key.empty()) inflight.erase(it->second.key);
    pending.erase(it);
    Request cancel;
    cancel.op = Op::cancel_wait;
    cancel.tag = tag;
    if (up) up->send(cancel);
  }
  waits.erase(mine);
}

// Identical WAITs share one on node 0 (a wait's answer only says the keys exist); identical GETs share
// one sent since the last write this relay forwarded, so no worker reads older than its own write.
bool C10dRelay::Impl::share(c10d::Conn& w, const Request& q, const std::string& key) {
  const auto f = inflight.find(key);
  if (f == inflight.end()) return false;
  Pending& p = pending.at(f->second);
  if (q.op != Op::wait && p.epoch != epoch) return false;
  p.workers.push_back(w.serial);
  if (q.op == Op::wait) waits[w.serial].push_back(f->second);
  return true;
}

void C10dRelay::Impl::forward(c10d::Conn& w, Request& q) {
  std::string key;
  if (q.op == Op::wait || q.op == Op::get) {
    key = coalesce_key(q);
    if (share(w, q, key)) return;
  }
  if (up->backlog() > opts.max_upstream) {
    throw Error(
        Error::Kind::protocol,
        fmt::format("worker store relay: more than {} bytes wait for node 0's socket", opts.max_upstream),
        "c10d");
  }
  do {
    ++next_tag;
  } while (next_tag == 0 || pending.contains(next_tag));
  q.tag = next_tag;
  if (answered(q.op)) {
    Pending p;
    p.op = q.op;
    p.workers.push_back(w.serial);
    p.epoch = epoch;
    if (!key.empty()) {
      p.key = key;
      inflight[key] = q.tag;
    }
    pending.emplace(q.tag, std::move(p));
    if (q.op == Op::wait) waits[w.serial].push_back(q.tag);
  }
  if (writes(q.op)) ++epoch;
  up->send(q);
  ++n_forwarded;
}

void C10dRelay::Impl::on_answer(std::uint32_t tag, std::string_view body) {
  const auto it = pending.find(tag);
  if (it == pending.end()) return;
  Pending& p = it->second;
  for (const std::uint64_t serial : p.workers) {
    c10d::Conn* c = workers.find(serial);
    if (c == nullptr) continue;
    c->out.append(body);
    workers.answered(*c);
    if (p.op == Op::wait) {
      const auto mine = waits.find(serial);
      if (mine != waits.end()) std::erase(mine->second, tag);
    }
  }
  if (p.op == Op::watch_key) return;  // a watch's events keep coming under its tag
  if (!p.key.empty()) {
    const auto f = inflight.find(p.key);
    if (f != inflight.end() && f->second == tag) inflight.erase(f);
  }
  pending.erase(it);
}

C10dRelay::C10dRelay(C10dRelayOptions options) : impl_(std::make_shared<Impl>(std::move(options))) {
  impl_->start();
}

C10dRelay::~C10dRelay() {
  stop();
}

std::uint16_t C10dRelay::port() const {
  return impl_->bound_port;
}

void C10dRelay::stop() {
  if (!impl_) return;
  Impl* s = impl_.get();
  s->loop.call([s] { s->shutdown(); });
}

std::size_t C10dRelay::connection_count() const {
  return impl_->workers.size();
}
bool C10dRelay::upstream_connected() const {
  return impl_->connected;
}
std::uint64_t C10dRelay::forwarded_count() const {
  return impl_->n_forwarded;
}
std::uint64_t C10dRelay::request_count() const {
  return impl_->workers.requests();
}
std::size_t C10dRelay::buffered_bytes() const {
  std::size_t n = 0;
  Impl* s = impl_.get();
  s->loop.call([s, &n] { n = s->workers.buffered_bytes(); });
  return n;
}

}  // namespace ddprun::store
