// core/interrupt.cpp: see interrupt.h. The handler only sets atomics (async-signal-safe); the second signal calls
// _exit.
#include "core/interrupt.h"

#include <unistd.h>

#include <atomic>
#include <csignal>

namespace tb {
namespace {

std::atomic<int> g_signals{0};
std::atomic<int> g_first{0};
std::atomic<bool> g_agreed{false}, g_deferred{false};

extern "C" void on_signal(int sig) {
  if (g_signals.fetch_add(1) >= 1) _exit(130);
  g_first.store(sig);
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

bool interrupted() { return g_deferred.load() ? g_agreed.load() : g_signals.load() > 0 || g_agreed.load(); }
bool interrupt_requested() { return g_signals.load() > 0 || g_agreed.load(); }
int interrupt_signal() { return g_first.load(); }
void request_interrupt() {
  int expected = 0;
  g_first.compare_exchange_strong(expected, SIGINT);
  g_agreed.store(true);
}
void defer_interrupts_to_agreement() { g_deferred.store(true); }
void clear_interrupt() {
  g_signals.store(0);
  g_first.store(0);
  g_agreed.store(false);
  g_deferred.store(false);
}

}  // namespace tb
