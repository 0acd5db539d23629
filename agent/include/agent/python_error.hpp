#pragma once
// Python tracebacks in the failure report: every worker gets its own TORCHELASTIC_ERROR_FILE, where
// a main decorated with torch's @record (torch.distributed.elastic.multiprocessing.errors) writes the
// exception that ended it. After a failure the agent reads that file into the root cause.
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "agent/private_dir.hpp"

namespace ddprun::agent {

// Bytes read from an error file at most; a bigger file is not read (it would not fit the report).
inline constexpr std::size_t kErrorFileReadCap = 1024 * 1024;

struct PythonError {
  std::string message;    // "ValueError: distinctive-message"
  std::string traceback;  // Python's "Traceback (most recent call last): ..."; may be empty
};

// Parses an error file's text. Pure, never throws. Accepts torchrun's form
//   {"message": {"message": "<Type>: <msg>", "extraInfo": {"py_callstack": "<tb>", "timestamp": "<n>"}}}
// and the older one with a plain-string "message" (and a top-level "timestamp"). nullopt for
// anything else: empty, not JSON, not UTF-8, wrong types, no message. Message and traceback together
// are cut to core::kPythonErrorCap bytes: the message keeps its start, the traceback its end (the
// innermost frames), and a line says what was cut.
std::optional<PythonError> parse_python_error(std::string_view text);

// Reads and parses the file at `path`; nullopt when it is missing, unreadable, empty, over
// kErrorFileReadCap bytes, or not an error record.
std::optional<PythonError> read_python_error(const std::string& path);

// Where this launch's workers write their error files, for one attempt: under --log-dir,
// DIR/[requeue_<q>/]attempt_<n>/rank_<r>/error.json beside the rank's logs; else a private
// temporary directory (mode 0700) removed when this object goes.
// The private directory's <what> (PrivateDir) without --log-dir: <TMPDIR>/ddprun-errors-XXXXXX.
inline constexpr const char* kErrorFilesDir = "errors";

class ErrorFiles {
 public:
  // Throws Error when the temporary directory cannot be made.
  ErrorFiles(const std::optional<std::string>& log_dir, int requeue, int attempt);
  ErrorFiles(const ErrorFiles&) = delete;
  ErrorFiles& operator=(const ErrorFiles&) = delete;

  // The rank's path, with any file left there by an earlier run removed (its directory must exist:
  // the log relay makes the rank's log directory).
  std::string prepare(int rank) const;
  // The private directory the files are in; "" with --log-dir.
  const std::string& private_dir() const { return temp_dir_.path(); }

 private:
  std::optional<std::string> log_dir_;
  int requeue_;
  int attempt_;
  PrivateDir temp_dir_;  // not made with --log-dir
};

// The ErrorFiles of a run, or nullptr after telling `warn` why the temporary directory could not be made:
// tracebacks are a diagnostic, and the job runs without them, as torchrun's workers do without
// TORCHELASTIC_ERROR_FILE.
std::unique_ptr<ErrorFiles> open_error_files(const std::optional<std::string>& log_dir, int requeue,
                                             int attempt,
                                             const std::function<void(const std::string&)>& warn);

}  // namespace ddprun::agent
