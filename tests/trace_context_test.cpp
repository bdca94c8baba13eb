// Trace context (rail/trace_context.hpp): the traceparent format (W3C's examples and its
// refusals), a job carrying its producer's context to its handler, events and JSON log lines, a
// retry's new span linked to the first, an explicit context over the thread's, a reused slot
// forgetting its last job's context, an add kept for after a running job and a redrive keeping
// it; threads: each producer's scope is its own.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "rail/rail.hpp"
#include "support/inline_engine.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;
using Traces = test::InlineEngine;

constexpr const char* kW3cExample = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

TraceContext context(const char* traceparent) {
  const auto c = TraceContext::parse(traceparent);
  if (!c) throw std::runtime_error(std::string("not a traceparent: ") + traceparent);
  return *c;
}

TEST(TraceContextFormat, ParsesTheW3cExampleAndWritesItBack) {
  const TraceContext c = context(kW3cExample);
  EXPECT_TRUE(c.valid());
  EXPECT_EQ(c.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(c.span_id_hex(), "00f067aa0ba902b7");
  EXPECT_EQ(c.flags, 1);
  EXPECT_EQ(c.traceparent(), kW3cExample);
  // A later version may carry more fields; its first four are read.
  EXPECT_TRUE(TraceContext::parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x"));
}

TEST(TraceContextFormat, RefusesWhatTheW3cRefuses) {
  for (const char* bad : {
           "",
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",       // no flags
           "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",    // uppercase
           "00-00000000000000000000000000000000-00f067aa0ba902b7-01",    // zero trace id
           "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",    // zero span id
           "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",    // version ff
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",  // 00 has four fields
           "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",    // not hex
           "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",    // wrong separator
       })
    EXPECT_FALSE(TraceContext::parse(bad)) << bad;
  EXPECT_FALSE(TraceContext{}.valid());
}

TEST(TraceContextFormat, AttemptSpansAreDerivedDeterministicallyAndDiffer) {
  const TraceContext p = context(kW3cExample);
  const JobTrace a1 = attempt_trace(p, 42, 1), a2 = attempt_trace(p, 42, 2);
  EXPECT_EQ(a1.attempt.trace_id, p.trace_id);
  EXPECT_EQ(a1.attempt.flags, p.flags);
  EXPECT_NE(a1.attempt.span_id, p.span_id);
  EXPECT_NE(a2.attempt.span_id, a1.attempt.span_id);
  EXPECT_FALSE(a1.first_attempt);
  ASSERT_TRUE(a2.first_attempt);
  EXPECT_EQ(*a2.first_attempt, a1.attempt);
  EXPECT_EQ(attempt_trace(p, 42, 2).attempt, a2.attempt) << "the same inputs, the same span";
  EXPECT_NE(attempt_trace(p, 43, 1).attempt.span_id, a1.attempt.span_id);
  EXPECT_FALSE(attempt_trace(TraceContext{}, 42, 1).valid());
}

TEST_F(Traces, AJobCarriesItsProducersContextToItsHandlerEventsAndLogLines) {
  const TraceContext request = context(kW3cExample);
  auto q = engine.declare_queue<int>("payments", QueueOptions{});
  JobTrace seen;
  q.process({}, [&](Job<int>& j) {
    seen = j.trace();
    return Outcome::done();
  });
  std::vector<std::string> lines;
  engine.on_event([&](const Event& e) {
    lines.push_back(format_event_json(e, clock, LogOptions{.format = LogFormat::json}));
  });
  {
    const TraceScope scope(request);
    EXPECT_EQ(current_trace(), request);
    (void)q.add("charge", 1);
  }
  EXPECT_FALSE(current_trace().valid()) << "the scope ended";
  engine.run_until_idle();
  ASSERT_TRUE(seen.valid());
  EXPECT_EQ(seen.producer, request);
  EXPECT_EQ(seen.attempt.trace_id, request.trace_id);
  EXPECT_NE(seen.attempt.span_id, request.span_id);
  EXPECT_FALSE(seen.first_attempt);
  for (const Event& e : events) {
    if (e.job_id != 0) {
      EXPECT_EQ(e.trace, request) << to_string(e.kind);
    }
  }
  ASSERT_GE(lines.size(), 2u);
  for (const std::string& line : lines) {
    const auto j = nlohmann::json::parse(line);
    if (!j.contains("job_id")) continue;  // a queue-level event (idle) belongs to no job
    EXPECT_EQ(j["trace_id"], request.trace_id_hex()) << line;
    EXPECT_EQ(j["parent_span_id"], request.span_id_hex()) << line;
    if (j["event"] == "started" || j["event"] == "completed") {
      EXPECT_EQ(j["span_id"], seen.attempt.span_id_hex()) << line;
    }
    if (j["event"] == "added") {
      EXPECT_FALSE(j.contains("span_id")) << line;
    }
  }
}

TEST_F(Traces, ARetryIsANewSpanLinkedToTheFirstAttempt) {
  auto q = engine.declare_queue<int>("payments", QueueOptions{});
  std::vector<JobTrace> attempts;
  q.process({}, [&](Job<int>& j) {
    attempts.push_back(j.trace());
    return j.attempt() == 1 ? Outcome::retry("timeout") : Outcome::done();
  });
  JobOptions o;
  o.max_attempts = 2;
  o.trace = context(kW3cExample);
  (void)q.add("charge", 1, o);
  engine.run_until_idle();
  ASSERT_EQ(attempts.size(), 2u);
  EXPECT_NE(attempts[1].attempt.span_id, attempts[0].attempt.span_id);
  ASSERT_TRUE(attempts[1].first_attempt);
  EXPECT_EQ(*attempts[1].first_attempt, attempts[0].attempt);
  EXPECT_EQ(attempts[1].producer, attempts[0].producer);
}

TEST_F(Traces, AnExplicitContextWinsAndAReusedSlotForgetsItsLastJobsContext) {
  QueueOptions qo;
  qo.capacity = 1;  // every job takes the same slot
  auto q = engine.declare_queue<int>("emails", qo);
  std::vector<JobTrace> seen;
  q.process({}, [&](Job<int>& j) {
    seen.push_back(j.trace());
    return Outcome::done();
  });
  const TraceContext scoped = context(kW3cExample);
  const TraceContext explicit_one =
      context("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00");
  {
    const TraceScope scope(scoped);
    JobOptions o;
    o.trace = explicit_one;
    (void)q.add("first", 1, o);
  }
  engine.run_until_idle();
  (void)q.add("second", 2);  // no scope, no option: none, in the slot the first one used
  engine.run_until_idle();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].producer, explicit_one);
  EXPECT_FALSE(seen[1].valid()) << "the slot's previous job's context leaked into the next";
  EXPECT_FALSE(of(EventKind::completed).back().trace.valid());
}

TEST_F(Traces, AnAddKeptForAfterTheRunningJobKeepsItsProducersContext) {
  auto q = engine.declare_queue<int>("syncs", QueueOptions{});
  JobOptions o;
  o.dedup.id = "user-7";
  o.dedup.keep_last_if_active = true;
  const TraceContext request = context(kW3cExample);
  std::vector<JobTrace> seen;
  q.process({}, [&](Job<int>& j) {
    seen.push_back(j.trace());
    if (j.data() == 1) {
      const TraceScope scope(request);  // the duplicate's producer: kept, added after this job
      EXPECT_EQ(q.add("sync", 2, o).status, AddStatus::kept);
    }
  });
  (void)q.add("sync", 1, o);  // no context
  replay();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_FALSE(seen[0].valid());
  EXPECT_EQ(seen[1].producer, request) << "the kept add lost the scope it was made in";
}

TEST_F(Traces, TheDlqEntryShowsTheTraceAndARedriveKeepsIt) {
  auto q = engine.declare_queue<int>("payments", QueueOptions{});
  std::vector<JobTrace> seen;
  q.process({}, [&](Job<int>& j) {
    seen.push_back(j.trace());
    return Outcome::fail("declined");
  });
  const TraceContext request = context(kW3cExample);
  JobOptions o;
  o.trace = request;
  const JobId id = q.add("charge", 1, o).id;
  engine.run_until_idle();
  ASSERT_EQ(q.dlq().list().size(), 1u);
  EXPECT_EQ(q.dlq().list()[0].trace, request);
  {
    const TraceScope other(context("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"));
    EXPECT_EQ(q.dlq().redrive(id), RedriveStatus::redriven);
  }
  engine.run_until_idle();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1].producer, request) << "the entry's, not the redriving thread's";
}

TEST(TracesThreaded, EachProducerThreadsScopeIsItsOwn) {
  Engine engine;
  auto q = engine.declare_queue<int>("mixed", QueueOptions{.capacity = 256});
  std::vector<TraceContext> producers;
  for (int p = 0; p < 4; ++p) {
    TraceContext c = context(kW3cExample);
    c.trace_id[0] = static_cast<std::uint8_t>(p + 1);
    producers.push_back(c);
  }
  std::atomic<int> wrong{0}, traced{0};
  q.process(WorkerOptions{.concurrency = 3}, [&](Job<int>& j) {
    const int p = j.data() % 8;
    if (p < 4 ? j.trace().producer != producers[static_cast<std::size_t>(p)] : j.trace().valid())
      wrong.fetch_add(1);
    if (j.trace().valid()) traced.fetch_add(1);
    return Outcome::done();
  });
  std::vector<std::thread> threads;
  for (int p = 0; p < 8; ++p)  // 0-3 in a scope of their own, 4-7 in none
    threads.emplace_back([&, p] {
      std::optional<TraceScope> scope;
      if (p < 4) scope.emplace(producers[static_cast<std::size_t>(p)]);
      for (int i = 0; i < 500; ++i)
        while (!q.add("job", i * 8 + p).accepted())
          std::this_thread::yield();
    });
  for (auto& t : threads)
    t.join();
  ASSERT_TRUE(q.wait_idle(60s));
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(traced.load(), 2000);
}

}  // namespace
}  // namespace rail
