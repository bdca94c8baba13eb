// EventBus: see include/rail/detail/event_bus.hpp (delivery, the deferred batch, the epochs).
#include "rail/detail/event_bus.hpp"

#include <cstdio>
#include <exception>
#include <string_view>

#include "rail/detail/deadline.hpp"
#include "rail/detail/poll_until.hpp"

namespace rail::detail {

void EventBus::deliver(const Event& e) const noexcept {
  observers_.for_each([&](const Observer& observer) noexcept {
    // An observer must not throw (event.hpp). Letting it through would break a job's state
    // transition halfway, so the throw is caught, counted and reported once per engine.
    try {
      observer(e);
    } catch (const std::exception& ex) {
      observer_threw(e, ex.what());
    } catch (...) {
      observer_threw(e, "an exception not derived from std::exception");
    }
  });
}

void EventBus::defer(const Event& e) const {
  Deferred& d = pending_.emplace_back();
  d.event = e;
  d.error.assign(e.error);
  d.job_name.assign(e.job_name);
}

void EventBus::deliver_batch(std::unique_lock<std::mutex>& lock) {
  std::vector<Deferred> nested;
  const bool outer = !thread_buffer().in_use;
  std::vector<Deferred>& batch = outer ? thread_buffer().batch : nested;
  batch.swap(pending_);
  // Counted in the current epoch before the lock goes: an await_deliveries() that flips the
  // epoch after us waits for this batch. relaxed: the unlock publishes it to that call's lock.
  std::atomic<std::uint32_t>& count = delivering_[epoch_];
  count.fetch_add(1, std::memory_order_relaxed);
  lock.unlock();
  struct Delivered {
    std::vector<Deferred>& batch;
    std::atomic<std::uint32_t>& count;
    bool outer;
    ~Delivered() {
      batch.clear();
      thread_buffer().in_use = !outer;
      // release: an await_deliveries() that reads the count lower sees what the observers did.
      count.fetch_sub(1, std::memory_order_release);
    }
  } delivered{batch, count, outer};
  thread_buffer().in_use = true;
  for (Deferred& d : batch) {
    if (d.call) {
      // As an observer's: a callback that throws (a DLQ alert's) must not cost the calls
      // behind it in the batch (a line's turn handed on: JobEnds::hand_turns).
      try {
        d.call();
      } catch (const std::exception& ex) {
        callback_threw(ex.what());
      } catch (...) {
        callback_threw("an exception not derived from std::exception");
      }
      continue;
    }
    d.event.error = d.error;
    d.event.job_name = d.job_name;
    deliver(d.event);
  }
}

bool EventBus::await_deliveries(std::chrono::steady_clock::time_point deadline) {
  // A plain mutex, polled until the deadline: std::timed_mutex's try_lock_until is
  // pthread_mutex_clocklock, which ThreadSanitizer does not intercept (it then reports the
  // unlock as one of an unlocked mutex).
  std::unique_lock turn(await_mu_, std::defer_lock);
  if (!poll_until(deadline, [&] { return turn.try_lock(); })) return false;
  for (int phase = 0; phase < 2; ++phase) {
    std::uint32_t old;
    {
      const std::lock_guard lock(owner_mu_);  // batches counted before this are in `old`
      old = epoch_;
      epoch_ ^= 1;
    }
    // acquire: pairs with deliver_batch's release decrement.
    if (!poll_until(deadline,
                    [&] { return delivering_[old].load(std::memory_order_acquire) == 0; }))
      return false;
  }
  return true;
}

void EventBus::observer_threw(const Event& e, const char* what) const noexcept {
  // relaxed: a tally; the first caller alone sees 0, so the line is printed once.
  if (errors_.fetch_add(1, std::memory_order_relaxed) != 0) return;
  const std::string_view kind = to_string(e.kind);
  std::fprintf(stderr,
               "rail: an observer threw on event %.*s of job %llu (queue '%.*s'): %s; rail "
               "ignores what observers throw and counts it in Engine::observer_errors() "
               "(reported once per engine)\n",
               static_cast<int>(kind.size()), kind.data(),
               static_cast<unsigned long long>(e.job_id), static_cast<int>(e.queue.size()),
               e.queue.data(), what);
}

void EventBus::callback_threw(const char* what) const noexcept {
  if (errors_.fetch_add(1, std::memory_order_relaxed) != 0) return;  // as observer_threw
  std::fprintf(stderr,
               "rail: a callback run once timers were fired (a DLQ alert) threw: %s; rail ignores "
               "it and counts it in Engine::observer_errors() (reported once per engine)\n",
               what);
}

}  // namespace rail::detail
