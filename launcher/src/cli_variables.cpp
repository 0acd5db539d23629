#include "cli_variables.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <stdexcept>

#include "launcher/cli.hpp"

namespace ddprun::launcher {

const std::vector<VariableException>& option_variable_exceptions() {
  static const std::vector<VariableException> table = {
      {"--help", "", "prints the help and exits"},
      {"--version", "", "prints the version and exits"},
      {"-t", "", "torchrun's short spelling of a --tee level: DDPRUN_TEE takes the same levels"},
      {"COMMAND", "", "the command itself"},
      {"--rdzv-token-file", "DDPRUN_TOKEN_FILE", "named after DDPRUN_TOKEN, the secret the file holds"},
  };
  return table;
}

std::string variable_by_rule(const std::string& long_name) {
  std::string out = "DDPRUN_";
  for (const char c : long_name.substr(std::min(long_name.find_first_not_of('-'), long_name.size())))
    out += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

void give_variables(CLI::App& app) {
  for (CLI::Option* opt : app.get_options()) {
    const std::string name = opt->get_name();
    const auto& table = option_variable_exceptions();
    const auto row = std::find_if(table.begin(), table.end(),
                                  [&](const VariableException& e) { return name == e.option; });
    if (row != table.end()) {
      opt->envname(row->variable);
    } else if (!opt->get_lnames().empty()) {
      opt->envname(variable_by_rule("--" + opt->get_lnames().front()));
    } else {
      throw std::logic_error("option " + name +
                             " has no long name: give it a row in option_variable_exceptions");
    }
  }
}

bool env_set(const std::string& name) {
  const char* v = name.empty() ? nullptr : std::getenv(name.c_str());
  return v != nullptr && *v != '\0';
}

const std::vector<PetVariable>& pet_variables() {
  // torchrun 2.x's env/check_env options that ddprun has; -t is torchrun's -t/--tee (dest tee).
  static const std::vector<PetVariable> table = {
      {"--nnodes", "PET_NNODES"},
      {"--nproc-per-node", "PET_NPROC_PER_NODE"},
      {"--node-rank", "PET_NODE_RANK"},
      {"--standalone", "PET_STANDALONE"},
      {"--role", "PET_ROLE"},
      {"--start-method", "PET_START_METHOD"},
      {"--rdzv-backend", "PET_RDZV_BACKEND"},
      {"--rdzv-endpoint", "PET_RDZV_ENDPOINT"},
      {"--rdzv-id", "PET_RDZV_ID"},
      {"--rdzv-conf", "PET_RDZV_CONF"},
      {"--master-addr", "PET_MASTER_ADDR"},
      {"--master-port", "PET_MASTER_PORT"},
      {"--local-addr", "PET_LOCAL_ADDR"},
      {"--max-restarts", "PET_MAX_RESTARTS"},
      {"--module", "PET_MODULE"},
      {"--no-python", "PET_NO_PYTHON"},
      {"--run-path", "PET_RUN_PATH"},
      {"-t", "PET_TEE"},
      {"--redirects", "PET_REDIRECTS"},
      {"--log-dir", "PET_LOG_DIR"},
      {"--local-ranks-filter", "PET_LOCAL_RANKS_FILTER"},
      {"--monitor-interval", "PET_MONITOR_INTERVAL"},
      {"--virtual-local-rank", "PET_VIRTUAL_LOCAL_RANK"},
  };
  return table;
}

std::string env_variable_for(const std::string& ddprun_var, bool ddprun_set, const std::string& pet_var,
                             bool pet_set) {
  return !ddprun_set && pet_set ? pet_var : ddprun_var;
}

std::vector<std::pair<CLI::Option*, std::string>> use_pet_variables(CLI::App& app) {
  std::vector<std::pair<CLI::Option*, std::string>> switched;
  for (const PetVariable& p : pet_variables()) {
    CLI::Option* opt = app.get_option(p.option);
    std::string own = opt->get_envname();
    const std::string var = env_variable_for(own, env_set(own), p.variable, env_set(p.variable));
    if (var == own) continue;
    opt->envname(var);
    switched.emplace_back(opt, std::move(own));
  }
  return switched;
}

std::map<std::string, std::string> variable_sources(const CLI::App& app) {
  // CLI11 reads an option's variable only when the command line left it unset, and lists in
  // parse_order() only what the command line gave.
  const std::vector<CLI::Option*>& given = app.parse_order();
  std::map<std::string, std::string> out;
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->count() == 0 || opt->get_envname().empty()) continue;
    if (std::find(given.begin(), given.end(), opt) != given.end()) continue;
    out[opt->get_name()] = opt->get_envname();
  }
  return out;
}

}  // namespace ddprun::launcher
