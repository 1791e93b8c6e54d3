// core/interrupt.cpp: see interrupt.h. The handler only sets an atomic flag (async-signal-safe); the second
// signal calls _exit.
#include "core/interrupt.h"

#include <unistd.h>

#include <atomic>
#include <csignal>

namespace tb {
namespace {

std::atomic<int> g_signals{0};

extern "C" void on_signal(int) {
  if (g_signals.fetch_add(1) >= 1) _exit(130);
  static const char msg[] = "\ntrainbench: stopping after the current step (again to quit at once)\n";
  [[maybe_unused]] const auto n = write(2, msg, sizeof msg - 1);
}

}  // namespace

void install_interrupt_handler() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

bool interrupted() { return g_signals.load() > 0; }
void clear_interrupt() { g_signals.store(0); }

}  // namespace tb
