// ThreadGroup: threads start all or nothing. Bodies run only once the owner opens the gate;
// abandoned (the owner's setup failed) or refused halfway (the system has no thread to give),
// the threads already created exit without running their body and are joined.
#include "rail/detail/thread_group.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <system_error>
#include <thread>
#include <vector>

#include "support/refuse_thread.hpp"

namespace rail::detail {
namespace {

TEST(ThreadGroup, OpenRunsEveryBodyOnceWithItsIndex) {
  std::atomic<int> ran{0};
  std::vector<std::atomic<int>> by_index(4);
  {
    ThreadGroup group;
    group.spawn(4, [&](std::uint32_t w) {
      by_index[w].fetch_add(1);
      ran.fetch_add(1);
    });
    EXPECT_EQ(group.size(), 4u);
    EXPECT_EQ(ran.load(), 0) << "no body runs before open()";
    group.open();
    group.join();
  }
  EXPECT_EQ(ran.load(), 4);
  for (auto& n : by_index)
    EXPECT_EQ(n.load(), 1);
}

TEST(ThreadGroup, AbandonedThreadsExitWithoutRunningTheirBody) {
  std::atomic<int> ran{0};
  ThreadGroup group;
  group.spawn(3, [&](std::uint32_t) { ran.fetch_add(1); });
  group.abandon();  // returns once all three have exited
  EXPECT_EQ(ran.load(), 0);
  // The group may spawn again.
  group.spawn(2, [&](std::uint32_t) { ran.fetch_add(1); });
  group.open();
  group.join();
  EXPECT_EQ(ran.load(), 2);
}

TEST(ThreadGroup, ARefusedThreadUndoesTheSpawnAndRethrows) {
  std::atomic<int> ran{0};
  ThreadGroup group;
  {
    const test::RefuseNthThread refuse(3);
    EXPECT_THROW(group.spawn(5, [&](std::uint32_t) { ran.fetch_add(1); }), std::system_error);
  }
  EXPECT_EQ(group.size(), 2u) << "two were created before the refused third";
  EXPECT_EQ(ran.load(), 0) << "they exited without running";
  group.spawn(1, [&](std::uint32_t) { ran.fetch_add(1); });
  group.open();
  group.join();
  EXPECT_EQ(ran.load(), 1);
}

}  // namespace
}  // namespace rail::detail
