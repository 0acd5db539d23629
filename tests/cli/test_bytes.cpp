// Bytes that are not UTF-8 in arguments and the environment: ddprun's JSON output stays valid.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "run_process.hpp"

using namespace ddprun::test;

TEST_CASE("dry-run JSON with a Latin-1 argument and environment value is valid JSON",
          "[cli][dryrun][bytes]") {
  const std::string latin1 = "caf\xe9";  // 'café' in Latin-1: not UTF-8
  const auto r = run_process({DDPRUN_EXE, "--dry-run", "--format", "json", "--nproc-per-node", "2",
                              "--no-python", "--", "/bin/echo", latin1},
                             {{"OMP_NUM_THREADS", latin1}});
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(r.err.find("json.exception") == std::string::npos);
  nlohmann::json j;
  REQUIRE_NOTHROW(j = nlohmann::json::parse(r.out));
  CHECK(j.at("workers").size() == 2);
  // The argument is kept, its invalid byte replaced by U+FFFD.
  CHECK(r.out.find("caf\xef\xbf\xbd") != std::string::npos);
}
