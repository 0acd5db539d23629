// A standby's attempt (elastic, docs/elastic.md): no workers, only the wait for the attempt's end.
#include "deadline.hpp"
#include "keys.hpp"
#include "rendezvous_impl.hpp"
#include "store/store.hpp"

namespace ddprun::rdzv {

namespace {
constexpr Millis kPoll{500};  // how often the wait looks at `stop` and at a lost node 0
}  // namespace

std::optional<core::Failure> Rendezvous::Impl::standby(const std::function<bool()>& stop) {
  PrefixStore s = store();
  // A standby has nothing to finish: it is at the exit barrier from the start, and leaving is no
  // failure (a lost standby is only dropped from the next round, lost_monitor.cpp).
  arrive_at_barrier(s, "exit", static_cast<int>(round_.members.size()));
  for (;;) {
    if (auto cause = watch_.pending()) return cause;  // the abort pushed to the watch, or a lost node 0
    if (stop()) return std::nullopt;
    std::optional<std::size_t> got;
    try {
      got = s.wait_any({keys::barrier_done("exit"), keys::kAbort}, kPoll);
    } catch (const store::Error&) {
      continue;  // the watch names the lost node 0
    }
    if (!got) continue;
    if (*got == 1) {
      if (auto v = s.get(keys::kAbort, Millis{0})) return core::decode_failure(*v);
      continue;
    }
    // Done: the active nodes finished. Let node 0 stop serving, as barrier() does.
    ack_barrier(s, "exit");
    gate_.passed = true;
    stop_watch();
    return std::nullopt;
  }
}

}  // namespace ddprun::rdzv
