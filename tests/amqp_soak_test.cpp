// The distributed soak against a real broker: three consumer processes share one queue, one is
// killed with SIGKILL once a third of the jobs completed and another takes its place; every
// confirmed job ends as its plan says (completed on its planned attempt, or in the broker's
// DLQ with its reason and every error), duplicates only among the jobs the killed worker had
// started, and nothing is left in the broker queue (tools/soak/broker_soak.hpp).
#include <gtest/gtest.h>

#include <sstream>

#include "soak/broker_soak.hpp"
#include "support/broker_test.hpp"

namespace rail {
namespace {

using AmqpSoak = test::BrokerTest;

TEST_F(AmqpSoak, ThreeProcessesWithOneKilledEndEveryConfirmedJobAsPlanned) {
  soak::BrokerSoakOptions o;
  o.url = options().url;
  o.jobs = 600;
  o.workers = 3;
  std::ostringstream progress;
  const soak::BrokerSoakReport r = soak::run_broker_soak(o, &progress);
  std::ostringstream report;
  soak::print(r, report);
  EXPECT_TRUE(r.ok()) << report.str() << progress.str();
  EXPECT_EQ(r.confirmed, 600u);
  EXPECT_EQ(r.completed + r.dead_lettered, r.confirmed) << report.str();
  EXPECT_EQ(r.dead_lettered, 200u) << "the always-failing and the permanent plans";
  EXPECT_GT(r.lapses, 0u) << "no overrun was handed back through the broker";
  EXPECT_GT(r.held_by_killed, 0u) << "the killed worker held nothing: the fault missed";
  std::cout << report.str();
}

}  // namespace
}  // namespace rail
