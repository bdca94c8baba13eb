// Result<R>: what a handler of a queue declared with a result type returns
// (Engine::declare_queue<T, R>): the result itself when the job is done, or any other Outcome.
//
//   auto charges = engine.declare_queue<Order, Receipt>("charges", {});
//   charges.process({}, [](rail::Job<Order>& job) -> rail::Result<Receipt> {
//     if (gateway_busy()) return rail::Outcome::retry("gateway busy");
//     return Receipt{job.data().id, 19.99};
//   });
//
// The result is kept once, shared by the `completed` event (formatted when R can be printed),
// the job's handles (Queue::add_tracked) and the queue's retained results (Queue::end_of).
// Cost: one allocation per completed job for the shared result.
#pragma once

#include <memory>
#include <ostream>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>

#include "rail/error.hpp"
#include "rail/outcome.hpp"
#include "rail/unrecoverable_error.hpp"

namespace rail {

template <class R>
class Result {
  static_assert(!std::is_void_v<R> && !std::is_reference_v<R>,
                "Result<R>: R is the value a handler returns; a queue without a result type "
                "uses rail::Outcome");
  static_assert(!std::is_same_v<std::remove_cv_t<R>, Outcome>,
                "Result<Outcome> is ambiguous; return an Outcome from a plain queue instead");

 public:
  /// Result(value): the job is done with `value`.
  Result(R value)  // NOLINT(google-explicit-constructor): returning the value is the point
      : outcome_(Outcome::done()) {
    outcome_.result_ = std::make_shared<const R>(std::move(value));
  }
  /// Result(outcome): retry, retry_in, fail, discard or pushback. Outcome::done() carries no result
  /// on a queue that promises one: a bug in the handler, not a flaky downstream, so it throws
  /// UnrecoverableError: the job is dead-lettered at once (permanent_failure) with that message.
  Result(Outcome outcome)  // NOLINT(google-explicit-constructor)
      : outcome_(std::move(outcome)) {
    if (outcome_.ok())
      throw UnrecoverableError(
          "a handler of a queue with a result type returned Outcome::done() without a result; "
          "return the result itself (rail::Result<R> from an R)");
  }

  /// take(): the Outcome the engine records (the result rides along with done).
  [[nodiscard]] Outcome take() && noexcept { return std::move(outcome_); }

 private:
  Outcome outcome_;
};

namespace detail {
/// result_printer<R>(): how the `completed` event shows a result: operator<< when R has one,
/// else nullptr (no text).
template <class R>
std::string print_result(const void* result) {
  std::ostringstream os;
  os << *static_cast<const R*>(result);
  return std::move(os).str();
}
template <class R>
constexpr std::string (*result_printer() noexcept)(const void*) {
  if constexpr (std::is_void_v<R>) {
    return nullptr;
  } else if constexpr (requires(std::ostream & os, const R& r) { os << r; }) {
    return &print_result<R>;
  } else {
    return nullptr;
  }
}
}  // namespace detail

}  // namespace rail
