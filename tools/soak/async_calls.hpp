// AsyncCalls: the soak's simulated downstream calls for async deliveries (Config::async). A
// handler defers (Job::defer: its Completion) or, a coroutine, parks on the call (co_await
// park(...)); completer threads take the calls in order, wait a little (the call's latency),
// and apply the delivery's fate: complete the Completion (an exception: dropped), or resume the
// coroutine, which applies its fate itself. A hang waits until its delivery is fenced.
// Threading: defer/park from handlers, the completers of their own; settle() once the jobs are
// done (it joins them and destroys coroutines still parked: after a mid-run shutdown).
#pragma once

#include <atomic>
#include <coroutine>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "rail/rail.hpp"
#include "soak/fates.hpp"
#include "soak/soak.hpp"

namespace rail::soak {

class AsyncCalls {
  struct Call {
    Completion done;  // Job::defer's, or empty for a parked coroutine
    Fate fate;
    std::coroutine_handle<> coroutine{};
    const AsyncJob<Payload>* job = nullptr;  // the parked coroutine's (in its frame)
    [[nodiscard]] bool cancelled() const { return job ? job->cancelled() : done.cancelled(); }
  };

 public:
  /// AsyncCalls(cfg, inside): `inside` counts the calls in the downstream (invariant 6): a
  /// completer leaves it just before it completes the call (which gives the permit back).
  AsyncCalls(const Config& cfg, std::atomic<std::uint32_t>& inside) : cfg_(cfg), inside_(inside) {}
  AsyncCalls(const AsyncCalls&) = delete;
  AsyncCalls& operator=(const AsyncCalls&) = delete;
  ~AsyncCalls() { settle(); }

  /// start(): two completer threads (none without async deliveries).
  void start();
  /// is_async(p, delivery): this delivery of a job with payload p is async.
  [[nodiscard]] bool is_async(const Payload& p, std::uint32_t delivery) const noexcept {
    return cfg_.async > 0 && unit(p.plan ^ 0xA5A5'5A5A'C3C3'3C3Cull, delivery) < cfg_.async;
  }
  /// defer(c, f): a handler's Completion, to complete with fate f.
  void defer(Completion c, Fate f);

  /// Park: the awaitable a coroutine handler parks on (co_await calls.park(f, &job)).
  struct Park {
    AsyncCalls& calls;
    Fate fate;
    const AsyncJob<Payload>* job;
    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> h) { calls.push({Completion{}, fate, h, job}); }
    void await_resume() const noexcept {}
  };
  [[nodiscard]] Park park(Fate f, const AsyncJob<Payload>* job) {
    deferred_.fetch_add(1, std::memory_order_relaxed);
    return Park{*this, f, job};
  }

  /// settle(): the completers stop; coroutines still parked are destroyed (their AsyncJob's
  /// Completion dropped, as a lost callback's would be).
  void settle();
  /// deferred(): the async deliveries so far.
  [[nodiscard]] std::uint64_t deferred() const noexcept { return deferred_.load(); }

 private:
  void push(Call c);
  void complete(Call& call, std::uint32_t latency_us);

  const Config& cfg_;
  std::atomic<std::uint32_t>& inside_;
  std::mutex mu_;
  std::deque<Call> calls_;
  std::atomic<std::uint64_t> deferred_{0};
  std::atomic<bool> settled_{false};
  std::vector<std::thread> completers_;
};

}  // namespace rail::soak
