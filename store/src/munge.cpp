// MUNGE credentials for the store's handshake, through libmunge.so.2 loaded at run time (dlopen): no build
// dependency, and a node without MUNGE runs everything but --rdzv-auth munge. DDPRUN_WITH_MUNGE=OFF compiles
// it out: then the functions say so.
#include <unistd.h>

#include <fmt/core.h>
#include <algorithm>
#include <cstdlib>

#include "dynlib.hpp"
#include "store/auth.hpp"
#include "store/error.hpp"

// libmunge's context, handled only through a pointer.
struct munge_ctx;

#ifdef DDPRUN_HAVE_MUNGE
#if __has_include(<munge.h>)
#include <munge.h>
#define DDPRUN_HAVE_MUNGE_HEADER 1
#endif

namespace ddprun::store::auth {
namespace {

// The few names of libmunge's ABI used here (munge.h, unchanged since MUNGE 0.5); where the build has the
// header, the static_asserts below hold them to it.
constexpr int kSuccess = 0;
constexpr int kNoMemory = 5;
constexpr int kCredReplayed = 17;
constexpr int kOptSocket = 8;

struct MungeApi {
  dynlib::Loaded lib;
  munge_ctx* (*ctx_create)() = nullptr;
  void (*ctx_destroy)(munge_ctx*) = nullptr;
  int (*ctx_set)(munge_ctx*, int, ...) = nullptr;
  const char* (*ctx_strerror)(munge_ctx*) = nullptr;
  const char* (*strerror)(int) = nullptr;
  int (*encode)(char**, munge_ctx*, const void*, int) = nullptr;
  int (*decode)(const char*, munge_ctx*, void**, int*, uid_t*, gid_t*) = nullptr;
};

#ifdef DDPRUN_HAVE_MUNGE_HEADER
static_assert(EMUNGE_SUCCESS == kSuccess && EMUNGE_NO_MEMORY == kNoMemory &&
              EMUNGE_CRED_REPLAYED == kCredReplayed && MUNGE_OPT_SOCKET == kOptSocket &&
              sizeof(munge_err_t) == sizeof(int));
#endif

const MungeApi& munge_api() {
  static const MungeApi api = [] {
    MungeApi a;
    a.lib = dynlib::open(dynlib::candidates(std::getenv("DDPRUN_LIBMUNGE"), {"libmunge.so.2"}));
    dynlib::bind(a.lib, "munge_ctx_create", a.ctx_create);
    dynlib::bind(a.lib, "munge_ctx_destroy", a.ctx_destroy);
    dynlib::bind(a.lib, "munge_ctx_set", a.ctx_set);
    dynlib::bind(a.lib, "munge_ctx_strerror", a.ctx_strerror);
    dynlib::bind(a.lib, "munge_strerror", a.strerror);
    dynlib::bind(a.lib, "munge_encode", a.encode);
    dynlib::bind(a.lib, "munge_decode", a.decode);
    return a;
  }();
  return api;
}

// The loaded library; throws store::Error(usage) with munge_library()'s line when it is missing.
const MungeApi& loaded() {
  const MungeApi& api = munge_api();
  if (api.lib.name.empty()) throw Error(Error::Kind::usage, munge_library().error, "auth");
  return api;
}

struct MungeCtx {
  const MungeApi& api;
  munge_ctx* ctx;
  MungeCtx(const MungeApi& a, const std::string& socket) : api(a), ctx(a.ctx_create()) {
    if (ctx && !socket.empty()) api.ctx_set(ctx, kOptSocket, socket.c_str());
  }
  ~MungeCtx() {
    if (ctx) api.ctx_destroy(ctx);
  }
  MungeCtx(const MungeCtx&) = delete;
  MungeCtx& operator=(const MungeCtx&) = delete;
  std::string why(int e) const {
    const char* s = ctx ? api.ctx_strerror(ctx) : nullptr;
    return s != nullptr ? s : api.strerror(e);
  }
};

}  // namespace

bool munge_built() {
  return true;
}

Library munge_library() {
  const MungeApi& api = munge_api();
  if (!api.lib.name.empty()) return {api.lib.name, true, {}};
  const char* env = std::getenv("DDPRUN_LIBMUNGE");
  const std::string name = env != nullptr && *env != '\0' ? std::string(env) : std::string("libmunge.so.2");
  return {
      name, false,
      fmt::format("MUNGE authentication needs {}, which could not be loaded ({}); install MUNGE's library "
                  "(RHEL: munge-libs, SLES/Debian/Ubuntu: libmunge2), set DDPRUN_LIBMUNGE to its path, or "
                  "use --rdzv-auth token",
                  name, api.lib.error)};
}

bool munge_usable(const std::string& socket) {
  const MungeApi& api = munge_api();
  if (api.lib.name.empty()) return false;
  MungeCtx c(api, socket);
  if (!c.ctx) return false;
  char* cred = nullptr;
  const int e = api.encode(&cred, c.ctx, nullptr, 0);
  std::free(cred);
  return e == kSuccess;
}

std::string munge_credential(std::string_view run_id, const std::string& socket) {
  const MungeApi& api = loaded();
  MungeCtx c(api, socket);
  char* cred = nullptr;
  const int e = c.ctx ? api.encode(&cred, c.ctx, run_id.data(), static_cast<int>(run_id.size())) : kNoMemory;
  if (e != kSuccess) {
    std::free(cred);
    throw Error(Error::Kind::rejected,
                fmt::format("cannot get a MUNGE credential: {}; is munged running?", c.why(e)), "auth");
  }
  std::string out(cred);
  std::free(cred);
  return out;
}

std::optional<std::string> munge_check(std::string_view credential, const std::string& socket,
                                       std::string_view run_id) {
  const MungeApi& api = munge_api();
  if (api.lib.name.empty()) return fmt::format("authentication failed: {}", munge_library().error);
  MungeCtx c(api, socket);
  if (!c.ctx) return std::string("authentication failed: out of memory");
  const std::string cred(credential);
  void* payload = nullptr;
  int len = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  const int e = api.decode(cred.c_str(), c.ctx, &payload, &len, &uid, &gid);
  const std::string body =
      payload ? std::string(static_cast<const char*>(payload), static_cast<std::size_t>(std::max(len, 0)))
              : std::string();
  std::free(payload);
  if (e == kCredReplayed) {
    return std::string("authentication failed: MUNGE credential replayed (already used once)");
  }
  if (e != kSuccess) return fmt::format("authentication failed: MUNGE credential rejected: {}", c.why(e));
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

#else  // DDPRUN_WITH_MUNGE=OFF

namespace ddprun::store::auth {

namespace {
constexpr const char* kNoMunge =
    "this ddprun was built without MUNGE (DDPRUN_WITH_MUNGE=OFF); use --rdzv-auth token with DDPRUN_TOKEN "
    "or --rdzv-token-file";
}

bool munge_built() {
  return false;
}
Library munge_library() {
  return {"libmunge.so.2", false, kNoMunge};
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
