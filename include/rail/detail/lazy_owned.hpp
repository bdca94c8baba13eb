// LazyOwned<T>: an object built on its first use and owned until destruction, so that a queue
// pays for a rarely used part (its dedup window, progress cells, schedule table) only once a job
// uses it.
//
// Contract: get() is wait-free and returns null until the object is built, then the same pointer
// for ever; get_or_make(make) returns it, building it with make() exactly once however many
// threads race (make may throw: nothing is published then, and a later call tries again).
// Algorithm: double-checked initialisation. A published pointer is never replaced or freed while
// the LazyOwned lives, so a reader may keep it.
// Memory ordering: the publishing store is release and every load acquire, so a reader that sees
// the pointer sees the object fully built. Builders take turns on a mutex (cold: once per owner).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>

namespace rail::detail {

template <class T>
class LazyOwned {
 public:
  LazyOwned() = default;
  LazyOwned(const LazyOwned&) = delete;
  LazyOwned& operator=(const LazyOwned&) = delete;

  /// get(): the object, or null before it was built.
  [[nodiscard]] T* get() const noexcept {
    return ptr_.load(std::memory_order_acquire);  // pairs with get_or_make's release
  }

  /// get_or_make(make): the object, built by make() (a std::unique_ptr<T>) if it was not yet.
  template <class Make>
  T& get_or_make(Make&& make) {
    if (T* p = get()) [[likely]]
      return *p;
    const std::lock_guard lock(mu_);
    if (!owner_) {
      owner_ = make();
      ptr_.store(owner_.get(), std::memory_order_release);  // the object is built
    }
    return *owner_;
  }

 private:
  std::atomic<T*> ptr_{nullptr};
  std::unique_ptr<T> owner_;
  std::mutex mu_;
};

}  // namespace rail::detail
