// Preemption: SIGTERM/SIGUSR2 ask the trainer to stop after the current step, and every rank
// votes on stopping each step so that all stop after the same one. Torch-free.
#pragma once

#include <vector>

namespace ddprun::train {

// Installs the SIGTERM/SIGUSR2 handlers. The first signal wins; repeats are ignored.
void install_stop_handlers();

// The stop signal this process received (0: none).
int stop_signal_received();

// The vote as values summed across ranks: one flag per stop signal, largest signal wins.
std::vector<double> stop_flags(int signo);
int stop_from_flags(const std::vector<double>& sums);

}  // namespace ddprun::train
