// ReleaseOnExit: sets a release flag when destroyed. Declared after the engine, it is destroyed
// before it whatever assertion returns early, so a handler held on the flag ends and the
// engine's destructor (which waits for handlers) does not hang. Declare the flag before the
// engine: the handler still reads it until the engine has joined its workers.
#pragma once

#include <atomic>

namespace rail::test {

struct ReleaseOnExit {
  std::atomic<bool>& flag;
  ~ReleaseOnExit() { flag.store(true); }
};

}  // namespace rail::test
