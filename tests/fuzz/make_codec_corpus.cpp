// Writes the seed corpus of fuzz_codec into the directory given as argv[1], using the codec's own
// encoders so the seeds follow the protocol exactly. Not run by the build; the output is kept in
// tests/fuzz/corpus/codec/. Regenerate after a protocol change:
//   cmake --build BUILD --target fuzz_make_codec_corpus
//   BUILD/tests/fuzz/fuzz_make_codec_corpus tests/fuzz/corpus/codec
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "store/codec.hpp"

namespace proto = ddprun::store::proto;
namespace fs = std::filesystem;

namespace {

fs::path g_dir;

void write(const std::string& name, const std::string& bytes) {
  std::ofstream out(g_dir / name, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "cannot write %s\n", (g_dir / name).c_str());
    std::exit(1);
  }
}

std::string be32(std::uint32_t v) {
  std::string s;
  for (int shift = 24; shift >= 0; shift -= 8) {
    s.push_back(static_cast<char>(static_cast<std::uint8_t>(v >> shift)));
  }
  return s;
}

proto::Request req(proto::Op op) {
  proto::Request r;
  r.op = op;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTPUT_DIR\n", argv[0]);
    return 2;
  }
  g_dir = argv[1];
  fs::create_directories(g_dir);

  proto::Hello hello;
  hello.run_id = "job-42";
  hello.label = "agent/0/3";
  hello.liveness_ms = 5000;
  const std::string h = proto::encode_hello(hello);

  // One well-formed session per operation: hello, then the request.
  std::vector<std::pair<std::string, proto::Request>> reqs;
  {
    auto r = req(proto::Op::set);
    r.key = "/rdzv/0/node/3";
    r.value = std::string("{\"host\":\"n3\",\0\xff}", 17);
    reqs.emplace_back("set", r);
    r = req(proto::Op::get), r.key = "/rdzv/0/plan", r.timeout_ms = 30000;
    reqs.emplace_back("get", r);
    r = req(proto::Op::add), r.key = "/rdzv/0/joined", r.number = -1;
    reqs.emplace_back("add", r);
    r = req(proto::Op::compare_set), r.key = "/rdzv/state", r.value = "", r.value2 = "closed";
    reqs.emplace_back("compare_set", r);
    r = req(proto::Op::check), r.keys = {"a", "b", ""};
    reqs.emplace_back("check", r);
    r = req(proto::Op::del), r.key = "/rdzv/0/node/3";
    reqs.emplace_back("del", r);
    reqs.emplace_back("num_keys", req(proto::Op::num_keys));
    r = req(proto::Op::wait), r.keys = {"/rdzv/0/go"}, r.timeout_ms = 1;
    reqs.emplace_back("wait", r);
    r = req(proto::Op::wait_any), r.keys = {"/abort", "/done"}, r.timeout_ms = UINT64_MAX;
    reqs.emplace_back("wait_any", r);
    reqs.emplace_back("ping", req(proto::Op::ping));
  }
  std::string all = h;
  for (const auto& [name, r] : reqs) {
    write("session_" + name, h + proto::encode_request(r));
    all += proto::encode_request(r);
  }
  write("session_all_ops", all);
  write("hello", h);

  // Responses, as the client reads them (the same bytes also go through the server path).
  write("response_ok", proto::encode_response({proto::Status::ok, 1, "value"}));
  write("response_sequence", proto::encode_response({proto::Status::timeout, 0, ""}) +
                                 proto::encode_response({proto::Status::not_found, -1, ""}) +
                                 proto::encode_response({proto::Status::error, 0, "run id mismatch"}));

  // Hostile or broken peers.
  write("http_get", "GET / HTTP/1.1\r\nHost: n0:29500\r\nUser-Agent: curl/7.88\r\n\r\n");
  write("absurd_length", be32(0xffffffffu) + "DRDV");
  write("zero_length", be32(0) + h);
  write("hello_over_first_frame_cap", be32(proto::kMaxHelloSize + 1) + std::string(64, 'A'));
  proto::Hello bad = hello;
  bad.magic = 0x47455420;  // "GET "
  write("hello_bad_magic", proto::encode_hello(bad));
  bad = hello, bad.version = 2;
  write("hello_version_2", proto::encode_hello(bad));
  bad = hello, bad.run_id = std::string(300, 'r');
  write("hello_long_run_id", proto::encode_hello(bad));
  write("hello_truncated", h.substr(0, h.size() - 3));
  write("request_absurd_length", h + be32(0x7fffffffu) + "\x02");
  // wait with a key count far above the cap: must be refused before anything is reserved.
  write("wait_huge_key_count", h + be32(5) + "\x09" + be32(0xfffffff0u));
  write("unknown_op", h + be32(1) + "\x63");
  std::string trailing = proto::encode_request(req(proto::Op::ping));
  trailing[3] = '\x02';
  trailing += 'x';
  write("ping_trailing_byte", h + trailing);
  std::string garbage;
  std::uint32_t x = 0x9e3779b9u;
  for (int i = 0; i < 512; ++i) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    garbage.push_back(static_cast<char>(static_cast<std::uint8_t>(x)));
  }
  write("garbage", garbage);
  return 0;
}
