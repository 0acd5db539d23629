// Python tracebacks from TORCHELASTIC_ERROR_FILE: what the agent takes from an error file, and
// that no file, however broken, breaks the report.
#include <sys/stat.h>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>

#include <nlohmann/json.hpp>

#include "agent/python_error.hpp"
#include "core/failure.hpp"
#include "support/temp_dir.hpp"

using ddprun::agent::ErrorFiles;
using ddprun::agent::parse_python_error;
using ddprun::agent::PythonError;
using ddprun::agent::read_python_error;
using ddprun::core::kPythonErrorCap;

namespace {

// An error file as @record writes it.
std::string torch_record(const std::string& message, const std::string& traceback) {
  const nlohmann::json j = {
      {"message", {{"message", message}, {"extraInfo", {{"py_callstack", traceback}, {"timestamp", "1"}}}}}};
  return j.dump();
}

}  // namespace

TEST_CASE("python error file: torchrun's form and the older one", "[python_error]") {
  struct Row {
    std::string text;
    std::optional<std::string> message;  // nullopt: no error info
    std::string traceback;
  };
  const Row table[] = {
      // What @record writes (torch 1.13 and 2.x).
      {R"({"message": {"message": "ValueError: boom", "extraInfo": {"py_callstack": "Traceback (most recent call last):\n  File \"w.py\", line 3, in main\n", "timestamp": "1763000000"}}})",
       "ValueError: boom", "Traceback (most recent call last):\n  File \"w.py\", line 3, in main\n"},
      // The older form: a plain message and a top-level timestamp.
      {R"({"message": "RuntimeError: old style", "timestamp": 1763000000})", "RuntimeError: old style", ""},
      // No extraInfo, or a py_callstack of the wrong type: the message alone.
      {R"({"message": {"message": "E: m"}})", "E: m", ""},
      {R"({"message": {"message": "E: m", "extraInfo": {"py_callstack": 7}}})", "E: m", ""},
      {R"({"message": {"message": "E: m", "extraInfo": "x"}})", "E: m", ""},
      // Escapes decode (Python's json.dump writes ASCII with \u escapes).
      {R"({"message": "E: caf\u00e9"})", "E: caf\xc3\xa9", ""},
      // Nothing usable.
      {"", std::nullopt, ""},
      {"   ", std::nullopt, ""},
      {"{not json", std::nullopt, ""},
      {R"({"message": {"message": "E: m", )", std::nullopt, ""},  // cut short while being written
      {"[]", std::nullopt, ""},
      {"\"just a string\"", std::nullopt, ""},
      {R"({"msg": "E: m"})", std::nullopt, ""},
      {R"({"message": 3})", std::nullopt, ""},
      {R"({"message": null})", std::nullopt, ""},
      {R"({"message": {"message": ["E"]}})", std::nullopt, ""},
      {R"({"message": {"extraInfo": {"py_callstack": "tb"}}})", std::nullopt, ""},
      {R"({"message": ""})", std::nullopt, ""},
      {"{\"message\": \"E: \xff\xfe\"}", std::nullopt, ""},  // not UTF-8: nlohmann rejects it
      {std::string("{\"message\": \"E\0\"}", 15), std::nullopt, ""},
  };
  for (const auto& row : table) {
    CAPTURE(row.text);
    std::optional<PythonError> e;
    REQUIRE_NOTHROW(e = parse_python_error(row.text));
    REQUIRE(e.has_value() == row.message.has_value());
    if (!e) continue;
    CHECK(e->message == *row.message);
    CHECK(e->traceback == row.traceback);
  }
}

TEST_CASE("python error file: message and traceback are cut to 16 KB, keeping the innermost frames",
          "[python_error]") {
  std::string tb = "Traceback (most recent call last):\n";
  for (int i = 0; i < 2000; ++i) tb += "  File \"deep.py\", line " + std::to_string(i) + ", in recurse\n";
  tb += "  File \"deep.py\", line 9999, in innermost_frame\n";
  const std::string text = torch_record("RecursionError: maximum recursion depth exceeded", tb);
  const auto e = parse_python_error(text);
  REQUIRE(e);
  CHECK(e->message == "RecursionError: maximum recursion depth exceeded");
  CHECK(e->message.size() + e->traceback.size() <= kPythonErrorCap);
  CHECK(e->traceback.rfind("[traceback cut by ddprun", 0) == 0);
  CHECK(e->traceback.find("in innermost_frame") != std::string::npos);
  CHECK(e->traceback.find("line 0,") == std::string::npos);  // the outermost frames went
  // The line after the note is a whole line of the traceback.
  const auto second = e->traceback.substr(e->traceback.find('\n') + 1);
  CHECK(second.rfind("  File \"deep.py\"", 0) == 0);

  // A huge message alone keeps its start, with a note, and leaves room for the traceback.
  const auto m = parse_python_error(torch_record("E: " + std::string(100000, 'x'), "tb\n"));
  REQUIRE(m);
  CHECK(m->message.rfind("E: xxx", 0) == 0);
  CHECK(m->message.find("[message cut by ddprun]") != std::string::npos);
  CHECK(m->traceback == "tb\n");
  CHECK(m->message.size() + m->traceback.size() <= kPythonErrorCap);

  // The cut never splits a UTF-8 sequence (é is two bytes).
  std::string accents;
  for (int i = 0; i < 20000; ++i) accents += "\xc3\xa9";
  const auto u = parse_python_error(torch_record("E: m", accents));
  REQUIRE(u);
  const auto body = u->traceback.substr(u->traceback.find('\n') + 1);
  REQUIRE_FALSE(body.empty());
  CHECK(static_cast<unsigned char>(body.front()) == 0xc3);
  CHECK(body.size() % 2 == 0);
}

TEST_CASE("python error file: reading is bounded and never fails", "[python_error]") {
  ddprun::test::TempDir dir;
  CHECK_FALSE(read_python_error(dir / "missing.json"));
  CHECK_FALSE(read_python_error(dir.str()));  // a directory
  std::ofstream(dir / "empty.json").close();
  CHECK_FALSE(read_python_error(dir / "empty.json"));
  std::ofstream(dir / "ok.json") << R"({"message": "E: fine"})";
  CHECK(read_python_error(dir / "ok.json").value().message == "E: fine");
  // Over the read cap: not read at all, even though it is valid JSON.
  {
    std::ofstream big(dir / "big.json");
    big << R"({"message": ")" << std::string(ddprun::agent::kErrorFileReadCap, 'x') << R"("})";
  }
  CHECK_FALSE(read_python_error(dir / "big.json"));
}

TEST_CASE("python error files: a fresh path per rank, stale files removed, the temp dir private and removed",
          "[python_error]") {
  ddprun::test::TempDir logs;
  {
    const ErrorFiles files(logs.str(), 0, 2);
    const std::string rank_dir = logs / "attempt_2/rank_5";
    std::filesystem::create_directories(rank_dir);
    std::ofstream(rank_dir + "/error.json") << R"({"message": "E: from an earlier run"})";
    CHECK(files.prepare(5) == rank_dir + "/error.json");
    CHECK_FALSE(std::filesystem::exists(rank_dir + "/error.json"));
    CHECK(ErrorFiles(logs.str(), 3, 0).prepare(1) == logs / "requeue_3/attempt_0/rank_1/error.json");
  }
  CHECK(std::filesystem::exists(logs.str()));  // --log-dir is the user's: kept

  std::string temp_path;
  {
    const ErrorFiles files(std::nullopt, 0, 0);
    temp_path = files.prepare(3);
    const auto dir = std::filesystem::path(temp_path).parent_path();
    struct stat st {};
    REQUIRE(::stat(dir.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0700);
    std::ofstream(temp_path) << "{}";
    CHECK(files.prepare(3) == temp_path);
    CHECK_FALSE(std::filesystem::exists(temp_path));
    std::ofstream(temp_path) << "{}";
  }
  CHECK_FALSE(std::filesystem::exists(std::filesystem::path(temp_path).parent_path()));
}

TEST_CASE("python error files: no temporary directory is a warning, not a failed job", "[python_error]") {
  const char* old = std::getenv("TMPDIR");
  const std::string saved = old != nullptr ? old : "";
  ::setenv("TMPDIR", "/nonexistent/ddprun-test", 1);
  std::string warned;
  const auto files =
      ddprun::agent::open_error_files(std::nullopt, 0, 0, [&](const std::string& m) { warned = m; });
  if (old != nullptr) {
    ::setenv("TMPDIR", saved.c_str(), 1);
  } else {
    ::unsetenv("TMPDIR");
  }
  CHECK(files == nullptr);
  CHECK_THAT(warned, Catch::StartsWith("cannot create a directory for the workers' error files in "
                                       "/nonexistent/ddprun-test: No such file or directory") &&
                         Catch::EndsWith("Python tracebacks will not be in the report"));
  ddprun::test::TempDir logs;  // with --log-dir, no temporary directory is needed
  CHECK(ddprun::agent::open_error_files(logs.str(), 0, 0, [](const std::string&) {}) != nullptr);
}
