// Shop: the example server's background work, embedded as rail's users embed it: an order's
// charge goes to a `payments` queue whose handlers call a rate-limited payments gateway
// (simulated: a latency, a declined card for amounts ending in 13, a timeout now and then), and a
// charged order's receipt to an `emails` queue.
//
// Contract: Shop owns its engine; add_order() may be called from any thread (every request
// thread is a producer); the destructor shuts the engine down (grace 5 s) before the queues go.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "rail/rail.hpp"

namespace rail::server {

/// Order: a charge's payload.
struct Order {
  std::uint64_t number = 0;
  std::string customer;
  std::int64_t amount_cents = 0;
};

/// Work: how the simulated gateway spends a call's time.
enum class Work : std::uint8_t {
  sleep,  // waits (a network call): the workers leave the CPU to the request threads
  spin,   // burns the CPU (a busy downstream client): what background jobs cost the requests
};

struct ShopOptions {
  Duration gateway_latency = std::chrono::milliseconds(2);
  Work work = Work::sleep;
  double timeout_rate = 0.05;             // share of calls that time out (retried)
  std::uint32_t gateway_concurrency = 4;  // the payments gateway's permits
  std::uint64_t gateway_rate = 500;       // calls per second (token bucket)
  std::uint32_t workers = 4;              // payments workers
  std::uint32_t capacity = 65'536;
};

class Shop {
 public:
  explicit Shop(const ShopOptions& options);
  ~Shop();
  Shop(const Shop&) = delete;
  Shop& operator=(const Shop&) = delete;

  /// add_order(customer, amount_cents, label): adds a charge job named "charge" (or "charge:" +
  /// label, which the dashboard shows as given); the add's receipt (full, shutting_down:
  /// nothing was added).
  AddReceipt add_order(std::string customer, std::int64_t amount_cents, std::string_view label);

  [[nodiscard]] Engine& engine() noexcept { return engine_; }
  [[nodiscard]] Queue<Order>& payments() noexcept { return payments_; }
  [[nodiscard]] Queue<Order>& emails() noexcept { return emails_; }

 private:
  Outcome charge(Job<Order>& job);

  ShopOptions options_;
  Engine engine_;
  Queue<Order> payments_;
  Queue<Order> emails_;
  std::atomic<std::uint64_t> next_order_{1};
};

}  // namespace rail::server
