// RefuseNthThread: while it lives, the n-th thread (1-based) that a ThreadGroup asks for is
// refused the way std::thread refuses one when the system has none left; the others are made.
// One at a time (the factory is process-wide).
#pragma once

#include <atomic>
#include <functional>
#include <system_error>
#include <thread>

#include "rail/detail/thread_group.hpp"

namespace rail::test {

class RefuseNthThread {
 public:
  explicit RefuseNthThread(int n) {
    calls().store(0);
    refused().store(n);
    previous_ = detail::set_thread_factory(&make);
  }
  ~RefuseNthThread() { (void)detail::set_thread_factory(previous_); }
  RefuseNthThread(const RefuseNthThread&) = delete;
  RefuseNthThread& operator=(const RefuseNthThread&) = delete;

 private:
  static std::atomic<int>& calls() {
    static std::atomic<int> n{0};
    return n;
  }
  static std::atomic<int>& refused() {
    static std::atomic<int> n{0};
    return n;
  }
  static std::thread make(std::function<void()> body) {
    if (calls().fetch_add(1) + 1 == refused().load())
      throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again),
                              "refused by the test");
    return std::thread(std::move(body));
  }
  detail::ThreadFactory previous_ = nullptr;
};

}  // namespace rail::test
