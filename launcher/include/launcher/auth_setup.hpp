#pragma once
// Who may talk to the rendezvous store under Slurm (docs/security.md): where munged is, what
// --rdzv-auth auto does when it finds neither MUNGE nor a token, and the per-job token of a self-launch;
// resolve_auth applies them to this run.
#include <string>

#include "agent/events.hpp"
#include "core/config.hpp"
#include "core/slurm_env.hpp"
#include "store/auth.hpp"

namespace ddprun::launcher {

// --rdzv-auth auto found neither MUNGE nor a token: what becomes of the store. Pure.
enum class OpenStore {
  allow,          // outside Slurm: unauthenticated, and node 0 warns
  private_token,  // the one agent of a Slurm step: a secret only it knows (nobody else needs to join)
  refuse,         // any other Slurm run: an error naming the fixes (--rdzv-auth none runs open)
};
OpenStore open_store_policy(core::SlurmContext context, core::Mode mode, int agents);

// Self-launch: the agents get a per-job token through srun's environment when the policy is auto, the
// user gave no token (DDPRUN_TOKEN, a token file), and munged does not answer where ddprun runs (the
// nodes find munged as this host does, from the same slurm.conf). Pure.
bool self_launch_needs_token(const std::string& policy, bool have_token, bool munge_usable);

// munged's socket as Slurm finds it: DDPRUN_MUNGE_SOCKET, else `socket=` of slurm.conf's AuthInfo
// (SLURM_CONF, else /etc/slurm/slurm.conf, else the configless cache /run/slurm/conf/slurm.conf), else
// "" (libmunge's default socket). Reads the file.
std::string munge_socket(const core::EnvSnapshot& env);

// Who may talk to the store (docs/security.md): the token (then removed from the environment, so that
// no worker inherits it) or MUNGE, or none (`quiet`: no warning about an open store in text mode).
// Reads the environment and probes munged. Throws core::Error on a bad set-up.
store::auth::Config resolve_auth(const core::Resolved& r, bool quiet, agent::Events& ev);

}  // namespace ddprun::launcher
