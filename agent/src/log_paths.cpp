#include "agent/log_paths.hpp"

#include <fmt/format.h>

namespace ddprun::agent {

namespace {

// `path` with `tag` before its extension: "a/err.json" + "node1" -> "a/err.node1.json".
std::string with_tag(const std::string& path, const std::string& tag) {
  const auto slash = path.rfind('/');
  const auto dot = path.rfind('.');
  const bool has_ext = dot != std::string::npos && (slash == std::string::npos || dot > slash + 1);
  if (!has_ext) return path + "." + tag;
  return path.substr(0, dot) + "." + tag + path.substr(dot);
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (auto pos = s.find(from); pos != std::string::npos; pos = s.find(from, pos + to.size())) {
    s.replace(pos, from.size(), to);
  }
  return s;
}

}  // namespace

std::string attempt_dir(const std::string& log_dir, int requeue, int attempt) {
  if (requeue > 0) return fmt::format("{}/requeue_{}/attempt_{}", log_dir, requeue, attempt);
  return fmt::format("{}/attempt_{}", log_dir, attempt);
}

std::string rank_log_dir(const std::string& log_dir, int requeue, int attempt, int rank) {
  return fmt::format("{}/rank_{}", attempt_dir(log_dir, requeue, attempt), rank);
}

std::string worker_error_file(const std::optional<std::string>& log_dir, int requeue, int attempt, int rank,
                              const std::string& private_dir) {
  if (log_dir) return rank_log_dir(*log_dir, requeue, attempt, rank) + "/error.json";
  return fmt::format("{}/rank_{}.json", private_dir, rank);
}

std::string worker_heartbeat_file(const std::optional<std::string>& log_dir, int requeue, int attempt,
                                  int rank, const std::string& private_dir) {
  if (log_dir) return rank_log_dir(*log_dir, requeue, attempt, rank) + "/heartbeat";
  return fmt::format("{}/rank_{}/heartbeat", private_dir, rank);
}

std::string error_file_path(const ErrorFileSpec& s) {
  if (s.error_file) {
    const std::string placeholder = "{node_rank}";
    const bool named = s.error_file->find(placeholder) != std::string::npos;
    std::string path = replace_all(*s.error_file, placeholder, std::to_string(s.node_rank));
    if (s.agents <= 1) return path;
    if (s.task_rank) return with_tag(path, fmt::format("rank{}", *s.task_rank));
    return named ? path : with_tag(path, fmt::format("node{}", s.node_rank));
  }
  if (!s.log_dir) return "";
  const std::string dir = attempt_dir(*s.log_dir, s.requeue, s.attempt);
  if (s.task_rank) return fmt::format("{}/error_rank_{}.json", dir, *s.task_rank);
  return fmt::format("{}/error_node_{}.json", dir, s.node_rank);
}

std::string stale_error_file(const ErrorFileSpec& s) {
  if (s.error_file && s.attempt > 0) return "";
  return error_file_path(s);
}

}  // namespace ddprun::agent
