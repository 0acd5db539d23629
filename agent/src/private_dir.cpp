#include "agent/private_dir.hpp"

#include <stdlib.h>
#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "agent/io.hpp"

namespace ddprun::agent {

std::string PrivateDir::parent() {
  const char* tmp = std::getenv("TMPDIR");
  // Absolute: the paths inside are handed to workers, which may change directory.
  return tmp != nullptr && *tmp != '\0' ? absolute_path(tmp) : "/tmp";
}

std::string PrivateDir::name_template(const std::string& what) {
  return parent() + "/ddprun-" + what + "-XXXXXX";
}

bool PrivateDir::make(const std::string& what) {
  if (made()) return true;
  std::string tmpl = name_template(what);
  if (::mkdtemp(tmpl.data()) == nullptr) return false;  // mkdtemp makes it 0700
  path_ = tmpl;
  return true;
}

PrivateDir::~PrivateDir() {
  if (path_.empty()) return;
  std::error_code ec;  // best effort: a worker's leftover files must not fail the run
  std::filesystem::remove_all(path_, ec);
}

}  // namespace ddprun::agent
