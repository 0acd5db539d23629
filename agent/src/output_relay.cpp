#include "output_relay.hpp"

#include <fcntl.h>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "agent/error.hpp"
#include "agent/log_paths.hpp"

namespace ddprun::agent {

OutputRelay::OutputRelay(const AgentOptions& opts, int world_size)
    : opts_(opts),
      prefix_on_(!opts.no_prefix && (opts.prefix_template.has_value() || world_size > 1)),
      template_(opts.prefix_template.value_or(std::string(kDefaultPrefixTemplate))) {}

void OutputRelay::add(const core::Worker& w, const std::string& host) {
  auto s = std::make_unique<Sink>();
  if (prefix_on_) {
    const auto role = w.env.find("ROLE_NAME");
    s->prefix = render_prefix(template_, PrefixFields{w.rank, w.local_rank, w.node_rank, host,
                                                      role != w.env.end() ? role->second : "default"});
  }
  s->console = !opts_.local_ranks_filter || opts_.local_ranks_filter->count(w.local_rank) > 0;
  if (opts_.log_dir) open_log_files(*s, w.rank);
  sinks_.push_back(std::move(s));
}

void OutputRelay::open_log_files(Sink& s, int rank) const {
  const std::string dir = rank_log_dir(*opts_.log_dir, opts_.requeue, opts_.attempt, rank);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error("cannot create log directory " + dir + ": " + ec.message(), 1);
  for (const bool is_err : {false, true}) {
    const std::string path = dir + (is_err ? "/stderr.log" : "/stdout.log");
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) throw Error("cannot open log file " + path + ": " + std::strerror(errno), 1);
    (is_err ? s.err_file : s.out_file) = LineWriter(fd, true);
  }
}

void OutputRelay::line(std::size_t worker, bool is_err, std::string_view text) {
  Sink& s = *sinks_.at(worker);
  if (s.console) (is_err ? err_console_ : out_console_).line(s.prefix, text);
  (is_err ? s.err_file : s.out_file).line({}, text);
  if (is_err) s.tail.push(text);
}

void OutputRelay::flush(std::size_t worker, bool is_err) {
  Sink& s = *sinks_.at(worker);
  (is_err ? err_console_ : out_console_).flush();
  (is_err ? s.err_file : s.out_file).flush();
}

std::vector<std::string> OutputRelay::stderr_tail(std::size_t worker) const {
  const auto t = sinks_.at(worker)->tail.lines();
  return {t.begin(), t.end()};
}

}  // namespace ddprun::agent
