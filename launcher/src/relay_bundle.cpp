#include "launcher/relay_bundle.hpp"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include "store/error.hpp"

namespace ddprun::launcher {

// Per record "-" (missing) or "<length>:<bytes>"; binary-safe, no re-encoding

std::string encode_bundle(const std::vector<std::optional<std::string>>& records) {
  std::string out;
  for (const auto& r : records) out += r ? fmt::format("{}:{}", r->size(), *r) : std::string("-");
  return out;
}

std::vector<std::optional<std::string>> decode_bundle(const std::string& bundle) {
  std::vector<std::optional<std::string>> out;
  std::size_t i = 0;
  while (i < bundle.size()) {
    if (bundle[i] == '-') {
      out.emplace_back(std::nullopt);
      ++i;
      continue;
    }
    std::size_t len = 0;
    const char* begin = bundle.data() + i;
    const auto [ptr, ec] = std::from_chars(begin, bundle.data() + bundle.size(), len);
    const auto colon = static_cast<std::size_t>(ptr - bundle.data());
    if (ec != std::errc() || ptr == begin || colon >= bundle.size() || bundle[colon] != ':' ||
        len > bundle.size() - colon - 1) {
      throw store::Error(store::Error::Kind::protocol, fmt::format("malformed node bundle at byte {}", i),
                         "bundle");
    }
    out.emplace_back(bundle.substr(colon + 1, len));
    i = colon + 1 + len;
  }
  return out;
}

std::vector<agent::PeerRecord> unpack_bundles(const std::vector<rdzv::ResultRecord>& nodes,
                                              const std::vector<std::vector<int>>& node_ranks) {
  std::vector<agent::PeerRecord> out;
  for (const auto& n : nodes) {
    const auto k = static_cast<std::size_t>(n.node_rank);
    if (n.node_rank < 0 || k >= node_ranks.size()) continue;
    std::vector<std::optional<std::string>> records;
    try {
      if (n.record) records = decode_bundle(*n.record);
    } catch (const store::Error&) {
      records.clear();  // a garbled bundle reads as a node whose records did not come
    }
    for (std::size_t i = 0; i < node_ranks[k].size(); ++i) {
      out.push_back({node_ranks[k][i], n.hostname, i < records.size() ? records[i] : std::nullopt});
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.node_rank < b.node_rank; });
  return out;
}

}  // namespace ddprun::launcher
