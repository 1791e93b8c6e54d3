// core/interrupt.h: Ctrl-C (SIGINT) and SIGTERM as a request to stop: long loops poll interrupted() between units
// of work (training steps, sweep points) and finish with what they measured (records with status "interrupted");
// a second signal exits at once (status 130).
#pragma once

namespace tb {

void install_interrupt_handler();  // idempotent
bool interrupted();
void clear_interrupt();  // tests

}  // namespace tb
