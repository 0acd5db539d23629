#pragma once
// Small I/O helpers the agent and the application share.
#include <string>
#include <string_view>

namespace ddprun::agent {

// Writes all of `data` to `fd`: retries EINTR and short writes, and waits out EAGAIN (someone made
// the fd non-blocking) rather than dropping output. False when the fd is broken (EPIPE, ENOSPC...).
bool write_all(int fd, std::string_view data);

// This machine's hostname; "localhost" when it cannot be read.
std::string local_hostname();

// `path` made absolute against the current directory ("./logs/" -> "/home/u/logs"):
// workers may change directory (Hydra does), so every path handed to them must be absolute. ""
// stays "", and `path` is returned as it is when the current directory cannot be read.
std::string absolute_path(const std::string& path);

}  // namespace ddprun::agent
