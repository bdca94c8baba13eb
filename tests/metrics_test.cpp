// Metrics (Queue::metrics, Engine::metrics, LatencyHistogram): the histogram's buckets and
// percentiles against exact quantiles of raw samples; each histogram's times under the manual
// clock; the lag gauge; the new counters (retried, redriven, rejected); histograms switched off;
// and, with threads, every counter and histogram count against the events observed.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "rail/rail.hpp"
#include "support/eventually.hpp"
#include "support/inline_engine.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;
using Metrics = test::InlineEngine;
using H = LatencyHistogram;

TEST(LatencyHistogramBuckets, TileEveryValueWithBucketsAtMostASixteenthWide) {
  EXPECT_EQ(H::bucket_floor(0), 0u);
  for (std::size_t i = 0; i + 1 < H::kBuckets; ++i) {
    ASSERT_EQ(H::bucket_ceiling(i) + 1, H::bucket_floor(i + 1)) << "bucket " << i;
    ASSERT_EQ(H::bucket_of(H::bucket_floor(i)), i);
    ASSERT_EQ(H::bucket_of(H::bucket_ceiling(i)), i);
    const std::uint64_t width = H::bucket_ceiling(i) - H::bucket_floor(i) + 1;
    ASSERT_LE(width * 16, std::max<std::uint64_t>(H::bucket_floor(i), 16)) << "bucket " << i;
  }
  EXPECT_EQ(H::bucket_of(std::uint64_t{1} << 40), H::kBuckets - 1);
  EXPECT_EQ(H::bucket_ceiling(H::kBuckets - 1), UINT64_MAX);
}

TEST(LatencyHistogramBuckets, PercentilesAreWithinOneBucketOfTheExactOnes) {
  std::mt19937_64 rng(42);
  for (int round = 0; round < 20; ++round) {
    // Log-uniform samples from 1 ns to ~17 s, as latencies spread.
    std::uniform_real_distribution<double> exponent(0.0, 34.0);
    const std::size_t n = 1 + rng() % 5000;
    std::vector<std::int64_t> raw(n);
    H h;
    for (auto& v : raw) {
      v = static_cast<std::int64_t>(std::exp2(exponent(rng)));
      h.record(Duration{v});
    }
    std::sort(raw.begin(), raw.end());
    ASSERT_EQ(h.count(), n);
    EXPECT_EQ(h.max(), Duration{raw.back()});
    for (double q : {0.0, 0.5, 0.9, 0.99, 0.999, 1.0}) {
      const auto rank = std::max<std::size_t>(1, static_cast<std::size_t>(std::ceil(q * n)));
      const std::int64_t exact = raw[rank - 1];
      const std::int64_t got = h.percentile(q).count();
      EXPECT_GE(got, exact) << "q " << q << ", n " << n;
      EXPECT_EQ(H::bucket_of(static_cast<std::uint64_t>(got)),
                H::bucket_of(static_cast<std::uint64_t>(exact)))
          << "q " << q << ": " << got << " ns reported, " << exact << " ns exact";
    }
  }
}

TEST(LatencyHistogramBuckets, MergingEqualsRecordingEverySampleInOne) {
  H a, b, all;
  for (int i = 1; i < 1000; ++i) {
    (i % 3 == 0 ? a : b).record(Duration{i * 37});
    all.record(Duration{i * 37});
  }
  a.merge(b);
  EXPECT_EQ(a.count(), all.count());
  EXPECT_EQ(a.sum(), all.sum());
  EXPECT_EQ(a.max(), all.max());
  for (std::size_t i = 0; i < H::kBuckets; ++i)
    ASSERT_EQ(a.bucket(i), all.bucket(i));
  for (std::int64_t le : {0, 100, 5000, 18'500, 40'000})
    EXPECT_EQ(a.count_at_most(Duration{le}), all.count_at_most(Duration{le}));
}

TEST(LatencyHistogramBuckets, CountAtMostABucketCeilingIsExact) {
  H h;
  for (int v = 0; v < 5000; ++v)
    h.record(Duration{v});
  for (std::size_t i = 0; i < 200; ++i) {
    const std::uint64_t le = H::bucket_ceiling(i);
    ASSERT_EQ(h.count_at_most(Duration{static_cast<std::int64_t>(le)}),
              std::min<std::uint64_t>(le + 1, 5000));
  }
}

TEST(LatencyHistogramBuckets, APercentileOutsideZeroToOneIsRefusedNamingIt) {
  H h;
  try {
    (void)h.percentile(99.0);
    FAIL() << "percentile(99) was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_option);
    EXPECT_NE(std::string(e.what()).find("expected a quantile from 0 to 1"), std::string::npos);
  }
  EXPECT_EQ(h.percentile(0.5), Duration{0}) << "an empty histogram";
}

/// expect_in_bucket(h, q, expected): h's q-quantile is in expected's bucket.
void expect_in_bucket(const H& h, double q, Duration expected) {
  EXPECT_EQ(H::bucket_of(static_cast<std::uint64_t>(h.percentile(q).count())),
            H::bucket_of(static_cast<std::uint64_t>(expected.count())))
      << h.percentile(q).count() << " ns, expected about " << expected.count() << " ns";
}

TEST_F(Metrics, EachHistogramMeasuresTheManualClocksTimes) {
  QueueOptions qo;
  qo.defaults.max_attempts = 2;
  qo.defaults.backoff = Backoff::fixed(100ms);
  auto q = engine.declare_queue<int>("payments", qo);
  q.process({}, [&](Job<int>& j) {
    clock.advance(j.attempt() == 1 ? 2ms : 3ms);  // the handler's run time
    return j.attempt() == 1 ? Outcome::retry("502 from the gateway") : Outcome::done();
  });
  (void)q.add("charge", 1);
  clock.advance(5ms);  // waits 5 ms before its first start
  engine.run_until_idle();
  clock.advance(130ms);  // the retry was due 100 ms after the failure: it starts 30 ms late
  engine.run_until_idle();
  ASSERT_EQ(q.state(1).status, JobStatus::completed);
  const QueueMetrics m = q.metrics();
  EXPECT_TRUE(m.histograms);
  ASSERT_EQ(m.wait.count(), 2u);
  expect_in_bucket(m.wait, 0.0, 5ms);
  expect_in_bucket(m.wait, 1.0, 30ms);
  ASSERT_EQ(m.run.count(), 2u);
  expect_in_bucket(m.run, 0.0, 2ms);
  expect_in_bucket(m.run, 1.0, 3ms);
  EXPECT_EQ(m.run.sum(), 5ms);
  ASSERT_EQ(m.end_to_end.count(), 1u);
  EXPECT_EQ(m.end_to_end.sum(), 5ms + 2ms + 130ms + 3ms);
  ASSERT_EQ(m.retry_lateness.count(), 1u);
  EXPECT_EQ(m.retry_lateness.sum(), 30ms);
  EXPECT_EQ(m.counts.retried, 1u);
  EXPECT_EQ(m.counts.failed_attempts, 1u);
}

TEST_F(Metrics, LagIsHowLongTheOldestWaitingJobHasWaitedSinceItWasDue) {
  auto q = engine.declare_queue<int>("emails", QueueOptions{});
  EXPECT_EQ(q.metrics().lag, 0ns) << "nothing waits";
  (void)q.add("first", 1);
  clock.advance(3s);
  (void)q.add("second", 2);
  JobOptions later;
  later.delay = 10s;
  (void)q.add("delayed", 3, later);  // not due: no lag of its own
  clock.advance(1s);
  EXPECT_EQ(q.metrics().lag, 4s);
  q.process({}, [](Job<int>&) { return Outcome::done(); });
  engine.run_until_idle();
  EXPECT_EQ(q.metrics().lag, 0ns) << "the delayed job is not due yet";
  EXPECT_EQ(q.metrics().counts.delayed, 1u);
  EXPECT_TRUE(q.cancel(3));
}

TEST_F(Metrics, RejectedRedrivenAndDlqDepthCountWhatHappened) {
  QueueOptions qo;
  qo.capacity = 2;
  auto q = engine.declare_queue<int>("invoices", qo);
  (void)q.add("a", 1);
  (void)q.add("b", 2);
  EXPECT_EQ(q.add("c", 3).status, AddStatus::full);
  std::vector<int> bulk{4, 5, 6};
  EXPECT_EQ(q.add_bulk("d", std::span<int>(bulk)).status, AddStatus::full);
  q.process({}, [](Job<int>&) { return Outcome::fail("card declined"); });
  engine.run_until_idle();
  QueueMetrics m = q.metrics();
  EXPECT_EQ(m.counts.rejected, 4u) << "one single add and a bulk add of three";
  EXPECT_EQ(m.dlq_depth, 2u);
  EXPECT_EQ(m.counts.retried, 0u) << "a permanent failure is not retried";
  EXPECT_EQ(q.dlq().redrive_all(), 2u);
  m = q.metrics();
  EXPECT_EQ(m.counts.redriven, 2u);
  EXPECT_EQ(m.counts.added, 4u) << "a redrive adds the job again";
  EXPECT_EQ(m.dlq_depth, 0u);
  engine.run_until_idle();  // declined again
  EXPECT_EQ(q.metrics().dlq_depth, 2u);
  const EngineMetrics all = engine.metrics();
  ASSERT_EQ(all.queues.size(), 1u);
  EXPECT_EQ(all.at, clock.now());
  EXPECT_EQ(all.find("nope"), nullptr);
}

TEST_F(Metrics, HistogramsSwitchedOffRecordNothingAndTheCountersRemain) {
  QueueOptions qo;
  qo.histograms = false;
  auto q = engine.declare_queue<int>("quiet", qo);
  q.process({}, [](Job<int>&) { return Outcome::done(); });
  for (int i = 0; i < 10; ++i)
    (void)q.add("job", i);
  engine.run_until_idle();
  const QueueMetrics m = q.metrics();
  EXPECT_FALSE(m.histograms);
  EXPECT_EQ(m.counts.completed, 10u);
  EXPECT_EQ(m.wait.count() + m.run.count() + m.end_to_end.count() + m.retry_lateness.count(), 0u);
}

Outcome mixed_outcome(std::uint64_t v, std::uint32_t attempt) {
  switch ((v * 7 + attempt) % 9) {
    case 0:
      return Outcome::retry("flaky");  // no backoff: straight back to ready
    case 1:
      return Outcome::retry_in(200us, "later");
    case 2:
      return Outcome::fail("declined");
    case 3:
      return Outcome::discard("stale");
    default:
      return Outcome::done();
  }
}

// Threads: producers add while workers complete, retry, discard and fail jobs; every counter
// equals the events of its kind, and each histogram holds one sample per event it times.
TEST(MetricsThreaded, CountersAndHistogramCountsAgreeExactlyWithTheEventsObserved) {
  for (int round = 0; round < 3; ++round) {
    Engine engine;
    std::array<std::atomic<std::uint64_t>, 32> seen{};
    std::atomic<std::uint64_t> retries_scheduled{0}, retry_starts{0};
    engine.on_event([&](const Event& e) {
      seen[static_cast<std::size_t>(e.kind)].fetch_add(1, std::memory_order_relaxed);
      if (e.kind == EventKind::attempt_failed && e.delay >= 0ns)
        retries_scheduled.fetch_add(1, std::memory_order_relaxed);
      if (e.kind == EventKind::started && e.attempt > 1)
        retry_starts.fetch_add(1, std::memory_order_relaxed);
    });
    QueueOptions qo;
    qo.capacity = 512;
    qo.defaults.max_attempts = 3;
    auto q = engine.declare_queue<std::uint64_t>("mixed", qo);
    q.process(WorkerOptions{.concurrency = 3},
              [](Job<std::uint64_t>& j) { return mixed_outcome(j.data(), j.attempt()); });
    std::atomic<std::uint64_t> rejected{0};
    std::vector<std::thread> producers;
    for (int p = 0; p < 4; ++p)
      producers.emplace_back([&, p] {
        for (std::uint64_t i = 0; i < 2000; ++i)
          if (q.add("job", i * 4 + static_cast<std::uint64_t>(p)).status == AddStatus::full)
            rejected.fetch_add(1, std::memory_order_relaxed);
      });
    for (auto& t : producers)
      t.join();
    ASSERT_TRUE(q.wait_idle(60s));
    const auto n = [&](EventKind k) { return seen[static_cast<std::size_t>(k)].load(); };
    // A worker's last completion gets its end's time when the worker goes idle, a moment after
    // wait_idle() may return (FlowParts::stamp_end): its run and end-to-end samples follow.
    QueueMetrics m = q.metrics();
    for (auto deadline = std::chrono::steady_clock::now() + 30s;
         m.run.count() < n(EventKind::started) && std::chrono::steady_clock::now() < deadline;
         m = q.metrics())
      std::this_thread::yield();
    const QueueCounts& c = m.counts;
    EXPECT_EQ(c.added, n(EventKind::added));
    EXPECT_EQ(c.added + c.rejected, 8000u);
    EXPECT_EQ(c.rejected, rejected.load());
    EXPECT_EQ(c.completed, n(EventKind::completed));
    EXPECT_EQ(c.failed_attempts, n(EventKind::attempt_failed));
    EXPECT_EQ(c.retried, retries_scheduled.load());
    EXPECT_EQ(c.dead_lettered, n(EventKind::dead_lettered));
    EXPECT_EQ(c.discarded, n(EventKind::discarded));
    EXPECT_EQ(m.dlq_depth, c.dead_lettered);
    EXPECT_EQ(c.completed + c.dead_lettered + c.discarded, c.added);
    EXPECT_EQ(m.wait.count(), n(EventKind::started));
    EXPECT_EQ(m.run.count(), n(EventKind::started)) << "every attempt's outcome counted";
    EXPECT_EQ(m.end_to_end.count(), c.completed + c.dead_lettered + c.discarded);
    EXPECT_EQ(m.retry_lateness.count(), retry_starts.load());
    EXPECT_EQ(m.lag, 0ns);
    EXPECT_GT(m.run.count(), 0u);
    EXPECT_LE(m.wait.percentile(0.5), m.wait.max());
  }
}

// Without observers (the deferred end stamps: FlowParts::stamp_end), each histogram's count
// against the counters once the workers are idle: wait == started, run == started - stalled -
// timed_out, end_to_end == the ends; and no sample past the run's length.
void expect_counts_match(const std::function<QueueMetrics()>& read) {
  const auto match = [](const QueueMetrics& m) {
    const QueueCounts& c = m.counts;
    return m.wait.count() == c.started && m.run.count() == c.started - c.stalled - c.timed_out &&
           m.end_to_end.count() == c.completed + c.dead_lettered + c.cancelled + c.discarded;
  };
  QueueMetrics m = read();
  EXPECT_TRUE(test::eventually([&] { return match(m = read()); }))
      << "started " << m.counts.started << " wait " << m.wait.count() << "; stalled "
      << m.counts.stalled << " timed out " << m.counts.timed_out << " run " << m.run.count()
      << "; ends "
      << m.counts.completed + m.counts.dead_lettered + m.counts.cancelled + m.counts.discarded
      << " end_to_end " << m.end_to_end.count();
  EXPECT_LE(m.retry_lateness.count(), m.counts.retried);
  EXPECT_LT(m.end_to_end.max(), 120s);
  EXPECT_EQ(m.counts.waiting + m.counts.delayed + m.counts.active, 0u);
}

TEST(MetricsThreaded, HistogramCountsMatchTheCountersThroughRetriesLapsesAndCancels) {
  for (int round = 0; round < 2; ++round) {
    Engine engine;
    QueueOptions qo;
    qo.capacity = 1024;
    qo.defaults.max_attempts = 4;
    qo.visibility_timeout = 20ms;
    auto q = engine.declare_queue<std::uint64_t>("mixed", qo);
    q.process(WorkerOptions{.concurrency = 4}, [](Job<std::uint64_t>& j) {
      if (j.data() % 97 == 5 && j.attempt() == 1) {  // outlives its lease: lapses
        const auto stop = j.stop_token();
        while (!stop.stop_requested())
          std::this_thread::yield();
      }
      return mixed_outcome(j.data(), j.attempt());
    });
    std::atomic<bool> done{false};
    std::atomic<JobId> last{0};
    std::thread canceller([&] {
      std::mt19937_64 rng(static_cast<std::uint64_t>(round));
      while (!done.load()) {
        if (const JobId hi = last.load(); hi > 0) (void)q.cancel(1 + rng() % hi);
        std::this_thread::yield();
      }
    });
    std::thread poller([&] {  // snapshots while workers record
      while (!done.load())
        (void)engine.metrics().queues.at(0).run.percentile(0.99);
    });
    std::vector<std::thread> producers;
    for (int p = 0; p < 3; ++p)
      producers.emplace_back([&, p] {
        for (std::uint64_t i = 0; i < 2000; ++i)
          if (const AddReceipt r = q.add("job", i * 3 + static_cast<std::uint64_t>(p));
              r.accepted()) {
            JobId seen = last.load();
            while (seen < r.id && !last.compare_exchange_weak(seen, r.id)) {
            }
          }
      });
    for (auto& t : producers)
      t.join();
    done = true;
    canceller.join();
    poller.join();
    ASSERT_TRUE(q.wait_idle(60s));
    expect_counts_match([&] { return q.metrics(); });
  }
}

TEST(MetricsThreaded, HistogramCountsMatchOnTheSharedPoolWithBatchQueues) {
  Engine engine(EngineOptions{.workers = 3});
  std::vector<Queue<std::uint64_t>> queues;
  for (int i = 0; i < 3; ++i) {
    QueueOptions qo;
    qo.capacity = 1024;
    qo.defaults.max_attempts = 3;
    queues.push_back(engine.declare_queue<std::uint64_t>("q" + std::to_string(i), qo));
    if (i == 2) {
      queues.back().process_batch(WorkerOptions::shared(), BatchOptions{.max = 8},
                                  [](Batch<std::uint64_t>& b) {
                                    for (std::size_t k = 0; k < b.size(); ++k)
                                      b.set(k, mixed_outcome(b[k].data(), b[k].attempt()));
                                  });
    } else {
      queues.back().process(WorkerOptions::shared(), [](Job<std::uint64_t>& j) {
        return mixed_outcome(j.data(), j.attempt());
      });
    }
  }
  std::vector<std::thread> producers;
  for (int p = 0; p < 3; ++p)
    producers.emplace_back([&, p] {
      for (std::uint64_t i = 0; i < 2000; ++i)
        while (!queues[(i + static_cast<std::uint64_t>(p)) % 3].add("job", i).accepted())
          std::this_thread::yield();
    });
  for (auto& t : producers)
    t.join();
  for (auto& q : queues) {
    ASSERT_TRUE(q.wait_idle(60s));
    expect_counts_match([&] { return q.metrics(); });
  }
}

// A downstream's leader cancelled as its gate refuses it counts as started: its start has a wait
// and a run sample too.
TEST(MetricsThreaded, ACancelRacingAGatesRefusalStillRecordsTheStart) {
  for (int round = 0; round < 5; ++round) {
    Engine engine;
    engine.declare_downstream("gateway", DownstreamOptions{.rate = RateLimit{1, 200us}});
    QueueOptions qo;
    qo.capacity = 4096;
    qo.downstream = "gateway";
    auto q = engine.declare_queue<std::uint64_t>("gated", qo);
    q.process(WorkerOptions{.concurrency = 3}, [](Job<std::uint64_t>&) { return Outcome::done(); });
    std::vector<JobId> ids;
    for (std::uint64_t i = 0; i < 1000; ++i)
      ids.push_back(q.add("job", i).id);
    for (std::size_t k = 0; k < ids.size(); ++k)
      (void)q.cancel(ids[(k * 7) % ids.size()]);
    ASSERT_TRUE(q.wait_idle(60s));
    expect_counts_match([&] { return q.metrics(); });
  }
}

TEST(MetricsThreaded, AManualClockAdvancedAfterWaitIdleNeverLandsInARunTime) {
  ManualClock clock;
  Engine engine(EngineOptions{.clock = &clock});
  auto q = engine.declare_queue<int>("manual", QueueOptions{});
  q.process({}, [](Job<int>&) { return Outcome::done(); });  // takes no manual time
  for (int i = 0; i < 100; ++i) {
    (void)q.add("job", i);
    ASSERT_TRUE(q.wait_idle(10s));
    clock.advance(1s);
  }
  const QueueMetrics m = q.metrics();
  EXPECT_EQ(m.run.count(), 100u);
  EXPECT_EQ(m.run.max(), 0ns) << "a handler that took no time was timed across an advance";
}

}  // namespace
}  // namespace rail
