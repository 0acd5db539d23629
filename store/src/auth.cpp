#include "store/auth.hpp"

// SHA256_Init/Update/Final are deprecated since OpenSSL 3.0 but present in every 1.1 and 3.x; see
// hmac_sha256. libcrypto is loaded at run time (sha256_api); its header, where the build has it, only checks
// the ABI below.
#define OPENSSL_SUPPRESS_DEPRECATED
#if __has_include(<openssl/sha.h>)
#include <openssl/sha.h>
#define DDPRUN_HAVE_OPENSSL_HEADER 1
#endif
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/core.h>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <type_traits>

#include "dynlib.hpp"
#include "store/error.hpp"

// OpenSSL's SHA256_CTX, handled only through a pointer into CtxStorage below.
struct SHA256state_st;

namespace ddprun::store::auth {
namespace {

constexpr std::size_t kNonceSize = 16;
constexpr std::size_t kMacSize = 32;
// Domain separation: a MAC made for this protocol version is useless anywhere else.
constexpr std::string_view kContext{"ddprun-rdzv-auth-v2", 19};

[[noreturn]] void usage(const std::string& msg) {
  throw Error(Error::Kind::usage, msg, "auth");
}

std::string trim(const std::string& s) {
  const auto ws = " \t\r\n";
  const auto b = s.find_first_not_of(ws);
  if (b == std::string::npos) return {};
  const auto e = s.find_last_not_of(ws);
  return s.substr(b, e - b + 1);
}

// SHA-256 from the system's libcrypto (OpenSSL 3.x or 1.1), loaded on first use.
struct Sha256Api {
  dynlib::Loaded lib;
  int (*init)(SHA256state_st*) = nullptr;
  int (*update)(SHA256state_st*, const void*, std::size_t) = nullptr;
  int (*final)(unsigned char*, SHA256state_st*) = nullptr;
};

// Room for a SHA256_CTX: 112 bytes in OpenSSL 1.1 and every 3.x.
struct alignas(16) CtxStorage {
  unsigned char bytes[256];
};

#ifdef DDPRUN_HAVE_OPENSSL_HEADER
static_assert(sizeof(SHA256_CTX) <= sizeof(CtxStorage) && alignof(SHA256_CTX) <= alignof(CtxStorage));
static_assert(std::is_same_v<decltype(&SHA256_Init), decltype(Sha256Api::init)> &&
              std::is_same_v<decltype(&SHA256_Update), decltype(Sha256Api::update)> &&
              std::is_same_v<decltype(&SHA256_Final), decltype(Sha256Api::final)>);
#endif

const Sha256Api& sha256_api() {
  static const Sha256Api api = [] {
    Sha256Api a;
    a.lib = dynlib::open(
        dynlib::candidates(std::getenv("DDPRUN_LIBCRYPTO"), {"libcrypto.so.3", "libcrypto.so.1.1"}));
    dynlib::bind(a.lib, "SHA256_Init", a.init);
    dynlib::bind(a.lib, "SHA256_Update", a.update);
    dynlib::bind(a.lib, "SHA256_Final", a.final);
    return a;
  }();
  return api;
}

void put_field(std::string& out, std::string_view s) {
  // Length-prefixed, so ("ab","c") and ("a","bc") never MAC the same.
  const auto n = static_cast<std::uint32_t>(s.size());
  for (int shift = 24; shift >= 0; shift -= 8) {
    out.push_back(static_cast<char>(static_cast<std::uint8_t>(n >> shift)));
  }
  out.append(s);
}

}  // namespace

const char* to_string(Mode m) {
  switch (m) {
    case Mode::none:
      return "none";
    case Mode::munge:
      return "munge";
    case Mode::token:
      return "token";
  }
  return "unknown";
}

std::optional<Mode> mode_from_wire(std::uint8_t v) {
  if (v <= static_cast<std::uint8_t>(Mode::token)) return static_cast<Mode>(v);
  return std::nullopt;
}

Policy parse_policy(std::string_view text) {
  if (text == "auto") return Policy::automatic;
  if (text == "munge") return Policy::munge;
  if (text == "token") return Policy::token;
  if (text == "none") return Policy::none;
  usage(fmt::format("--rdzv-auth: '{}' is not one of auto|munge|token|none", text));
}

Library crypto_library() {
  const auto& api = sha256_api();
  if (!api.lib.name.empty()) return {api.lib.name, true, {}};
  const char* env = std::getenv("DDPRUN_LIBCRYPTO");
  const std::string name =
      env != nullptr && *env != '\0' ? std::string(env) : std::string("libcrypto.so.3 or libcrypto.so.1.1");
  return {name, false,
          fmt::format(
              "token authentication needs {} (OpenSSL) for HMAC-SHA256, which could not be loaded ({}); "
              "install OpenSSL's library (RHEL: openssl-libs, SLES: libopenssl3, Debian/Ubuntu: libssl3), "
              "set DDPRUN_LIBCRYPTO to its path, or use --rdzv-auth munge",
              name, api.lib.error)};
}

Mode choose_mode(Policy policy, const Means& m) {
  const auto no_hmac = [&] {
    usage(fmt::format("--rdzv-auth {}: {}", policy == Policy::token ? "token" : "auto", m.no_hmac));
  };
  switch (policy) {
    case Policy::none:
      return Mode::none;
    case Policy::munge:
      if (!m.no_munge.empty()) usage(fmt::format("--rdzv-auth munge: {}", m.no_munge));
      if (!m.munge_usable) {
        usage(
            "--rdzv-auth munge: munged is not reachable on this node; start munged, set "
            "DDPRUN_MUNGE_SOCKET, or use --rdzv-auth token");
      }
      return Mode::munge;
    case Policy::token:
      if (!m.have_token) {
        usage(
            "--rdzv-auth token: no token given; set DDPRUN_TOKEN or DDPRUN_TOKEN_FILE, or pass "
            "--rdzv-token-file PATH");
      }
      if (!m.no_hmac.empty()) no_hmac();
      return Mode::token;
    case Policy::automatic:
      if (m.munge_usable) return Mode::munge;
      if (m.have_token) {
        // A token given is a token meant: never fall back to an open store for want of a library.
        if (!m.no_hmac.empty()) no_hmac();
        return Mode::token;
      }
      return Mode::none;
  }
  return Mode::none;
}

std::string read_token_file(const std::string& path) {
  // A symbolic link is followed (~/.ddprun-token -> a shared home's copy): the file it leads to is
  // what must be a regular file of ours, closed to others (fstat below). O_NONBLOCK: a FIFO there
  // must not block the open; it is refused as not a regular file.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    usage(fmt::format("token file {}: {}; check --rdzv-token-file / DDPRUN_TOKEN_FILE", path,
                      std::strerror(errno)));
  }
  struct FdGuard {
    int fd;
    ~FdGuard() { ::close(fd); }
  } guard{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    usage(fmt::format("token file {}: not a regular file", path));
  }
  if (st.st_uid != ::geteuid()) {
    usage(
        fmt::format("token file {}: owned by uid {}, not by you (uid {}); the token must be "
                    "your own file",
                    path, st.st_uid, ::geteuid()));
  }
  if ((st.st_mode & 077) != 0) {
    usage(fmt::format("token file {}: mode {:04o} lets others read it; run chmod 600 {}", path,
                      st.st_mode & 07777, path));
  }
  std::string text;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) usage(fmt::format("token file {}: {}", path, std::strerror(errno)));
    if (n == 0) break;
    text.append(buf, static_cast<std::size_t>(n));
    if (text.size() > (1u << 16)) usage(fmt::format("token file {}: larger than 64 KiB", path));
  }
  text = trim(text);
  if (text.empty()) usage(fmt::format("token file {}: empty; put a random secret in it", path));
  return text;
}

Config resolve(Policy policy, const std::optional<std::string>& token,
               const std::optional<std::string>& token_file, const std::string& munge_socket) {
  Config cfg;
  cfg.munge_socket = munge_socket;
  if (token && !token->empty()) {
    cfg.token = *token;
  } else if (token_file && !token_file->empty() && policy != Policy::none) {
    cfg.token = read_token_file(*token_file);
  }
  Means means;
  const bool may_munge = policy == Policy::automatic || policy == Policy::munge;
  means.munge_usable = may_munge && munge_usable(munge_socket);
  means.have_token = !cfg.token.empty();
  if (policy == Policy::munge) means.no_munge = munge_library().error;
  if (means.have_token) means.no_hmac = crypto_library().error;
  cfg.mode = choose_mode(policy, means);
  if (cfg.mode != Mode::token) cfg.token.clear();
  return cfg;
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff = static_cast<unsigned char>(diff |
                                      (static_cast<unsigned char>(a[i]) ^ static_cast<unsigned char>(b[i])));
  }
  // volatile: keep the compiler from turning the loop into an early-exit memcmp.
  volatile unsigned char result = diff;
  return result == 0;
}

// HMAC (RFC 2104) over OpenSSL's low-level SHA-256, not its EVP HMAC, nor the one-shot SHA256() which
// OpenSSL 3 routes through EVP as well: EVP loads OpenSSL's provider machinery on first use, 2.5 MB
// of resident memory in every agent for a few hashes.
std::string hmac_sha256(std::string_view key, std::string_view data) {
  constexpr std::size_t kBlock = 64;  // SHA-256's block size
  constexpr std::size_t kDigest = 32;
  const Sha256Api& api = sha256_api();
  if (api.lib.name.empty()) usage(crypto_library().error);
  const auto sha256 = [&api](std::string_view a, std::string_view b = {}) {
    CtxStorage storage{};
    auto* ctx = reinterpret_cast<SHA256state_st*>(&storage);
    std::string d(kDigest, '\0');
    if (api.init(ctx) != 1 || api.update(ctx, a.data(), a.size()) != 1 ||
        api.update(ctx, b.data(), b.size()) != 1 ||
        api.final(reinterpret_cast<unsigned char*>(d.data()), ctx) != 1) {
      throw Error(Error::Kind::io, fmt::format("SHA-256 failed ({})", api.lib.name), "auth");
    }
    return d;
  };
  std::string k = key.size() > kBlock ? sha256(key) : std::string(key);
  k.resize(kBlock, '\0');
  std::string inner(kBlock, '\0');
  std::string outer(kBlock, '\0');
  for (std::size_t i = 0; i < kBlock; ++i) {
    inner[i] = static_cast<char>(k[i] ^ 0x36);
    outer[i] = static_cast<char>(k[i] ^ 0x5c);
  }
  return sha256(outer, sha256(inner, data));
}

// From the kernel's CSPRNG (getrandom(2)), for the same reason as above (OpenSSL's RAND_bytes
// starts its provider machinery).
std::string random_nonce() {
  std::string n(kNonceSize, '\0');
  std::size_t got = 0;
  while (got < n.size()) {
    const ssize_t r = ::getrandom(n.data() + got, n.size() - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      throw Error(Error::Kind::io,
                  fmt::format("cannot draw a random nonce (getrandom: {})", std::strerror(errno)), "auth");
    }
    got += static_cast<std::size_t>(r);
  }
  return n;
}

std::string random_token() {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < 2; ++i) {
    for (const char c : random_nonce()) {
      const auto b = static_cast<unsigned char>(c);
      out.push_back(kHex[b >> 4]);
      out.push_back(kHex[b & 15]);
    }
  }
  return out;
}

std::string token_credential(std::string_view token, std::string_view run_id, std::string_view label,
                             std::string_view nonce) {
  std::string data;
  put_field(data, kContext);
  put_field(data, run_id);
  put_field(data, label);
  put_field(data, nonce);
  return std::string(nonce) + hmac_sha256(token, data);
}

std::string make_credential(const Config& cfg, std::string_view run_id, std::string_view label) {
  switch (cfg.mode) {
    case Mode::none:
      return {};
    case Mode::munge:
      return munge_credential(run_id, cfg.munge_socket);
    case Mode::token:
      return token_credential(cfg.token, run_id, label, random_nonce());
  }
  return {};
}

Verifier::Verifier(Config cfg, std::string run_id, std::size_t max_seen)
    : cfg_(std::move(cfg)), run_id_(std::move(run_id)), max_seen_(max_seen) {}

std::optional<std::string> Verifier::check(Mode mode, std::string_view credential, std::string_view label) {
  if (mode != cfg_.mode) {
    if (mode == Mode::none) {
      return fmt::format(
          "authentication required: this store uses --rdzv-auth {} and the "
          "client sent no credential; use the same --rdzv-auth{} on every node",
          to_string(cfg_.mode), cfg_.mode == Mode::token ? " and the same DDPRUN_TOKEN" : "");
    }
    return fmt::format(
        "authentication mode mismatch: this store uses {}, the client sent {}; "
        "use the same --rdzv-auth (and token/MUNGE setup) on every node",
        to_string(cfg_.mode), to_string(mode));
  }
  switch (cfg_.mode) {
    case Mode::none:
      return std::nullopt;
    case Mode::token:
      return check_token(credential, label);
    case Mode::munge:
      return check_munge(credential);
  }
  return std::string("unknown authentication mode");
}

std::optional<std::string> Verifier::remember(std::string_view key) {
  if (seen_.contains(std::string(key))) {
    return std::string("authentication failed: credential replayed (already used once)");
  }
  if (seen_.size() >= max_seen_) {
    return std::string("authentication failed: too many connections for this store");
  }
  seen_.emplace(key);
  return std::nullopt;
}

std::optional<std::string> Verifier::check_token(std::string_view credential, std::string_view label) {
  if (credential.size() != kNonceSize + kMacSize) {
    return std::string("authentication failed: malformed token credential");
  }
  const std::string_view nonce = credential.substr(0, kNonceSize);
  const std::string expected = token_credential(cfg_.token, run_id_, label, nonce);
  if (!constant_time_equal(expected, credential)) {
    return std::string(
        "authentication failed: wrong token (DDPRUN_TOKEN / token file differs "
        "from node 0's)");
  }
  return remember(nonce);
}

std::optional<std::string> Verifier::check_munge(std::string_view credential) {
  if (auto err = munge_check(credential, cfg_.munge_socket, run_id_)) return err;
  return remember(credential);
}

bool LogLimiter::allow(Clock::time_point now) {
  if (used_ == 0 || now - start_ >= window_) {
    start_ = now;
    used_ = 0;
  }
  if (used_ < burst_) {
    ++used_;
    return true;
  }
  ++suppressed_;
  return false;
}

std::uint64_t LogLimiter::take_suppressed() {
  const std::uint64_t n = suppressed_;
  suppressed_ = 0;
  return n;
}

}  // namespace ddprun::store::auth
