// ThreadGroup: worker threads created all or nothing. A queue's dedicated pool (Dispatcher) and
// the engine's shared pool (WorkerPool) start theirs through it.
//
// Why all or nothing: when the system refuses the k-th thread, the k - 1 already created must not
// have run a job, or a failed process() would leave half a pool behind. So new threads wait at a
// gate: spawn() creates every thread, the owner then finishes what the threads will read
// (contexts, counters) and open()s the gate; if a creation fails, spawn() abandons the gate, the
// threads created so far exit without running their body, and they are joined before it throws.
// Memory ordering: open()'s release store and the threads' acquire load of the gate carry
// everything the owner wrote before open() to every thread.
// Threading: spawn/open/join by the owner (cold); join() never waits for the calling thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace rail::detail {

/// ThreadFactory: how a ThreadGroup creates a thread running `body`. A test seam: production
/// uses std::thread's constructor, and a test substitutes a factory that throws the
/// std::system_error that constructor throws when the system has no thread to give (RLIMIT_NPROC
/// cannot produce that failure deterministically: it does not bind root).
using ThreadFactory = std::thread (*)(std::function<void()> body);

/// set_thread_factory(f): thread groups create their threads with f from now on (null:
/// std::thread); returns the previous factory. Process-wide, for tests.
ThreadFactory set_thread_factory(ThreadFactory f) noexcept;

class ThreadGroup {
 public:
  ThreadGroup() = default;
  ThreadGroup(const ThreadGroup&) = delete;
  ThreadGroup& operator=(const ThreadGroup&) = delete;
  ~ThreadGroup() { join(); }

  /// spawn(n, body): creates n threads; thread w runs body(w) once open() is called. If a thread
  /// cannot be created, the ones created exit without running body, are joined, and the
  /// std::system_error is rethrown (size() then tells how many had been created): the group is
  /// empty again and spawn() may be called again.
  void spawn(std::uint32_t n, const std::function<void(std::uint32_t)>& body);
  /// open(): the threads run their bodies. After the owner wrote what they read (release).
  void open() noexcept;
  /// abandon(): instead of open(), when the owner's setup failed after spawn(): the threads exit
  /// without running their bodies and are joined; the group is empty again.
  void abandon() noexcept;
  /// join(): waits for every thread but the calling one.
  void join() noexcept;
  /// size(): threads created by the last spawn() (on failure: before the refused one).
  [[nodiscard]] std::size_t size() const noexcept { return created_; }

 private:
  static constexpr std::uint32_t kClosed = 0, kOpen = 1, kAbandoned = 2;
  std::vector<std::thread> threads_;
  std::size_t created_ = 0;
  std::atomic<std::uint32_t> gate_{kClosed};
};

}  // namespace rail::detail
