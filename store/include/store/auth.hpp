#pragma once
// Authentication of store connections (see docs/security.md).
//
// The client puts a credential in its hello; the server checks it before anything else:
//  - munge: a MUNGE credential whose payload is the run id; the server decodes it and requires
//    its own uid and the same run id;
//  - token: a random client nonce and HMAC-SHA256(token, context || run id || label || nonce),
//    so the secret never crosses the wire;
//  - none: nothing (the store is open to anyone who can reach the port).
// Either way the server remembers every credential it accepted and refuses a second use.
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>

namespace ddprun::store::auth {

enum class Mode : std::uint8_t { none = 0, munge = 1, token = 2 };
const char* to_string(Mode m);
std::optional<Mode> mode_from_wire(std::uint8_t v);

// --rdzv-auth: what the user asked for. auto = munge if usable, else token if given, else none.
enum class Policy { automatic, munge, token, none };
// Throws store::Error(usage) naming the option on anything but auto|munge|token|none.
Policy parse_policy(std::string_view text);

// What this node offers, for choose_mode.
struct Means {
  bool munge_usable = false;  // munged answered (libmunge loaded)
  bool have_token = false;    // a token was given
  std::string no_munge;       // why MUNGE cannot be used at all (munge_library().error), else ""
  std::string no_hmac;        // why token mode cannot be used (crypto_library().error), else ""
};

// Pure decision: which mode a policy resolves to on this node. Throws store::Error(usage) when the
// policy demands a mechanism that is not available; auto with a token but no HMAC is such a demand (a
// token given is never dropped for an open store).
Mode choose_mode(Policy policy, const Means& means);

// An optional library authentication loads at run time (dlopen) on first use, so that ddprun runs where it
// is missing and only what needs it fails: libcrypto for token mode's HMAC-SHA256 (libcrypto.so.3, else
// libcrypto.so.1.1), libmunge.so.2 for MUNGE. DDPRUN_LIBCRYPTO / DDPRUN_LIBMUNGE, when set, name the one
// file or soname to load instead.
struct Library {
  std::string name;  // what was loaded; when nothing was, what would have been
  bool found = false;
  std::string error;  // when not found: a one-line message naming the library and what to do
};
Library crypto_library();
Library munge_library();

// What a client or server needs to authenticate. Keep `token` out of logs.
struct Config {
  Mode mode = Mode::none;
  std::string token;         // token mode: the shared secret
  std::string munge_socket;  // munge mode: munged's socket; empty = libmunge's default
};

// Resolves the policy against this node's environment: probes munged (when the policy may use
// it), reads the token (`token` text, else `token_file`). Throws store::Error(usage) with a
// one-line message on a bad token file or an unsatisfiable policy.
Config resolve(Policy policy, const std::optional<std::string>& token,
               const std::optional<std::string>& token_file, const std::string& munge_socket);

// Reads a token file: it must be a regular file owned by this user with no group/other access
// (0600 or stricter), and hold a non-empty secret (surrounding whitespace is ignored). A symbolic
// link is followed: the file it leads to is checked.
std::string read_token_file(const std::string& path);

// Compares without an early exit, so the time taken does not reveal where the inputs differ.
// Inputs of different lengths are unequal (the length itself is not secret: always 32 bytes).
bool constant_time_equal(std::string_view a, std::string_view b);

// HMAC-SHA256(key, data), raw 32 bytes. Throws store::Error(usage) with crypto_library()'s message when
// libcrypto is missing.
std::string hmac_sha256(std::string_view key, std::string_view data);

// Token mode: credential = 16-byte nonce || HMAC over the run id, label and nonce.
std::string token_credential(std::string_view token, std::string_view run_id, std::string_view label,
                             std::string_view nonce);
std::string random_nonce();  // 16 bytes from the kernel CSPRNG (getrandom)
// A fresh shared secret for token mode: 32 bytes from the kernel CSPRNG, as 64 hex digits (it travels in
// an environment variable).
std::string random_token();

// MUNGE support was compiled in (not DDPRUN_WITH_MUNGE=OFF). Without it, or without libmunge.so.2,
// munge_usable is false and the other two fail with munge_library()'s message.
bool munge_built();
// Decodes `credential` and checks its uid (ours) and payload (the run id): an error line, or
// nullopt when it is valid. Replays are the Verifier's business.
std::optional<std::string> munge_check(std::string_view credential, const std::string& socket,
                                       std::string_view run_id);
// MUNGE: true when munged answers on `socket` (empty = default socket).
bool munge_usable(const std::string& socket);
// A credential binding the run id; throws store::Error(rejected) when munged cannot be reached.
std::string munge_credential(std::string_view run_id, const std::string& socket);

// The credential a client sends for `cfg` (empty in none mode).
std::string make_credential(const Config& cfg, std::string_view run_id, std::string_view label);

// Server side: checks hellos against the server's config and remembers accepted credentials.
// Not thread-safe (the server calls it from its one thread).
class Verifier {
 public:
  explicit Verifier(Config cfg, std::string run_id, std::size_t max_seen = 1u << 20);
  // nullopt: accepted. Otherwise a one-line reason, safe to send to the peer and to log.
  std::optional<std::string> check(Mode mode, std::string_view credential, std::string_view label);
  Mode mode() const { return cfg_.mode; }

 private:
  std::optional<std::string> check_token(std::string_view credential, std::string_view label);
  std::optional<std::string> check_munge(std::string_view credential);
  std::optional<std::string> remember(std::string_view key);

  Config cfg_;
  std::string run_id_;
  std::size_t max_seen_;
  std::unordered_set<std::string> seen_;
};

// Rate limit for the "rejected peer" log line: at most `burst` lines per `window`; the rest are
// counted, and the next line allowed reports how many were suppressed.
class LogLimiter {
 public:
  using Clock = std::chrono::steady_clock;
  LogLimiter(std::size_t burst, std::chrono::milliseconds window) : burst_(burst), window_(window) {}
  // true: print now (then take_suppressed() says how many were skipped before it).
  bool allow(Clock::time_point now);
  std::uint64_t take_suppressed();

 private:
  std::size_t burst_;
  std::chrono::milliseconds window_;
  Clock::time_point start_{};
  std::size_t used_ = 0;
  std::uint64_t suppressed_ = 0;
};

}  // namespace ddprun::store::auth
