// The names the README's example fragments assume, so that each fragment reads as it would in
// an application: a payload (Order), the calls a handler makes (charge, sweep, an async HTTP
// client) and a handler to test (handler). tests/readme/extract.cpp puts every fragment after
// this header.
#pragma once

#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>
#include <rail/rail.hpp>
#include <stop_token>
#include <string>
#include <thread>
#include <utility>

using namespace std::chrono_literals;

struct Order {
  std::string id;
  double amount = 0;
};

/// charge(order): the payment call of the examples; it succeeds.
inline bool charge(const Order& order) {
  return order.amount >= 0;
}

/// sweep(path): the maintenance work of the schedule example.
inline void sweep(const std::string&) {}

/// Response / http: an HTTP client whose post_async calls back at once, on the caller's thread
/// (a real client calls back from its I/O thread).
struct Response {
  [[nodiscard]] bool ok() const { return true; }
  [[nodiscard]] std::string status_text() const { return "200 OK"; }
};
struct HttpClient {
  template <class F>
  void post_async(const Order&, F&& on_response) {
    std::forward<F>(on_response)(Response{});
  }
};
inline HttpClient http;

/// handler: the handler under test in the manual-clock example; its first attempt fails.
inline rail::Outcome handler(rail::Job<int>& job) {
  return job.attempt() == 1 ? rail::Outcome::retry("first attempt fails") : rail::Outcome::done();
}
