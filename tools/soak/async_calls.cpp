// AsyncCalls: the soak's simulated downstream calls. Contract: async_calls.hpp.
#include "soak/async_calls.hpp"

#include <chrono>
#include <optional>
#include <random>
#include <utility>

namespace rail::soak {

using namespace std::chrono_literals;

void AsyncCalls::start() {
  for (unsigned t = 0; cfg_.async > 0 && t < 2; ++t)
    completers_.emplace_back([this, t] {
      std::mt19937 rng(static_cast<unsigned>(cfg_.seed) * 31u + t);
      while (!settled_.load()) {
        std::optional<Call> call;
        {
          const std::lock_guard lock(mu_);
          if (!calls_.empty()) {
            call.emplace(std::move(calls_.front()));
            calls_.pop_front();
          }
        }
        if (!call) {
          std::this_thread::sleep_for(50us);
          continue;
        }
        // The call's latency: up to 200 us, less under the manual clock (whose driver moves
        // 1 ms per 20 us), so that few lapse but for the hangs.
        complete(*call, static_cast<std::uint32_t>(rng() % (cfg_.manual_clock ? 20 : 200)));
      }
    });
}

void AsyncCalls::complete(Call& call, std::uint32_t latency_us) {
  std::this_thread::sleep_for(std::chrono::microseconds(latency_us));
  if (call.fate == Fate::hang)
    while (!call.cancelled() && !settled_.load())
      std::this_thread::sleep_for(cfg_.manual_clock ? 10us : 1ms);
  inside_.fetch_sub(1);
  if (call.coroutine) {
    call.coroutine.resume();  // it applies its fate; its frame may be gone after this
  } else if (call.fate == Fate::throw_) {
    call.done = Completion{};  // dropped: a failed attempt
  } else {
    call.done.complete(async_outcome(call.fate));
  }
}

void AsyncCalls::defer(Completion c, Fate f) {
  deferred_.fetch_add(1, std::memory_order_relaxed);
  push({std::move(c), f});
}

void AsyncCalls::push(Call c) {
  const std::lock_guard lock(mu_);
  calls_.push_back(std::move(c));
}

void AsyncCalls::settle() {
  settled_.store(true);
  for (auto& t : completers_)
    t.join();
  completers_.clear();
  for (Call& c : calls_)
    if (c.coroutine) c.coroutine.destroy();
  calls_.clear();
}

}  // namespace rail::soak
