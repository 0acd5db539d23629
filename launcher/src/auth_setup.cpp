#include "launcher/auth_setup.hpp"

#include <fstream>
#include <sstream>

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

}  // namespace ddprun::launcher
