#pragma once
// Worker output to the agent's stdout and stderr (prefixed, filtered by local rank) and to the
// per-rank log files; keeps each worker's last stderr lines for the failure report.
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "agent/supervisor.hpp"
#include "core/plan.hpp"
#include "log_relay.hpp"

namespace ddprun::agent {

class OutputRelay {
 public:
  OutputRelay(const AgentOptions& opts, int world_size);

  // The next worker's prefix, console filter and log files. Throws Error (exit 1) when its log
  // directory or files cannot be created.
  void add(const core::Worker& w, const std::string& host);

  // `worker` is the order of add(). Lines are buffered until flush(), which the supervisor calls
  // after each read, so one write(2) carries whole lines.
  void line(std::size_t worker, bool is_err, std::string_view text);
  void flush(std::size_t worker, bool is_err);
  std::vector<std::string> stderr_tail(std::size_t worker) const;

 private:
  struct Sink {
    std::string prefix;
    bool console = true;
    LineWriter out_file;
    LineWriter err_file;
    TailBuffer tail{20};
  };

  void open_log_files(Sink& s, int rank) const;

  const AgentOptions& opts_;
  bool prefix_on_;
  std::string template_;
  LineWriter out_console_{1};
  LineWriter err_console_{2};
  std::vector<std::unique_ptr<Sink>> sinks_;
};

}  // namespace ddprun::agent
