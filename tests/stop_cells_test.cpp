// StopCells (detail/stop_cells.hpp), the stop tokens of a queue's running deliveries, driven
// directly: which delivery a request stops, what a zombie asking late gets, when a source is
// reused; then two threads racing a token against a take (the fence hand-off) many times.
#include "rail/detail/stop_cells.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <stop_token>
#include <thread>

#include "support/sanitized.hpp"
#include "support/start_line.hpp"

namespace rail::detail {
namespace {

auto live() {
  return [] { return false; };
}
auto fenced() {
  return [] { return true; };
}

TEST(StopCells, ATakenSourceStopsItsDeliveryAndTheNextDeliveryGetsAFreshOne) {
  StopCells cells(4);
  const std::stop_token first = cells.token(0, 5, live());
  std::stop_source taken = cells.take(0, 5);
  ASSERT_TRUE(taken.stop_possible());
  const std::stop_token second = cells.token(0, 7, live());  // the redelivery asks
  taken.request_stop();
  EXPECT_TRUE(first.stop_requested());
  EXPECT_FALSE(second.stop_requested()) << "the next delivery does not inherit a taken source";
}

TEST(StopCells, AZombieAskingLateGetsAStoppedTokenAndLeavesTheCellToTheLiveDelivery) {
  StopCells cells(4);
  const std::stop_token live_token = cells.token(1, 7, live());  // delivery 7 runs
  const std::stop_token late = cells.token(1, 5, fenced());      // delivery 5's zombie asks
  EXPECT_TRUE(late.stop_requested());
  EXPECT_FALSE(live_token.stop_requested()) << "the zombie must not stop the live delivery";
  std::stop_source taken = cells.take(1, 7);  // delivery 7 times out: still named
  ASSERT_TRUE(taken.stop_possible());
  taken.request_stop();
  EXPECT_TRUE(live_token.stop_requested());
}

TEST(StopCells, ATakeOfADeliveryThatTookNoTokenFindsNothing) {
  StopCells cells(4);
  EXPECT_FALSE(cells.take(2, 5).stop_possible()) << "no cells yet";
  (void)cells.token(3, 9, live());
  EXPECT_FALSE(cells.take(2, 5).stop_possible()) << "another slot's cell";
  const std::stop_token asked_after = cells.token(2, 5, fenced());
  EXPECT_TRUE(asked_after.stop_requested()) << "it sees the fence instead";
}

TEST(StopCells, ASourceNoRequestTookServesTheNextDelivery) {
  StopCells cells(4);
  const std::stop_token first = cells.token(0, 5, live());
  const std::stop_token again = cells.token(0, 5, live());
  const std::stop_token next = cells.token(0, 7, live());  // delivery 5 ended unstopped
  EXPECT_TRUE(first == again);
  EXPECT_TRUE(first == next) << "no allocation per delivery while nothing is stopped";
  EXPECT_FALSE(cells.take(0, 5).stop_possible()) << "the cell names delivery 7 now";
}

TEST(StopCellsThreaded, ATokenRacingItsFenceAndTakeIsAlwaysStopped) {
  // One thread asks for delivery r's token while another fences r (the ctl change: here a flag)
  // and takes its source: whichever comes first, the token handed out ends up stopped.
#ifdef RAIL_SANITIZED
  constexpr int kRounds = 2'000;
#else
  constexpr int kRounds = 20'000;
#endif
  StopCells cells(1);
  int unstopped = 0;
  for (int r = 1; r <= kRounds; ++r) {
    std::atomic<bool> fence{false};
    test::StartLine start;
    std::stop_token token;
    std::thread asker([&] {
      start.arrive();
      token = cells.token(0, static_cast<std::uint32_t>(r),
                          [&] { return fence.load(std::memory_order_acquire); });
    });
    start.arrive();
    fence.store(true, std::memory_order_release);  // the lapse's CAS
    std::stop_source taken = cells.take(0, static_cast<std::uint32_t>(r));
    taken.request_stop();
    asker.join();
    if (!token.stop_requested()) ++unstopped;
  }
  EXPECT_EQ(unstopped, 0) << "of " << kRounds << " rounds";
}

}  // namespace
}  // namespace rail::detail
