// The metrics' expositions: rail/metrics_json.hpp (parsed back with nlohmann-json) and, where
// prometheus-cpp is installed, rail::prometheus (its families serialized by prometheus-cpp's own
// text serializer, the exposition format a Prometheus server scrapes).
#include <gtest/gtest.h>

#include <chrono>
#include <sstream>
#include <string>

#include "rail/metrics_json.hpp"
#include "rail/rail.hpp"
#include "support/inline_engine.hpp"
#ifdef RAIL_TEST_PROMETHEUS
#include <prometheus/text_serializer.h>

#include "rail/prometheus.hpp"
#endif

namespace rail {
namespace {

using namespace std::chrono_literals;

/// Exposition: an engine whose "payments" queue completed three jobs (each 2 ms after a 1 ms
/// wait) and dead-lettered one, and whose "quiet" queue records no histograms.
struct Exposition : test::InlineEngine {
  void SetUp() override {
    test::InlineEngine::SetUp();
    auto payments = engine.declare_queue<int>("payments", QueueOptions{});
    QueueOptions off;
    off.histograms = false;
    auto quiet = engine.declare_queue<int>("quiet", off);
    payments.process({}, [this](Job<int>& j) {
      clock.advance(2ms);
      return j.data() == 4 ? Outcome::fail("card declined") : Outcome::done();
    });
    for (int i = 1; i <= 4; ++i)
      (void)payments.add("charge", i);
    unprocessed = quiet.add("noop", 0).id;
    clock.advance(1ms);
    engine.run_until_idle();
  }
  void TearDown() override { (void)engine.cancel(unprocessed); }
  JobId unprocessed = 0;
};

TEST_F(Exposition, JsonHasEveryValueAndHistogramUnderItsPrometheusNameWithoutPrefix) {
  const nlohmann::json j = nlohmann::json::parse(to_json(engine.metrics()).dump());
  ASSERT_EQ(j["queues"].size(), 2u);
  const auto& p = j["queues"][0];
  EXPECT_EQ(p["queue"], "payments");
  EXPECT_EQ(p["values"]["jobs_completed"], 3);
  EXPECT_EQ(p["values"]["jobs_dead_lettered"], 1);
  EXPECT_EQ(p["values"]["dlq_depth"], 1);
  EXPECT_EQ(p["values"]["jobs_waiting"], 0);
  EXPECT_EQ(p["values"]["lag_seconds"], 0.0);
  const auto& run = p["histograms"]["job_run_seconds"];
  EXPECT_EQ(run["count"], 4);
  EXPECT_NEAR(run["sum"].get<double>(), 0.008, 1e-12);
  EXPECT_NEAR(run["p50"].get<double>(), 0.002, 0.002 / 16);
  ASSERT_EQ(run["buckets"].size(), kExpositionBounds.size());
  EXPECT_EQ(run["buckets"][9][0], 1e-3);
  EXPECT_EQ(run["buckets"][9][1], 0) << "no run under 1 ms";
  EXPECT_EQ(run["buckets"][10][1], 4) << "every run under 2.5 ms";
  const auto& quiet = j["queues"][1];
  EXPECT_EQ(quiet["values"]["jobs_waiting"], 1) << "nobody processes it";
  EXPECT_FALSE(quiet.contains("histograms"));
}

#ifdef RAIL_TEST_PROMETHEUS
TEST_F(Exposition, PrometheusTextHasLabelledCountersGaugesAndCumulativeHistograms) {
  const auto collector = prometheus::collector(engine);
  std::ostringstream text;
  ::prometheus::TextSerializer().Serialize(text, collector->Collect());
  const std::string t = text.str();
  const auto has = [&](const std::string& line) {
    EXPECT_NE(t.find(line), std::string::npos) << "missing: " << line << "\nin:\n" << t;
  };
  has("# TYPE rail_jobs_completed_total counter");
  has("rail_jobs_completed_total{queue=\"payments\"} 3");
  has("rail_jobs_completed_total{queue=\"quiet\"} 0");
  has("# TYPE rail_dlq_depth gauge");
  has("rail_dlq_depth{queue=\"payments\"} 1");
  has("rail_jobs_waiting{queue=\"quiet\"} 1");
  has("# TYPE rail_job_run_seconds histogram");
  has("rail_job_run_seconds_count{queue=\"payments\"} 4");
  has("rail_job_run_seconds_bucket{queue=\"payments\",le=\"0.001\"} 0");
  has("rail_job_run_seconds_bucket{queue=\"payments\",le=\"0.0025\"} 4");
  has("rail_job_run_seconds_bucket{queue=\"payments\",le=\"+Inf\"} 4");
  EXPECT_EQ(t.find("rail_job_run_seconds_count{queue=\"quiet\"}"), std::string::npos)
      << "a queue without histograms publishes none";
}
#endif

}  // namespace
}  // namespace rail
