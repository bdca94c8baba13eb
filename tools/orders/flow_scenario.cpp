// The flow scenario: an order as a graph of jobs. See flow_scenario.hpp.
#include "orders/flow_scenario.hpp"

#include <atomic>
#include <chrono>
#include <mutex>

namespace rail::orders {
namespace {

using namespace std::chrono_literals;

struct Order {
  std::string id;
  double amount = 0;
};

constexpr std::uint64_t kSteps = 4;

}  // namespace

bool FlowReport::ok() const noexcept {
  // order-1: 4 starts; order-2: its charge only. order-2's email, invoice and close failed.
  return steps_run == kSteps + 1 && completed == kSteps && dependency_failed == 3 &&
         closed.size() == 3;
}

FlowReport run_flow(Engine& engine, std::ostream* log) {
  FlowReport r;
  std::mutex mu;  // the log and r, from the workers
  const auto say = [&](const std::string& line) {
    const std::lock_guard lock(mu);
    if (log) *log << line << "\n";
  };
  std::atomic<std::uint64_t> starts{0};
  auto charges = engine.declare_queue<Order, std::string>("charges", {});
  auto notices = engine.declare_queue<Order, std::string>("notices", {});
  auto closing = engine.declare_queue<Order>("closing", {});
  charges.process({}, [&](Job<Order>& j) -> Result<std::string> {
    starts.fetch_add(1);
    if (j.data().id == "order-2") {
      say("charge " + j.data().id + ": card declined");
      return Outcome::fail("card declined");
    }
    say("charge " + j.data().id + ": charged " + std::to_string(j.data().amount));
    return "receipt R-" + j.data().id;
  });
  notices.process({.concurrency = 2}, [&](Job<Order>& j) -> Result<std::string> {
    starts.fetch_add(1);
    say(std::string(j.name()) + " " + j.data().id);
    return std::string(j.name() == "email" ? "email sent for " : "invoice INV-") + j.data().id;
  });
  closing.process({}, [&](Job<Order>& j) {
    starts.fetch_add(1);
    say("close " + j.data().id + ": its children ended");
    for (const ChildEnd& child : j.children()) {
      const auto result = child.result<std::string>();
      std::string line = "  job " + std::to_string(child.end.id) + " on " + child.queue + ": " +
                         std::string(to_string(child.end.status));
      if (result) line += " -> " + *result;
      say(line);
      const std::lock_guard lock(mu);
      r.closed.push_back(line);
    }
    return Outcome::done();
  });
  std::vector<JobId> closes;
  for (const Order& order : {Order{"order-1", 42.5}, Order{"order-2", 7.0}}) {
    Flow flow;
    auto charge = flow.job(charges, "charge", order);
    auto email = flow.job(notices, "email", order);
    auto invoice = flow.job(notices, "invoice", order);
    auto close = flow.job(closing, "close", order);
    flow.after(email, charge).after(invoice, charge);
    flow.after(close, charge).after(close, email).after(close, invoice);
    const std::vector<JobId> ids = flow.add();
    say("added " + order.id + ": charge " + std::to_string(ids[0]) + ", email " +
        std::to_string(ids[1]) + ", invoice " + std::to_string(ids[2]) + ", close " +
        std::to_string(ids[3]) + " (waiting for its children)");
    closes.push_back(ids[3]);
  }
  charges.wait_idle(30s);
  notices.wait_idle(30s);
  closing.wait_idle(30s);
  for (const JobId id : closes) {
    const JobState st = closing.state(id);
    std::string line = "close job " + std::to_string(id) + ": " + std::string(to_string(st.status));
    if (auto e = closing.dlq().get(id))
      line += " (" + std::string(to_string(e->reason)) + ": " + e->errors.back().message + ")";
    say(line);
  }
  for (const auto& e : notices.dlq().list())
    if (e.reason == DeadLetterReason::dependency_failed) ++r.dependency_failed;
  for (const auto& e : closing.dlq().list())
    if (e.reason == DeadLetterReason::dependency_failed) ++r.dependency_failed;
  r.completed =
      charges.counts().completed + notices.counts().completed + closing.counts().completed;
  r.steps_run = starts.load();
  return r;
}

}  // namespace rail::orders
