#pragma once
// `--metrics-port` (docs/observe.md): the status records `ddprun top` reads, in Prometheus' text
// exposition format (version 0.0.4), and the verdict on an HTTP request's head. Pure.
#include <string>
#include <string_view>
#include <vector>

#include "core/status.hpp"

namespace ddprun::core {

inline constexpr const char* kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";

// A label value as the format wants it: backslash, double quote and newline escaped.
std::string escape_label_value(std::string_view v);

// Every metric of these nodes' records (node rank 0's first carries the job's figures; a list
// without it has no job series), each family once with its # HELP and # TYPE lines.
std::string format_metrics(const std::vector<NodeStatus>& nodes);

// What the server answers a request head (the bytes up to the blank line): 200 for GET or HEAD of
// /metrics (a query string allowed), 404 for another path, 405 for another method, 400 for anything
// that is not an HTTP/1.x request line.
struct HttpVerdict {
  int status = 400;
  bool head_only = false;  // HEAD: the headers without the body
};
HttpVerdict classify_http_request(std::string_view head);

// What the bytes a client sent so far say: read more, a complete head (the bytes up to and with its
// blank line, CRLF CRLF or LF LF), or too large: `max` bytes without a head's end, or a head whose end
// comes past `max` bytes (a head, blank line included, is at most `max` bytes).
struct HeadScan {
  enum class State { more, complete, too_large };
  State state = State::more;
  std::string_view head;  // complete: the head, without its blank line
};
HeadScan scan_request_head(std::string_view in, std::size_t max);

// The whole response for `status` with `body` (Connection: close).
std::string http_response(int status, std::string_view content_type, std::string_view body, bool head_only);

}  // namespace ddprun::core
