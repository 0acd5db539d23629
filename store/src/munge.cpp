// MUNGE credentials for the store's handshake. Optional at build time: without libmunge the
// functions say so instead of failing to link.
#include <unistd.h>

#include <fmt/core.h>
#include <algorithm>
#include <cstdlib>

#include "store/auth.hpp"
#include "store/error.hpp"

#ifdef DDPRUN_HAVE_MUNGE
#include <munge.h>

namespace ddprun::store::auth {
namespace {

struct MungeCtx {
  munge_ctx_t ctx = munge_ctx_create();
  explicit MungeCtx(const std::string& socket) {
    if (ctx && !socket.empty()) munge_ctx_set(ctx, MUNGE_OPT_SOCKET, socket.c_str());
  }
  ~MungeCtx() {
    if (ctx) munge_ctx_destroy(ctx);
  }
  MungeCtx(const MungeCtx&) = delete;
  MungeCtx& operator=(const MungeCtx&) = delete;
};

}  // namespace

bool munge_built() {
  return true;
}

bool munge_usable(const std::string& socket) {
  MungeCtx c(socket);
  if (!c.ctx) return false;
  char* cred = nullptr;
  const munge_err_t e = munge_encode(&cred, c.ctx, nullptr, 0);
  std::free(cred);
  return e == EMUNGE_SUCCESS;
}

std::string munge_credential(std::string_view run_id, const std::string& socket) {
  MungeCtx c(socket);
  char* cred = nullptr;
  const munge_err_t e =
      c.ctx ? munge_encode(&cred, c.ctx, run_id.data(), static_cast<int>(run_id.size())) : EMUNGE_NO_MEMORY;
  if (e != EMUNGE_SUCCESS) {
    std::free(cred);
    throw Error(Error::Kind::rejected,
                fmt::format("cannot get a MUNGE credential: {}; is munged running?",
                            c.ctx ? munge_ctx_strerror(c.ctx) : munge_strerror(e)),
                "auth");
  }
  std::string out(cred);
  std::free(cred);
  return out;
}

std::optional<std::string> munge_check(std::string_view credential, const std::string& socket,
                                       std::string_view run_id) {
  MungeCtx c(socket);
  if (!c.ctx) return std::string("authentication failed: out of memory");
  const std::string cred(credential);
  void* payload = nullptr;
  int len = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  const munge_err_t e = munge_decode(cred.c_str(), c.ctx, &payload, &len, &uid, &gid);
  const std::string body =
      payload ? std::string(static_cast<const char*>(payload), static_cast<std::size_t>(std::max(len, 0)))
              : std::string();
  std::free(payload);
  if (e == EMUNGE_CRED_REPLAYED) {
    return std::string("authentication failed: MUNGE credential replayed (already used once)");
  }
  if (e != EMUNGE_SUCCESS) {
    return fmt::format("authentication failed: MUNGE credential rejected: {}",
                       munge_ctx_strerror(c.ctx) ? munge_ctx_strerror(c.ctx) : munge_strerror(e));
  }
  if (uid != ::geteuid()) {
    return fmt::format(
        "authentication failed: MUNGE credential of uid {}, this store belongs to "
        "uid {}",
        uid, ::geteuid());
  }
  if (!constant_time_equal(body, run_id)) {
    return std::string("authentication failed: MUNGE credential made for another run id");
  }
  return std::nullopt;
}

}  // namespace ddprun::store::auth

#else  // no libmunge at build time

namespace ddprun::store::auth {

namespace {
constexpr const char* kNoMunge =
    "this ddprun was built without MUNGE (libmunge-dev); use --rdzv-auth token with DDPRUN_TOKEN "
    "or --rdzv-token-file";
}

bool munge_built() {
  return false;
}
bool munge_usable(const std::string&) {
  return false;
}

std::string munge_credential(std::string_view, const std::string&) {
  throw Error(Error::Kind::usage, kNoMunge, "auth");
}

std::optional<std::string> munge_check(std::string_view, const std::string&, std::string_view) {
  return fmt::format("authentication failed: {}", kNoMunge);
}

}  // namespace ddprun::store::auth

#endif
