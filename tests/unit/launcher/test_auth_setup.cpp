// Who may talk to the store under Slurm: munged's socket as Slurm finds it, --rdzv-auth auto without
// MUNGE or a token, and the per-job token of a self-launch (docs/security.md).
#include <catch2/catch.hpp>

#include <fstream>

#include "launcher/auth_setup.hpp"
#include "store/auth.hpp"
#include "support/temp_dir.hpp"

using namespace ddprun;
using namespace ddprun::launcher;
using core::Mode;
using core::SlurmContext;

TEST_CASE("auto without MUNGE or a token: open outside Slurm only, and one agent alone makes its own secret",
          "[auth]") {
  struct Row {
    SlurmContext context;
    Mode mode;
    int agents;
    OpenStore want;
  };
  const Row rows[] = {
      {SlurmContext::none, Mode::standalone, 1, OpenStore::allow},
      {SlurmContext::none, Mode::agent, 4, OpenStore::allow},  // torchrun-style, outside Slurm: warned
      {SlurmContext::step, Mode::agent, 1, OpenStore::private_token},
      {SlurmContext::step, Mode::agent, 2, OpenStore::refuse},
      {SlurmContext::step, Mode::per_task, 1, OpenStore::refuse},  // the node's tasks share one store
      {SlurmContext::step, Mode::per_task, 3, OpenStore::refuse},
      {SlurmContext::batch, Mode::agent, 2, OpenStore::refuse},
  };
  for (const auto& r : rows) {
    INFO(core::to_string(r.context) << " " << core::to_string(r.mode) << " " << r.agents);
    CHECK(open_store_policy(r.context, r.mode, r.agents) == r.want);
  }
}

TEST_CASE("self-launch hands its agents a token only for auto, with no token given and no munged", "[auth]") {
  CHECK(self_launch_needs_token("auto", false, false));
  CHECK_FALSE(self_launch_needs_token("auto", true, false));  // DDPRUN_TOKEN or a token file: theirs
  CHECK_FALSE(self_launch_needs_token("auto", false, true));  // MUNGE: the agents find it as we do
  CHECK_FALSE(self_launch_needs_token("none", false, false));
  CHECK_FALSE(self_launch_needs_token("token", false, false));  // the agents say what is missing
  CHECK_FALSE(self_launch_needs_token("munge", false, false));
  const std::string t = store::auth::random_token();
  CHECK(t.size() == 64);
  CHECK(t.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(t != store::auth::random_token());
}

TEST_CASE("munged's socket: DDPRUN_MUNGE_SOCKET, else slurm.conf's AuthInfo as Slurm reads it", "[auth]") {
  struct Row {
    const char* conf;
    std::optional<std::string> want;
  };
  const Row rows[] = {
      {"AuthType=auth/munge\nAuthInfo=socket=/s/munge.socket,cred_expire=5\n", "/s/munge.socket"},
      {"AuthInfo=cred_expire=5,socket=/s/m.sock\n", "/s/m.sock"},
      {"authinfo=SOCKET=/lower\n", "/lower"},                        // keys are case-insensitive
      {"ClusterName=c AuthInfo=socket=/a MpiDefault=none\n", "/a"},  // several pairs on a line
      {"AuthInfo=\"socket=/quoted,cred_expire=5\"\n", "/quoted"},    // a quoted value
      {"#AuthInfo=socket=/commented\n", std::nullopt},               // a comment
      {"AuthInfo=socket=/a # trailing comment\n", "/a"},
      {"AuthInfo=socket=/first\nAuthInfo=cred_expire=9\n", std::nullopt},  // the last AuthInfo wins
      {"AuthInfo=cred_expire=5\n", std::nullopt},
      {"AuthInfo=socket=\n", std::nullopt},
      {"", std::nullopt},
      {"AuthAltParameters=socket=/not-this\n", std::nullopt},
  };
  for (const auto& r : rows) {
    INFO(r.conf);
    CHECK(core::slurm_conf_munge_socket(r.conf) == r.want);
  }
  ddprun::test::TempDir dir;
  const std::string conf = dir / "slurm.conf";
  std::ofstream(conf) << "AuthType=auth/munge\nAuthInfo=socket=/from/slurm.conf\n";
  CHECK(munge_socket({{"SLURM_CONF", conf}}) == "/from/slurm.conf");
  CHECK(munge_socket({{"SLURM_CONF", conf}, {"DDPRUN_MUNGE_SOCKET", "/mine"}}) == "/mine");
  CHECK(munge_socket({{"SLURM_CONF", dir / "missing.conf"}}).empty());  // libmunge's default
}
