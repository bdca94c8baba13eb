// InlineEngine: the fixture most engine tests share — a ManualClock, an inline engine on it, and
// a record of every event (value fields only: an Event's views die after the observer call).
#pragma once

#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include "rail/rail.hpp"

namespace rail::test {

struct InlineEngine : ::testing::Test {
  ManualClock clock;
  Engine engine{EngineOptions{.clock = &clock, .mode = Mode::inlined}};
  std::vector<Event> events;

  void SetUp() override {
    engine.on_event([this](const Event& e) {
      Event copy = e;
      copy.queue = copy.job_name = copy.error = copy.dedup_id = copy.result = {};
      events.push_back(copy);
    });
  }
  /// of(kind, id): the recorded events of a kind (of one job if id != 0), in order.
  [[nodiscard]] std::vector<Event> of(EventKind kind, JobId id = 0) const {
    std::vector<Event> out;
    for (const auto& e : events)
      if (e.kind == kind && (id == 0 || e.job_id == id)) out.push_back(e);
    return out;
  }
  [[nodiscard]] std::size_t count(EventKind kind) const { return of(kind).size(); }
  /// ids_of(kind): the job ids of the recorded events of a kind, in order.
  [[nodiscard]] std::vector<JobId> ids_of(EventKind kind) const {
    std::vector<JobId> out;
    for (const auto& e : of(kind))
      out.push_back(e.job_id);
    return out;
  }
  [[nodiscard]] Event first(EventKind kind) const {
    auto all = of(kind);
    if (all.empty()) throw std::runtime_error("no event of that kind was recorded");
    return all.front();
  }
  [[nodiscard]] static Duration since_start(const Event& e) { return e.at.time_since_epoch(); }
  /// replay(): runs everything in virtual time until nothing is ready or delayed.
  void replay() {
    engine.run_until_idle();
    while (auto next = engine.next_timer_in()) {
      clock.advance(*next);
      engine.run_until_idle();
    }
  }
};

}  // namespace rail::test
