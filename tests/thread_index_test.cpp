// this_thread_index() (detail/thread_index.hpp): live threads hold distinct indices, stable for
// their life; an exited thread's index goes back and the lowest free one is handed out next; a
// thread_local destructor still holds its thread's index, and a pthread key's destructor that
// runs after the index was freed gets none.
#include "rail/detail/thread_index.hpp"

#include <gtest/gtest.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <latch>
#include <set>
#include <thread>
#include <vector>

namespace rail {
namespace {

using detail::kNoThreadIndex;
using detail::live_thread_indices;
using detail::this_thread_index;

TEST(ThreadIndex, LiveThreadsHoldDistinctIndicesThatNeverChange) {
  constexpr int kThreads = 24;
  std::latch all_hold(kThreads);
  std::latch checked(1);
  std::vector<std::uint32_t> first(kThreads), again(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      first[t] = this_thread_index();
      all_hold.count_down();
      checked.wait();  // every thread alive while the others ask
      again[t] = this_thread_index();
    });
  all_hold.wait();
  EXPECT_GE(live_thread_indices(), static_cast<std::uint32_t>(kThreads));
  checked.count_down();
  for (auto& t : threads)
    t.join();
  const std::set<std::uint32_t> distinct(first.begin(), first.end());
  EXPECT_EQ(distinct.size(), static_cast<std::size_t>(kThreads));
  EXPECT_EQ(first, again);
  for (std::uint32_t i : first)
    EXPECT_LT(i, detail::kMaxThreadIndices);
}

TEST(ThreadIndex, AnExitedThreadsIndexIsFreedAndTheLowestFreeOneGoesNext) {
  (void)this_thread_index();  // the main thread holds its own for the whole test
  const std::uint32_t before = live_thread_indices();
  std::uint32_t gone = kNoThreadIndex;
  std::thread([&] { gone = this_thread_index(); }).join();
  ASSERT_NE(gone, kNoThreadIndex);
  EXPECT_EQ(live_thread_indices(), before);
  // Two threads alive at once: the first to ask takes the index the exited thread freed (the
  // lowest free one: nothing else was freed meanwhile), the second another one.
  std::latch first_asked(1), second_asked(1);
  std::uint32_t a = kNoThreadIndex, b = kNoThreadIndex;
  std::thread ta([&] {
    a = this_thread_index();
    first_asked.count_down();
    second_asked.wait();
  });
  first_asked.wait();
  std::thread tb([&] {
    b = this_thread_index();
    second_asked.count_down();
  });
  tb.join();
  ta.join();
  EXPECT_EQ(a, gone);
  EXPECT_NE(b, a);
  EXPECT_EQ(live_thread_indices(), before);
}

/// AskAtExit: a thread_local that asks from its destructor. C++ thread_local destructors run
/// before the pthread keys' destructors (glibc), so the thread still holds its index then.
struct AskAtExit {
  std::atomic<std::uint32_t>* seen = nullptr;
  ~AskAtExit() {
    if (seen) seen->store(this_thread_index());
  }
};

TEST(ThreadIndex, AThreadLocalDestructorStillHoldsTheThreadsIndex) {
  const std::uint32_t before = live_thread_indices();
  std::atomic<std::uint32_t> seen{0};
  std::uint32_t held = kNoThreadIndex;
  std::thread([&] {
    thread_local AskAtExit ask;
    ask.seen = &seen;
    held = this_thread_index();
  }).join();
  EXPECT_NE(held, kNoThreadIndex);
  EXPECT_EQ(seen.load(), held);
  EXPECT_EQ(live_thread_indices(), before);
}

/// A key created after the allocator's (which exists once any thread asked) has its destructor
/// run after the allocator's frees the index (glibc runs keys' destructors in key order): asking
/// from it gets no index, and claims none anew.
std::atomic<std::uint32_t> g_seen_after_release{0};
void ask_after_release(void*) {
  g_seen_after_release.store(this_thread_index());
}

TEST(ThreadIndex, AKeyDestructorAfterTheIndexWasFreedGetsNoIndex) {
  (void)this_thread_index();  // the allocator and its key exist from here on
  pthread_key_t later;
  ASSERT_EQ(pthread_key_create(&later, &ask_after_release), 0);
  const std::uint32_t before = live_thread_indices();
  std::uint32_t held = kNoThreadIndex;
  std::thread([&] {
    held = this_thread_index();
    ASSERT_EQ(pthread_setspecific(later, &held), 0);
  }).join();
  EXPECT_NE(held, kNoThreadIndex);
  EXPECT_EQ(g_seen_after_release.load(), kNoThreadIndex);
  EXPECT_EQ(live_thread_indices(), before);
  pthread_key_delete(later);
}

}  // namespace
}  // namespace rail
