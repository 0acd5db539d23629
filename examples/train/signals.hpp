// Preemption: SIGTERM/SIGUSR2. Until the first step (set-up: joining the store and the process
// groups, fetching and loading the checkpoint) a stop signal ends the process at once with
// 128 + signal: nothing new has been trained, and the blocking set-up calls of c10d and gloo
// cannot be interrupted cleanly (they retry on EINTR, or fail with it). From the first step on,
// a stop signal asks the trainer to stop after the current step, and every rank votes on
// stopping each step so that all stop after the same one. Torch-free.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace ddprun::train {

// Installs the SIGTERM/SIGUSR2 handlers in set-up mode: a stop signal writes one line on
// stderr and ends the process with 128 + signal.
void install_stop_handlers();

// Training mode, for good: a stop signal is only recorded, for the per-step vote. The first
// signal wins; repeats are ignored.
void defer_stop_signals();

// Set-up mode only: the shared-memory segment (shm_open name) to remove when a stop signal
// ends the process before every rank has attached to it ("": none).
void remove_on_early_stop(const std::string& shm_name);

// The stop signal this process received (0: none).
int stop_signal_received();

// The stop signal received, waiting up to `patience` for one to come (0: none came).
int await_stop_signal(std::chrono::milliseconds patience);

// The vote as values summed across ranks: one flag per stop signal, largest signal wins.
std::vector<double> stop_flags(int signo);
int stop_from_flags(const std::vector<double>& sums);

}  // namespace ddprun::train
