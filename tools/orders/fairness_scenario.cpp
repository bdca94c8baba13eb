// The fairness scenario: per-customer order, a priority lane and fair shares on one queue.
// See fairness_scenario.hpp.
#include "orders/fairness_scenario.hpp"

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

namespace rail::orders {
namespace {

using namespace std::chrono_literals;

struct Order {
  std::string customer;
  std::string step;
};

constexpr std::uint32_t kWorkers = 4;
constexpr std::uint32_t kWindow = 16;
constexpr int kFlood = 2000;

}  // namespace

bool FairnessReport::ok() const noexcept {
  const std::vector<std::string> steps{"charge", "charge", "ship", "email"};
  return customer42 == steps && small_shop_started_at != 0 &&
         small_shop_started_at <= importer_share + kWorkers + 1 && express_started_at >= 1 &&
         express_started_at <= kWorkers + 1 && completed == added;
}

FairnessReport run_fairness(Engine& engine, std::ostream* log) {
  FairnessReport r;
  QueueOptions qo;
  qo.capacity = 4096;
  qo.priorities = 2;  // 0: standard, 1: express
  qo.priority_max_wait = 1s;
  qo.tenants = {{.tenant = "bulk-importer", .weight = 1}};
  qo.tenant_window = kWindow;
  auto q = engine.declare_queue<Order>("orders", qo);
  r.importer_share = kWindow;
  std::mutex mu;
  std::uint64_t starts = 0, express_from = 0;
  std::atomic<bool> gate_open{false};
  const auto t0 = std::chrono::steady_clock::now();
  const auto say = [&](const std::string& what) {
    if (!log) return;
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
            .count();
    *log << "[" << ms << " ms] " << what << "\n";
  };
  q.process({.concurrency = kWorkers}, [&](Job<Order>& j) -> Outcome {
    while (!gate_open.load())
      std::this_thread::sleep_for(100us);  // the flood lands first
    const Order& o = j.data();
    {
      const std::lock_guard lock(mu);
      ++starts;
      if (o.customer == "customer-42") {
        r.customer42.push_back(o.step);
        say("customer-42 " + o.step + " (attempt " + std::to_string(j.attempt()) + ")");
      } else if (o.customer == "small-shop") {
        r.small_shop_started_at = starts;
        say("small-shop's order starts: start " + std::to_string(starts) + " of the run");
      } else if (o.customer == "express" && r.express_started_at == 0) {
        r.express_started_at = starts - express_from;
        say("express order starts: " + std::to_string(r.express_started_at) +
            " start(s) after it was added");
      }
    }
    std::this_thread::sleep_for(50us);  // the partner call
    if (o.customer == "customer-42" && o.step == "charge" && j.attempt() == 1)
      return Outcome::retry("card declined once");
    return Outcome::done();
  });

  // The flood: the importer's jobs, then everyone else's, before any starts.
  JobOptions bulk;
  bulk.tenant = "bulk-importer";
  for (int i = 0; i < kFlood; ++i)
    if (q.add("import", Order{"bulk-importer", "row"}, bulk).accepted()) ++r.added;
  say("bulk-importer added " + std::to_string(kFlood) + " jobs");
  JobOptions small;
  small.tenant = "small-shop";
  if (q.add("order", Order{"small-shop", "order"}, small).accepted()) ++r.added;
  JobOptions c42;
  c42.tenant = "customer-42";
  c42.group = "customer-42";
  c42.max_attempts = 3;
  for (const char* step : {"charge", "ship", "email"})
    if (q.add(step, Order{"customer-42", step}, c42).accepted()) ++r.added;
  say("small-shop and customer-42 added their orders");
  gate_open.store(true);
  // The express order comes while the importer's jobs still wait. It is added under the lock
  // the workers count their starts under, so its count begins exactly at its add: only the jobs
  // workers already hold can start before it.
  JobOptions express;
  express.priority = 1;
  express.tenant = "express";
  while (true) {
    {
      const std::lock_guard lock(mu);
      if (starts >= 100) {
        express_from = starts;
        if (q.add("order", Order{"express", "order"}, express).accepted()) ++r.added;
        break;
      }
    }
    std::this_thread::sleep_for(100us);
  }
  say("an express order is added");
  (void)q.wait_idle(60s);
  r.completed = q.counts().completed;
  say("done: " + std::to_string(r.completed) + " of " + std::to_string(r.added) +
      " jobs completed");
  return r;
}

}  // namespace rail::orders
