#pragma once
// Streaming output for the dry-run: text appended to a buffer, handed to the stream in large chunks.
#include <ostream>
#include <string>
#include <vector>

#include "core/plan.hpp"

namespace ddprun::launcher {

struct ChunkedOut {
  explicit ChunkedOut(std::ostream& o) : os(o) { buf.reserve(kChunk + kChunk / 4); }
  ~ChunkedOut() { flush(); }
  ChunkedOut(const ChunkedOut&) = delete;
  ChunkedOut& operator=(const ChunkedOut&) = delete;

  void maybe_flush() {
    if (buf.size() >= kChunk) flush();
  }
  void flush() {
    os.write(buf.data(), static_cast<std::streamsize>(buf.size()));
    buf.clear();
  }

  static constexpr std::size_t kChunk = std::size_t{1} << 20;
  std::ostream& os;
  std::string buf;
};

// This node's worker as bind_this_node bound it (same rank), else the derived one.
const core::Worker& bound_or(const core::Worker& derived, const std::vector<core::Worker>& bound);

}  // namespace ddprun::launcher
