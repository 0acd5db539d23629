#include "log_relay.hpp"

#include "agent/io.hpp"

#include <poll.h>
#include <unistd.h>
#include <cerrno>
#include <climits>
#include <utility>

#include "agent/error.hpp"

namespace ddprun::agent {

std::string render_prefix(std::string_view tmpl, const PrefixFields& f) {
  std::string out;
  std::size_t i = 0;
  while (i < tmpl.size()) {
    const char c = tmpl[i];
    if (c == '{' && i + 1 < tmpl.size() && tmpl[i + 1] == '{') {
      out.push_back('{');
      i += 2;
    } else if (c == '}' && i + 1 < tmpl.size() && tmpl[i + 1] == '}') {
      out.push_back('}');
      i += 2;
    } else if (c == '{') {
      const auto close = tmpl.find('}', i);
      if (close == std::string_view::npos) {
        throw Error("log prefix template '" + std::string(tmpl) +
                    "' has an unclosed '{'; use {rank}, {local_rank}, {node_rank}, {host}, {role}, "
                    "or '{{' for a literal brace");
      }
      const std::string_view name = tmpl.substr(i + 1, close - i - 1);
      if (name == "rank") {
        out += std::to_string(f.rank);
      } else if (name == "local_rank") {
        out += std::to_string(f.local_rank);
      } else if (name == "node_rank") {
        out += std::to_string(f.node_rank);
      } else if (name == "host") {
        out += f.host;
      } else if (name == "role") {
        out += f.role;
      } else {
        throw Error("log prefix template '" + std::string(tmpl) + "' has unknown placeholder {" +
                    std::string(name) + "}; use {rank}, {local_rank}, {node_rank}, {host} or {role}");
      }
      i = close + 1;
    } else if (c == '}') {
      throw Error("log prefix template '" + std::string(tmpl) +
                  "' has a stray '}'; write '}}' for a literal brace");
    } else {
      out.push_back(c);
      ++i;
    }
  }
  return out;
}

void TailBuffer::push(std::string_view line) {
  if (capacity_ == 0) return;
  if (lines_.size() == capacity_) lines_.pop_front();
  lines_.emplace_back(line);
}

LineWriter::LineWriter(LineWriter&& o) noexcept
    : fd_(std::exchange(o.fd_, -1)), owns_(o.owns_), broken_(o.broken_), buf_(std::move(o.buf_)) {}

LineWriter& LineWriter::operator=(LineWriter&& o) noexcept {
  if (this != &o) {
    flush();
    if (owns_ && fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(o.fd_, -1);
    owns_ = o.owns_;
    broken_ = o.broken_;
    buf_ = std::move(o.buf_);
  }
  return *this;
}

LineWriter::~LineWriter() {
  flush();
  if (owns_ && fd_ >= 0) ::close(fd_);
}

void LineWriter::line(std::string_view prefix, std::string_view text) {
  if (!active()) return;
  const std::size_t n = prefix.size() + text.size() + 1;
  // PIPE_BUF is what a pipe writes atomically; keep batches within it.
  if (!buf_.empty() && buf_.size() + n > PIPE_BUF) flush();
  buf_.append(prefix);
  buf_.append(text);
  buf_.push_back('\n');
  if (buf_.size() >= PIPE_BUF) flush();
}

void LineWriter::flush() {
  if (buf_.empty()) return;
  if (active()) write_all(buf_);
  buf_.clear();
}

void LineWriter::write_all(std::string_view data) {
  // A broken fd (EPIPE, ENOSPC, ...) stops writing here; supervision goes on.
  if (!agent::write_all(fd_, data)) broken_ = true;
}

}  // namespace ddprun::agent
