#pragma once
// The workers' store's semantics, without sockets: what each of torch's TCPStore requests does to the
// keys, queues, pending WAITs and watches, and which answers it produces for which peer, as torch's own
// servers answer (docs/protocol.md, "The workers' store"). The server (c10d_server.cpp) applies the
// requests its connections read and sends what lands in each peer's buffer; the table tests
// (tests/unit/store/test_c10d_keyspace.cpp) apply requests and read the buffers.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "store/c10d_codec.hpp"

namespace ddprun::store::c10d {

struct KeyspaceLimits {
  std::size_t max_stored_bytes = std::size_t{4} << 30;  // keys and values of the whole store
  std::size_t max_reply = 256u << 20;                   // one MULTI_GET's or LIST's answer
  std::size_t max_waiting = 16u << 20;                  // keys awaited by pending WAITs, in all
};

// Where answers go.
class Outbox {
 public:
  virtual ~Outbox() = default;
  // The buffer that peer `id`'s answers are appended to; nullptr once that peer is gone.
  virtual std::string* to(std::uint64_t id) = 0;
};

// Who sent a request: an id that is never reused, and whether it is a relay, which speaks the tagged form
// (each answer framed with its request's tag; CANCEL_WAIT names the one wait to drop) for a whole node's
// workers, so it may hold more WAITs and watches than one worker.
struct Peer {
  std::uint64_t id = 0;
  bool relay = false;
};

class Keyspace {
 public:
  Keyspace(KeyspaceLimits limits, Outbox& out) : limits_(limits), out_(out) {}

  // Applies one request. Its answer, and those it releases (the WAITs it completes, WATCH_KEY events),
  // go to the outbox. Throws store::Error(protocol) for a request that breaks the protocol or a limit (the
  // caller closes that peer); such a request changes nothing, except a MULTI_SET's pairs before the one
  // that did not fit.
  void apply(const Peer& from, Request& q);
  // A peer that is gone: its pending WAITs are dropped (its watches go at the next event of their key).
  void forget(std::uint64_t id);
  // Every key, queue, wait and watch dropped.
  void clear();
  std::size_t key_count() const { return kv_.size(); }

 private:
  struct Wait {
    Peer peer;
    std::uint32_t tag = 0;
    std::uint32_t remaining = 0;  // keys still missing
  };
  struct Watch {
    Peer peer;
    std::uint32_t tag = 0;
  };
  struct PeerState {
    std::vector<std::uint64_t> waits;  // its pending WAITs
    std::size_t watches = 0;
  };

  // Appends an answer for `to` (framed with `tag` for a relay); false when `to` is gone.
  template <typename Body>
  bool reply(const Peer& to, std::uint32_t tag, Body&& body);
  void reply_u8(const Peer& to, std::uint32_t tag, std::uint8_t v);
  void reply_i64(const Peer& to, std::uint32_t tag, std::int64_t v);
  void reply_bytes(const Peer& to, std::uint32_t tag, std::string_view v);

  void on_handshake(const Peer& from, const Request& q);
  void on_get(const Peer& from, Request& q);
  void on_set(std::string& key, std::string& value);
  void on_compare_set(const Peer& from, Request& q);
  void on_add(const Peer& from, Request& q);
  void on_check(const Peer& from, const Request& q);
  void on_wait(const Peer& from, Request& q);
  void on_cancel(const Peer& from, const Request& q);
  void on_delete(const Peer& from, const Request& q);
  void on_append(Request& q);
  void on_multi_get(const Peer& from, const Request& q);
  void on_watch(const Peer& from, const Request& q);
  void on_queue_push(Request& q);
  void on_queue_pop(const Peer& from, const Request& q);
  void on_queue_len(const Peer& from, const Request& q);
  void on_list(const Peer& from, const Request& q);

  bool exists(const std::string& key) const;
  std::ptrdiff_t set_cost(const std::string& key, const std::string& value) const;
  void check_room(std::ptrdiff_t delta) const;
  void account(std::ptrdiff_t delta);
  void wake(const std::string& key);
  void wake_one(const std::string& key);
  void finish_wait(std::uint64_t id);
  void drop_waits(PeerState& p);
  void compact_waiting();
  void notify(const std::string& key, WatchEvent type, std::string_view old_value,
              std::string_view new_value);

  KeyspaceLimits limits_;
  Outbox& out_;
  std::unordered_map<std::string, std::string> kv_;
  std::unordered_map<std::string, std::deque<std::string>> queues_;
  std::size_t stored_ = 0;  // bytes of keys and values held
  std::unordered_map<std::uint64_t, PeerState> peers_;
  std::unordered_map<std::uint64_t, Wait> waits_;
  std::uint64_t next_wait_ = 0;
  // key -> the waits for it; a dropped wait's id stays until the key is written or the sweep.
  std::unordered_map<std::string, std::vector<std::uint64_t>> waiting_;
  std::size_t refs_total_ = 0;  // ids in waiting_
  std::size_t refs_live_ = 0;   // of those, ids of waits still pending
  std::unordered_map<std::string, std::vector<Watch>> watchers_;
};

}  // namespace ddprun::store::c10d
