// ThreadGroup (thread_group.hpp): starting a group of threads all or none, and joining them.
#include "rail/detail/thread_group.hpp"

#include <system_error>

namespace rail::detail {
namespace {

// acquire/release: a factory installed by a test is fully visible to the spawn() that loads it.
std::atomic<ThreadFactory> g_thread_factory{nullptr};

std::thread make_thread(std::function<void()> body) {
  if (ThreadFactory f = g_thread_factory.load(std::memory_order_acquire)) return f(std::move(body));
  return std::thread(std::move(body));
}

}  // namespace

ThreadFactory set_thread_factory(ThreadFactory f) noexcept {
  return g_thread_factory.exchange(f, std::memory_order_acq_rel);
}

void ThreadGroup::spawn(std::uint32_t n, const std::function<void(std::uint32_t)>& body) {
  created_ = 0;
  try {
    threads_.reserve(n);  // a created thread is never dropped by a failing push_back
    for (std::uint32_t w = 0; w < n; ++w) {
      threads_.push_back(make_thread([this, body, w] {
        gate_.wait(kClosed, std::memory_order_acquire);
        // acquire: pairs with open()'s release (the owner's writes before it are visible).
        if (gate_.load(std::memory_order_acquire) == kOpen) body(w);
      }));
      created_ = threads_.size();
    }
  } catch (...) {
    abandon();
    throw;
  }
}

void ThreadGroup::abandon() noexcept {
  gate_.store(kAbandoned, std::memory_order_release);
  gate_.notify_all();
  for (auto& t : threads_)
    t.join();
  threads_.clear();
  gate_.store(kClosed, std::memory_order_relaxed);  // no thread is left to read it
}

void ThreadGroup::open() noexcept {
  gate_.store(kOpen, std::memory_order_release);
  gate_.notify_all();
}

void ThreadGroup::join() noexcept {
  for (auto& t : threads_)
    if (t.joinable() && t.get_id() != std::this_thread::get_id()) t.join();
}

}  // namespace rail::detail
