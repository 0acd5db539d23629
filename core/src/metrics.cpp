#include "core/metrics.hpp"

#include <fmt/format.h>

#include <cmath>
#include <functional>
#include <optional>

namespace ddprun::core {

std::string escape_label_value(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (const char c : v) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        out += c;
    }
  }
  return out;
}

namespace {

// A sample value: integers without a fraction, the rest with enough digits (NaN/Inf never come:
// the record's figures are finite).
std::string value(double v) {
  if (!std::isfinite(v)) return v != v ? "NaN" : (v > 0 ? "+Inf" : "-Inf");
  if (v == std::floor(v) && std::fabs(v) < 1e15) return fmt::format("{}", static_cast<long long>(v));
  return fmt::format("{:.3f}", v);
}

std::string rank_labels(const NodeStatus& n, const RankStatus& r) {
  return fmt::format(R"(rank="{}",local_rank="{}",node_rank="{}",host="{}")", r.rank, r.local_rank,
                     n.node_rank, escape_label_value(n.host));
}

struct Family {
  const char* name;
  const char* type;
  const char* help;
};

void header(std::string& out, const Family& f) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", f.name, f.help, f.name, f.type);
}

// One family with a sample per rank that has the figure.
void per_rank(std::string& out, const std::vector<NodeStatus>& nodes, const Family& f,
              const std::function<std::optional<double>(const RankStatus&)>& get) {
  header(out, f);
  for (const auto& n : nodes) {
    for (const auto& r : n.ranks) {
      if (const auto v = get(r)) out += fmt::format("{}{{{}}} {}\n", f.name, rank_labels(n, r), value(*v));
    }
  }
}

constexpr RankState kStates[] = {RankState::starting, RankState::running, RankState::hung, RankState::exited,
                                 RankState::stopped};

}  // namespace

std::string format_metrics(const std::vector<NodeStatus>& nodes) {
  std::string out;
  if (!nodes.empty() && nodes.front().node_rank == 0) {
    const NodeStatus& j = nodes.front();
    const auto job = [&](const Family& f, double v) {
      header(out, f);
      out += fmt::format("{} {}\n", f.name, value(v));
    };
    job({"ddprun_job_attempt", "gauge", "Attempt of the job now running (0: the first; --max-restarts)."},
        j.attempt);
    job({"ddprun_job_world_size", "gauge", "Workers of the job's current attempt."}, j.world_size);
    job({"ddprun_job_nodes", "gauge", "Nodes of the job's current attempt."}, j.nnodes);
    job({"ddprun_job_elastic_events", "gauge", "Rounds whose size differed from the round before."},
        j.elastic_events);
  }
  header(out,
         {"ddprun_rank_state", "gauge", "1 for the state the rank is in (label state), 0 for the others."});
  for (const auto& n : nodes) {
    for (const auto& r : n.ranks) {
      for (const RankState s : kStates) {
        out += fmt::format("ddprun_rank_state{{{},state=\"{}\"}} {}\n", rank_labels(n, r), to_string(s),
                           s == r.state ? 1 : 0);
      }
    }
  }
  per_rank(out, nodes, {"ddprun_rank_pid", "gauge", "Process id of the rank's worker."},
           [](const RankStatus& r) -> std::optional<double> { return static_cast<double>(r.pid); });
  per_rank(out, nodes, {"ddprun_rank_exit_code", "gauge", "Exit code of a rank that ended (128 + signal)."},
           [](const RankStatus& r) -> std::optional<double> {
             if (!r.exit_code) return std::nullopt;
             return *r.exit_code;
           });
  per_rank(out, nodes, {"ddprun_rank_run_seconds", "gauge", "Seconds since the rank's worker started."},
           [](const RankStatus& r) -> std::optional<double> { return r.run_seconds; });
  per_rank(out, nodes,
           {"ddprun_rank_seconds_since_progress", "gauge",
            "Seconds since the rank's last output line or DDPRUN_HEARTBEAT_FILE touch."},
           [](const RankStatus& r) { return r.progress_age; });
  per_rank(out, nodes, {"ddprun_rank_step", "gauge", "Training step the rank last reported."},
           [](const RankStatus& r) -> std::optional<double> {
             if (!r.step) return std::nullopt;
             return static_cast<double>(*r.step);
           });
  per_rank(out, nodes, {"ddprun_rank_rss_bytes", "gauge", "Resident memory of the rank's worker process."},
           [](const RankStatus& r) -> std::optional<double> {
             if (!r.rss_bytes) return std::nullopt;
             return static_cast<double>(*r.rss_bytes);
           });
  per_rank(out, nodes,
           {"ddprun_rank_cpu_percent", "gauge", "CPU use of the rank's worker, in % of one core."},
           [](const RankStatus& r) { return r.cpu_percent; });
  per_rank(out, nodes, {"ddprun_rank_restarts", "gauge", "Restarts of the job this rank has been through."},
           [](const RankStatus& r) -> std::optional<double> { return r.restarts; });
  return out;
}

HttpVerdict classify_http_request(std::string_view head) {
  HttpVerdict v;
  const auto eol = head.find_first_of("\r\n");
  const std::string_view line = head.substr(0, eol);
  // METHOD SP TARGET SP HTTP/1.x, nothing else on the line.
  const auto sp1 = line.find(' ');
  if (sp1 == std::string_view::npos || sp1 == 0) return v;
  const auto sp2 = line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || sp2 == sp1 + 1) return v;
  const std::string_view method = line.substr(0, sp1);
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (version != "HTTP/1.0" && version != "HTTP/1.1") return v;
  for (const char c : method) {
    if (c < 'A' || c > 'Z') return v;
  }
  for (const char c : target) {
    if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f) return v;
  }
  if (target.front() != '/') return v;
  const std::string_view path = target.substr(0, target.find('?'));
  if (method != "GET" && method != "HEAD") {
    v.status = 405;
    return v;
  }
  v.head_only = method == "HEAD";
  v.status = path == "/metrics" ? 200 : 404;
  return v;
}

HeadScan scan_request_head(std::string_view in, std::size_t max) {
  HeadScan out;
  const auto crlf = in.find("\r\n\r\n");
  const auto lflf = in.find("\n\n");
  const bool by_crlf = crlf != std::string_view::npos && (lflf == std::string_view::npos || crlf < lflf);
  const auto end = by_crlf ? crlf : lflf;
  if (end == std::string_view::npos) {
    out.state = in.size() >= max ? HeadScan::State::too_large : HeadScan::State::more;
    return out;
  }
  if (end + (by_crlf ? 4 : 2) > max) {
    out.state = HeadScan::State::too_large;
    return out;
  }
  out.state = HeadScan::State::complete;
  out.head = in.substr(0, end + (by_crlf ? 2 : 1));  // its last line's end kept, as a head's lines have
  return out;
}

std::string http_response(int status, std::string_view content_type, std::string_view body, bool head_only) {
  const char* reason = status == 200   ? "OK"
                       : status == 404 ? "Not Found"
                       : status == 405 ? "Method Not Allowed"
                       : status == 503 ? "Service Unavailable"
                                       : "Bad Request";
  std::string out =
      fmt::format("HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n{}Connection: close\r\n\r\n",
                  status, reason, content_type, body.size(), status == 405 ? "Allow: GET, HEAD\r\n" : "");
  if (!head_only) out.append(body);
  return out;
}

}  // namespace ddprun::core
