#pragma once
// `ddprun stacks` (docs/observe.md, issue 27 §3), its pure part: the --rank selection, and the
// grouping that prints ranks stopped in the same frames once, with a rank list ("0-3,7"), so that a
// thousand ranks waiting in one collective are one block.
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace ddprun::core {

// "3,7-9" -> {3, 7, 8, 9}. Throws core::Error (exit 2) naming the bad part: an empty item, a
// negative or non-numeric rank, a range whose end is below its start, more than kMaxSelectedRanks.
inline constexpr int kMaxSelectedRanks = 1 << 20;
std::set<int> parse_rank_selection(std::string_view spec);

// Sorted ranks as the shortest list of runs: {0,1,2,3,7,9,10} -> "0-3,7,9-10".
std::string format_rank_list(const std::vector<int>& ranks);

// One rank's stack as collected (faulthandler's text, or eu-stack's).
struct RankStack {
  int rank = 0;
  std::string text;
};

// Ranks whose stacks are the same once what differs from process to process is set aside (pids,
// thread ids, addresses: see stack_signature), in order of size (largest first), then first rank.
struct StackGroup {
  std::vector<int> ranks;  // ascending
  std::string text;        // the first rank's stack, as it came
};
std::vector<StackGroup> group_stacks(const std::vector<RankStack>& stacks);

// What two stacks are compared by: each hexadecimal number (0x...) as "0x?", and the numbers in
// eu-stack's "PID n" / "TID n" headers and faulthandler's "Thread 0x..." as "?"; other text kept.
std::string stack_signature(std::string_view text);

// The groups for the terminal: a header line per group ("ranks 0-3,7 (5 ranks):"), then its stack
// indented by two spaces.
std::string format_stack_groups(const std::vector<StackGroup>& groups);

// How a request travels (docs/observe.md): the client sets kStacksRequestKey to an encoded
// StacksRequest; each agent answers once per nonce under stacks_reply_key(nonce, its node rank).
inline constexpr const char* kStacksRequestKey = "/stacks/request";
std::string stacks_reply_key(std::string_view nonce, int node_rank);

struct StacksRequest {
  std::string nonce;                   // letters and digits, at most 64
  std::optional<std::set<int>> ranks;  // nullopt: every rank
};
std::string encode_stacks_request(const StacksRequest& r);
// Throws core::Error on anything malformed (an agent then ignores the request).
StacksRequest decode_stacks_request(std::string_view text);

// One node's answer: the stacks of its selected ranks.
struct NodeStacks {
  int node_rank = 0;
  std::string host;
  std::vector<RankStack> ranks;
};
std::string encode_node_stacks(const NodeStacks& n);
NodeStacks decode_node_stacks(std::string_view text);  // throws core::Error when malformed

// The first line a Python worker writes to its stacks file once faulthandler is registered
// ("ddprun-stacks PID"): the pid to signal; nullopt when `head` does not start with one.
std::optional<long> parse_stacks_marker(std::string_view head);

}  // namespace ddprun::core
