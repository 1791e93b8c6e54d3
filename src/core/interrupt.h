// core/interrupt.h: Ctrl-C (SIGINT) and SIGTERM as a request to stop: long loops poll interrupted() between units
// of work (training steps, sweep points) and finish with what they measured (records with status "interrupted");
// a second signal exits at once (status 130).
#pragma once

namespace tb {

void install_interrupt_handler();  // idempotent
bool interrupted();
int interrupt_signal();    // the first signal received (SIGINT, SIGTERM), 0 when none: what a parent forwards
void request_interrupt();  // as if a signal had come (and, deferred, as agreed)
// The ranks of a job that must stop after the same step: from now on a signal is only a request
// (interrupt_requested()), and interrupted() turns true when request_interrupt() is called, after the ranks agreed.
void defer_interrupts_to_agreement();
bool interrupt_requested();  // a signal came (or request_interrupt())
void clear_interrupt();      // tests

}  // namespace tb
