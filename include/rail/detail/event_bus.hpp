// EventBus: an engine's observers, and the hand-off that keeps them from running under the lock
// of a thread that raises events while it holds one (the timing wheel's owner).
//
// Guarantees: an event raised with deliver() reaches every observer listed when the walk starts,
// in the order they were added, on the calling thread. An event raised with defer() under the
// owner lock reaches them only after release_and_deliver() let that lock go, in the order they
// were raised, with the views it carries (error text, job name) copied, since their storage (a
// slot) may be reused once the lock goes. A callback queued with defer_call() runs at the same
// point, in the same order. No observer runs with the owner lock held. What an observer throws
// is caught and counted (errors()); the first throw of a bus is reported on stderr.
//
// Delivery epochs: batches taken from under the lock and not yet delivered are counted by the
// epoch they were taken in. await_deliveries() flips the epoch under the owner lock and waits
// for the old one to reach zero, twice, as RCU's grace periods do: it waits for every batch
// taken before the call (a batch left behind by a waiter that timed out included) and for none
// begun after it, which could otherwise keep a count above zero for ever.
//
// Threads: add / remove / deliver from any thread (ObserverList's contract); defer and
// defer_call only under the owner lock, whose holder owns the pending buffer; nested delivery
// (an observer that itself takes the owner lock and raises events) gets a fresh buffer, so the
// one being walked is never touched.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "rail/detail/observer_list.hpp"
#include "rail/event.hpp"

namespace rail::detail {

class EventBus {
 public:
  /// EventBus(owner_mu): events deferred while `owner_mu` is held wait for its release.
  explicit EventBus(std::mutex& owner_mu) noexcept : owner_mu_(owner_mu) {}
  EventBus(const EventBus&) = delete;
  EventBus& operator=(const EventBus&) = delete;

  /// add(fn): lists fn after the others (Engine::on_event). Cold; never waits.
  ObserverId add(Observer fn) { return ObserverId{observers_.add(std::move(fn))}; }
  /// remove(id): Engine::remove_observer (see there for when it waits).
  bool remove(ObserverId id) noexcept {
    return id != ObserverId::none && observers_.remove(static_cast<std::uint64_t>(id));
  }
  [[nodiscard]] std::size_t size() const { return observers_.size(); }
  /// any(): a hint that someone listens; deliver() re-loads the list in order.
  [[nodiscard]] bool any() const noexcept { return observers_.any(); }
  /// errors(): how many observer calls threw (Engine::observer_errors).
  [[nodiscard]] std::uint64_t errors() const noexcept {
    return errors_.load(std::memory_order_relaxed);
  }

  /// deliver(e): every observer, now, on this thread.
  void deliver(const Event& e) const noexcept;

  /// defer(e) / defer_call(f): the owner lock is held; e (copied) or f waits for
  /// release_and_deliver().
  void defer(const Event& e) const;
  void defer_call(std::function<void()> f) const { pending_.emplace_back().call = std::move(f); }

  /// release_and_deliver(lock): `lock` holds the owner mutex; what was deferred under it is
  /// taken, the lock released, and the batch delivered on this thread. With nothing deferred
  /// the lock stays held (its owner releases it). However the delivery leaves (a callback that
  /// throws), the batch is cleared and counted out of its epoch.
  void release_and_deliver(std::unique_lock<std::mutex>& lock) {
    if (pending_.empty()) return;
    deliver_batch(lock);
  }

  /// await_deliveries(deadline): waits until the batches taken before the call have reached
  /// the observers; false if `deadline` passed first. Cold: polls; callers take turns.
  [[nodiscard]] bool await_deliveries(std::chrono::steady_clock::time_point deadline);

  /// delivering(): this thread is walking a deferred batch (an observer or callback runs).
  [[nodiscard]] static bool delivering() noexcept { return thread_buffer().in_use; }

  /// prepare_thread(): builds this thread's delivery buffer and claims its thread index (the
  /// observers' reader cell). The buffer is a thread_local with a destructor, and glibc
  /// allocates to register that destructor on a thread's first use of it; the index's first
  /// claim takes a process-wide mutex. A worker calls this first, keeping both out of its
  /// steady state.
  static void prepare_thread() noexcept {
    (void)thread_buffer();
    (void)this_thread_index();
  }

 private:
  /// Deferred: an event with copies of the views that may not outlive the lock, or a callback.
  struct Deferred {
    Event event;
    std::string error;
    std::string job_name;
    std::function<void()> call;  // set: a callback to run instead of an event
  };
  struct ThreadBuffer {
    std::vector<Deferred> batch;  // keeps its capacity: steady firing does not allocate
    bool in_use = false;
  };
  static ThreadBuffer& thread_buffer() noexcept {
    thread_local ThreadBuffer buffer;
    return buffer;
  }

  void deliver_batch(std::unique_lock<std::mutex>& lock);
  void observer_threw(const Event& e, const char* what) const noexcept;
  void callback_threw(const char* what) const noexcept;

  std::mutex& owner_mu_;
  BasicObserverList<Observer> observers_;
  mutable std::atomic<std::uint64_t> errors_{0};  // deliver() is const
  mutable std::vector<Deferred> pending_;         // guarded by owner_mu_
  // Batches taken from under the owner lock and not yet delivered, by the epoch they were taken
  // in; epoch_ is guarded by owner_mu_ and flipped by await_deliveries.
  std::atomic<std::uint32_t> delivering_[2]{};
  std::uint32_t epoch_ = 0;
  std::mutex await_mu_;  // await_deliveries' callers take turns
};

}  // namespace rail::detail
