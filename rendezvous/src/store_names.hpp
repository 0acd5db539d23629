#pragma once
// The store's names the rendezvous's sources use, by their short names inside this layer (the
// store lives in its own namespace, ddprun::store).
#include "store/store.hpp"

namespace ddprun::store {
class Backoff;
class PrefixStore;
class ServerStore;
class StoreServer;
class TcpStore;
struct ClientOptions;
struct ServerOptions;
}  // namespace ddprun::store

namespace ddprun::rdzv {

using store::Backoff;
using store::clamp_timeout;
using store::ClientOptions;
using store::kMaxWait;
using store::Millis;
using store::PrefixStore;
using store::ServerOptions;
using store::ServerStore;
using store::Store;
using store::StoreServer;
using store::TcpStore;

}  // namespace ddprun::rdzv
