// The hello: protocol version, run id and credential (auth::Verifier), then the connection's label
// and liveness promise. A refusal is answered, logged (rate-limited) and closes the connection.
#include <iostream>
#include <optional>

#include <fmt/core.h>

#include "server_impl.hpp"
#include "store/sockaddr.hpp"

namespace ddprun::store {
namespace {

// Why this hello is refused; nullopt when it is accepted.
std::optional<std::string> refusal(const proto::Hello& h, const std::string& run_id,
                                   auth::Verifier& verifier) {
  if (h.version != proto::kVersion) {
    return fmt::format(
        "protocol version {} is not supported (this store speaks version {}); "
        "use the same ddprun on every node",
        h.version, proto::kVersion);
  }
  if (h.run_id != run_id) {
    return fmt::format(
        "run id mismatch: this store serves run '{}', the client belongs to "
        "run '{}': another job or Slurm step (JOBID.STEPID) reached this port; check --rdzv-id and the "
        "endpoint",
        run_id, h.run_id);
  }
  const auto mode = auth::mode_from_wire(h.auth);
  if (!mode) return fmt::format("unknown authentication mode {}", h.auth);
  return verifier.check(*mode, h.credential, h.label);
}

}  // namespace

void StoreServer::Impl::handshake(const ConnPtr& c, const std::string& payload) {
  const proto::Hello h = proto::decode_hello(payload, opts.limits);
  std::optional<std::string> why;
  if (c->over_cap) why = connection_limit_message(max_conns, fd_limits);
  if (!why) why = refusal(h, opts.run_id, verifier);
  if (why) {
    ++n_refused;
    record_refusal(*c, h.label, *why);
    log_rejection(*c, h.label, *why);
    c->close_after_write = true;
    c->close_reason = *why;
    const bool other_run = !c->over_cap && h.version == proto::kVersion && h.run_id != opts.run_id;
    send(c, proto::encode_response(
                {proto::Status::error, other_run ? proto::kRefusedOtherRun : 0, std::move(*why)}));
    return;
  }
  c->hello_done = true;
  c->label = h.label;
  c->liveness = std::chrono::milliseconds(h.liveness_ms);
  touch(*c);
  c->watchdog.cancel();  // its handler re-arms at the new deadline, if there is one
  send(c, proto::encode_response({proto::Status::ok, proto::kVersion, {}}));
}

void StoreServer::Impl::record_refusal(const Conn& c, const std::string& label, const std::string& why) {
  std::string kept = label.substr(0, kMaxRefusalLabel);
  for (char& ch : kept) {
    if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) ch = '?';
  }
  const std::string peer = numeric_host_of(c.peer_addr);
  std::lock_guard lk(refusals_mu);
  for (auto& r : refusals) {
    if (r.peer == peer && r.why == why && r.label == kept) {
      ++r.count;
      return;
    }
  }
  if (refusals.size() < kMaxRefusalsKept) refusals.push_back({peer, std::move(kept), why, 1});
}

void StoreServer::Impl::log_rejection(const Conn& c, const std::string& label, const std::string& why) {
  if (!log_limit.allow(detail::Clock::now())) return;
  const std::uint64_t skipped = log_limit.take_suppressed();
  std::string line =
      fmt::format("ddprun: rendezvous store: rejected peer {}{}: {}{}",
                  sockaddr_text(reinterpret_cast<const sockaddr*>(&c.peer_addr)),
                  label.empty() ? std::string() : fmt::format(" ('{}')", label), why,
                  skipped ? fmt::format(" ({} more rejection(s) not shown)", skipped) : std::string());
  // Label and run id come from an unauthenticated peer: no control characters into our log.
  for (char& ch : line) {
    if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) ch = '?';
  }
  emit_log(line);
}

void StoreServer::Impl::log_rejection_line(const std::string& why) {
  if (!log_limit.allow(detail::Clock::now())) return;
  (void)log_limit.take_suppressed();
  emit_log("ddprun: rendezvous store: " + why);
}

void StoreServer::Impl::emit_log(const std::string& line) {
  if (opts.log) {
    opts.log(line);
  } else {
    std::cerr << line << '\n' << std::flush;
  }
}

}  // namespace ddprun::store
