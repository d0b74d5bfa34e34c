// async.cpp: cp.async, deferred: a copy is read at issue and lands at the wait that retires it.
#include "launcher.hpp"

namespace launcher {

void async_block_begin(Worker*) {}
void async_thread_done(Worker*, Fiber*) {}
void async_access(Worker*, uintptr_t, unsigned, bool, uintptr_t) {}

}  // namespace launcher
