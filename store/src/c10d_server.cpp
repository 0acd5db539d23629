// The workers' store server: its listeners and connections (c10d_conn.hpp) on one loop, each request
// applied to the keyspace (store/c10d_keyspace.hpp), the peer filter, and reset() between attempts.
#include "store/c10d_server.hpp"

#include <unistd.h>

#include <unordered_set>

#include "c10d_conn.hpp"
#include "c10d_loop.hpp"
#include "c10d_net.hpp"
#include "store/c10d_keyspace.hpp"
#include "store/sockaddr.hpp"

namespace ddprun::store {

namespace {

c10d::KeyspaceLimits keyspace_limits(const C10dServerOptions& o) {
  return {o.max_stored_bytes, o.max_reply, o.max_waiting};
}

// Binds every host on one port (the first one's when the port is 0), in the caller's thread, so that a
// failure is the constructor's exception.
std::vector<int> bind_all(const std::vector<std::string>& hosts, std::uint16_t& port) {
  std::vector<int> fds;
  try {
    for (const auto& host : hosts) {
      const int fd = c10d::listen_on(host, port);
      fds.push_back(fd);
      if (port == 0) port = c10d::local_port(fd);
    }
  } catch (...) {
    for (const int fd : fds) ::close(fd);
    throw;
  }
  return fds;
}

}  // namespace

struct C10dServer::Impl final : c10d::Dispatch, c10d::Outbox {
  explicit Impl(C10dServerOptions o)
      : opts(std::move(o)),
        loop_owner(opts.loop ? opts.loop : std::make_shared<C10dLoop>()),
        loop(C10dLoopAccess::of(*loop_owner)),
        conns(loop, *this, c10d::ConnOptions{opts, "worker store", "node 0"}),
        keys(keyspace_limits(opts), *this) {
    admit_only({});
  }

  void on_request(c10d::Conn& c, c10d::Request& q) override {
    keys.apply({c.serial, c.relay()}, q);
    n_keys = keys.key_count();
  }
  void on_close(c10d::Conn& c) override { keys.forget(c.serial); }
  std::optional<std::string> refusal(const sockaddr_storage& peer) override {
    if (!opts.filter_peers) return std::nullopt;
    const std::string a = numeric_host_of(peer);
    if (opts.admit_local && (a.rfind("127.", 0) == 0 || a == "::1")) return std::nullopt;
    if (allowed.contains(a)) return std::nullopt;
    return "not an address of this job's nodes (docs/security.md)";
  }
  std::string* to(std::uint64_t id) override {
    c10d::Conn* c = conns.find(id);
    if (c == nullptr) return nullptr;
    conns.answered(*c);
    return &c->out;
  }

  // Loop thread.
  void admit_only(const std::vector<std::string>& addresses) {
    allowed.clear();
    if (opts.admit_local) {
      for (const auto& a : local_addresses()) allowed.insert(a);
    }
    for (const auto& a : addresses) allowed.insert(normalize_address(a));
  }
  void clear() {
    keys.clear();
    n_keys = 0;
  }
  void shutdown() {
    if (stopped) return;
    stopped = true;
    conns.close_listeners();
    conns.close_all("the worker store stopped");
    clear();
  }

  C10dServerOptions opts;
  std::shared_ptr<C10dLoop> loop_owner;
  c10d::Loop& loop;
  c10d::Conns conns;
  c10d::Keyspace keys;
  std::unordered_set<std::string> allowed;
  std::uint16_t bound_port = 0;
  bool stopped = false;
  std::atomic<std::size_t> n_keys{0};
};

C10dServer::C10dServer(C10dServerOptions options) : impl_(std::make_shared<Impl>(std::move(options))) {
  Impl* s = impl_.get();
  std::uint16_t port = s->opts.port;
  const std::vector<int> fds = bind_all(s->opts.hosts, port);
  s->bound_port = port;
  s->loop.call([s, &fds] {
    for (const int fd : fds) s->conns.listen(fd);
  });
}

C10dServer::~C10dServer() {
  stop();
}

std::uint16_t C10dServer::port() const {
  return impl_->bound_port;
}

void C10dServer::reset() {
  Impl* s = impl_.get();
  s->loop.call([s] {
    s->conns.accept_queued();
    s->conns.close_all("a new attempt");
    s->clear();
  });
}

void C10dServer::allow_peers(const std::vector<std::string>& addresses) {
  Impl* s = impl_.get();
  s->loop.call([s, &addresses] { s->admit_only(addresses); });
}

void C10dServer::stop() {
  if (!impl_) return;
  Impl* s = impl_.get();
  s->loop.call([s] { s->shutdown(); });
}

std::size_t C10dServer::connection_count() const {
  return impl_->conns.size();
}
std::uint64_t C10dServer::refused_count() const {
  return impl_->conns.refused();
}
std::uint64_t C10dServer::dropped_count() const {
  return impl_->conns.dropped();
}
std::size_t C10dServer::key_count() const {
  return impl_->n_keys;
}
std::uint64_t C10dServer::request_count() const {
  return impl_->conns.requests();
}
std::size_t C10dServer::buffered_bytes() const {
  std::size_t n = 0;
  Impl* s = impl_.get();
  s->loop.call([s, &n] { n = s->conns.buffered_bytes(); });
  return n;
}

}  // namespace ddprun::store
