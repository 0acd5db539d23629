#pragma once
// The store's names the rendezvous's sources use, by their short names inside this layer (the
// store lives in its own namespace, ddprun::store; rendezvous.hpp brings the ones it declares with).
#include "store/store.hpp"

namespace ddprun::store {
class Backoff;
struct ClientOptions;
struct ServerOptions;
}  // namespace ddprun::store

namespace ddprun::rdzv {

using store::Backoff;
using store::clamp_timeout;
using store::ClientOptions;
using store::kMaxWait;
using store::Millis;
using store::ServerOptions;
using store::Store;

}  // namespace ddprun::rdzv
