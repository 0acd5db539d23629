#include "launcher/auth_setup.hpp"

#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>

#include <fmt/format.h>

#include "core/error.hpp"
#include "launcher/system.hpp"
#include "store/error.hpp"

namespace ddprun::launcher {

OpenStore open_store_policy(core::SlurmContext context, core::Mode mode, int agents) {
  if (context == core::SlurmContext::none) return OpenStore::allow;
  // Under Slurm another user of the node, or of the cluster, could join or abort the job.
  if (mode == core::Mode::agent && agents == 1) return OpenStore::private_token;
  return OpenStore::refuse;
}

bool self_launch_needs_token(const std::string& policy, bool have_token, bool munge_usable) {
  return policy == "auto" && !have_token && !munge_usable;
}

std::string munge_socket(const core::EnvSnapshot& env) {
  if (const auto it = env.find("DDPRUN_MUNGE_SOCKET"); it != env.end() && !it->second.empty())
    return it->second;
  std::vector<std::string> confs;
  if (const auto it = env.find("SLURM_CONF"); it != env.end() && !it->second.empty()) {
    confs.push_back(it->second);
  } else {
    confs = {"/etc/slurm/slurm.conf", "/run/slurm/conf/slurm.conf"};
  }
  for (const auto& path : confs) {
    std::ifstream in(path);
    if (!in) continue;
    std::ostringstream text;
    text << in.rdbuf();
    return core::slurm_conf_munge_socket(text.str()).value_or("");
  }
  return "";
}

// Who may talk to the store (docs/security.md). Reads DDPRUN_TOKEN / the token file and probes
// munged; the token is then removed from our environment so the workers do not inherit it, in every
// mode. A standalone run opens no store: nothing to authenticate, so its settings are not checked
// (a site-wide DDPRUN_RDZV_AUTH=token must not stop a one-node run).
store::auth::Config resolve_auth(const core::Resolved& r, bool quiet, agent::Events& ev) {
  if (r.mode == core::Mode::standalone) {
    ::unsetenv("DDPRUN_TOKEN");
    return {};
  }
  const bool node0 = r.mode == core::Mode::per_task ? r.job.task_rank.value_or(0) == 0 : r.job.node_rank == 0;
  std::optional<std::string> token;
  if (const char* t = std::getenv("DDPRUN_TOKEN"); t && *t) token = std::string(t);
  // Where Slurm itself finds munged (slurm.conf's AuthInfo), unless DDPRUN_MUNGE_SOCKET says.
  const std::string socket = munge_socket(snapshot_environ());
  store::auth::Config cfg;
  try {
    cfg = store::auth::resolve(store::auth::parse_policy(r.rdzv_auth), token, r.rdzv_token_file, socket);
  } catch (const store::Error& e) {
    // A bad token file or an unsatisfiable --rdzv-auth is the user's input: usage exit code.
    if (e.kind() == store::Error::Kind::usage) throw core::Error(e.what());
    throw;
  }
  ::unsetenv("DDPRUN_TOKEN");
  if (cfg.mode != store::auth::Mode::none || r.rdzv_auth != "auto") return cfg;
  switch (open_store_policy(r.context, r.mode, r.nagents)) {
    case OpenStore::allow:
      // An advice about the site's set-up, repeated by every job: --quiet hides it (the JSON event stays).
      if (node0 && (!quiet || ev.json())) {
        ev.warn(
            "the rendezvous store is unauthenticated (no munged, no DDPRUN_TOKEN): anyone who can "
            "reach its port can join or abort this job; see docs/security.md");
      }
      break;
    case OpenStore::private_token:
      // The private token is checked with HMAC-SHA256 too: without libcrypto, refused like an open store.
      if (const auto crypto = store::auth::crypto_library(); !crypto.found) {
        throw core::Error(
            fmt::format("--rdzv-auth auto under Slurm guards the store with a private token: {}, or "
                        "pass --rdzv-auth none to run unauthenticated",
                        crypto.error));
      }
      cfg.mode = store::auth::Mode::token;
      cfg.token = store::auth::random_token();
      break;
    case OpenStore::refuse:
      throw core::Error(fmt::format(
          "--rdzv-auth auto found no MUNGE ({}) and no token, and under Slurm ddprun never leaves the "
          "rendezvous store open to other users: start munged or set DDPRUN_MUNGE_SOCKET, export one "
          "DDPRUN_TOKEN for every node before srun (or start ddprun from the batch script, which makes "
          "one), or pass --rdzv-auth none to run unauthenticated",
          !store::auth::munge_built()           ? std::string("this ddprun was built without it")
          : !store::auth::munge_library().found ? store::auth::munge_library().name + " is not installed"
          : socket.empty()                      ? std::string("munged does not answer on its default socket")
                                                : fmt::format("munged does not answer on {}", socket)));
  }
  return cfg;
}

}  // namespace ddprun::launcher
