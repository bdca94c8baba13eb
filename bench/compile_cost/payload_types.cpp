// compile_cost: what declaring queues of several payload types costs a translation unit (issue 8:
// "a translation unit that declares queues of 5 payload types"). RAIL_TYPES (1..6) picks how
// many of the types below get a queue, each used the way an application does: declare, process,
// add, add_bulk, the DLQ, redrive, leftovers. `bench/compile_cost/measure` compiles it at -O2
// and reports the time and the text size.
#include <array>
#include <span>
#include <string>
#include <vector>

#include "rail/rail.hpp"

#ifndef RAIL_TYPES
#define RAIL_TYPES 5
#endif

namespace {

struct Order {
  std::string id;
  double amount = 0;
};
struct Email {
  std::string to, subject, body;
};
struct Blob {
  std::array<char, 256> bytes{};
};
struct Event {
  std::uint64_t user = 0;
  std::vector<int> items;
};

template <class T>
std::size_t use(rail::Engine& engine, const char* name, T sample) {
  auto q = engine.declare_queue<T>(name, rail::QueueOptions{.capacity = 1024});
  q.process({.concurrency = 2}, [](rail::Job<T>& job) {
    return job.attempt() < 2 ? rail::Outcome::retry("again") : rail::Outcome::done();
  });
  (void)q.add(
      "job", sample,
      {.max_attempts = 3, .backoff = rail::Backoff::exponential(std::chrono::milliseconds(1))});
  std::vector<T> batch(4, sample);
  (void)q.add_bulk("bulk", std::span<T>(batch));
  std::size_t n = q.dlq().list().size();
  (void)q.dlq().redrive_all();
  (void)engine.shutdown(std::chrono::seconds(1));
  n += q.take_leftovers().size();
  return n;
}

}  // namespace

std::size_t compile_cost_entry() {
  rail::Engine engine;
  std::size_t n = use<int>(engine, "ints", 1);
#if RAIL_TYPES >= 2
  n += use<std::string>(engine, "strings", "x");
#endif
#if RAIL_TYPES >= 3
  n += use<Order>(engine, "orders", Order{"order-1", 19.99});
#endif
#if RAIL_TYPES >= 4
  n += use<Email>(engine, "emails", Email{"a@b", "hi", "body"});
#endif
#if RAIL_TYPES >= 5
  n += use<Blob>(engine, "blobs", Blob{});
#endif
#if RAIL_TYPES >= 6
  n += use<Event>(engine, "events", Event{7, {1, 2}});
#endif
  return n;
}
