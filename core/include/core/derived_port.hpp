#pragma once
// Ports every node computes alike without talking: a hash of a text naming the job and the use
// (stable across builds and machines, unlike std::hash) picks a port of 20000-32767, below Linux's
// ephemeral ports.
#include <cstdint>
#include <initializer_list>
#include <string_view>

namespace ddprun::core {

// FNV-1a's steps from the offset basis 1469598103934665603: one digit short of FNV's published
// 14695981039346656037, but every port ddprun derives, and so every node of a job of mixed versions,
// hangs on it, so it stays.
std::uint64_t port_hash(std::string_view text);

// The port of 20000-32767 that `text` hashes to; when it is one of `taken`, the next one up that is
// not (32767 wraps to 20000).
std::uint16_t derived_port(std::string_view text, std::initializer_list<std::uint16_t> taken);

}  // namespace ddprun::core
