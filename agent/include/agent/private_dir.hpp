#pragma once
// A private temporary directory (mode 0700, under $TMPDIR or /tmp) for files ddprun hands its
// workers when there is no --log-dir (error files, heartbeat files); removed, with everything in
// it, when this object goes.
#include <string>

namespace ddprun::agent {

class PrivateDir {
 public:
  PrivateDir() = default;
  ~PrivateDir();
  PrivateDir(const PrivateDir&) = delete;
  PrivateDir& operator=(const PrivateDir&) = delete;

  // Makes name_template(what) once; false (errno set) when it cannot.
  bool make(const std::string& what);
  bool made() const { return !path_.empty(); }
  const std::string& path() const { return path_; }

  // Where it goes: $TMPDIR (made absolute) when set and not empty, else /tmp.
  static std::string parent();
  // <parent>/ddprun-<what>-XXXXXX, the X replaced when it is made (what a dry run shows).
  static std::string name_template(const std::string& what);

 private:
  std::string path_;
};

}  // namespace ddprun::agent
