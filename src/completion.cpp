// Completion (completion.hpp): a pending job's outcome, delivered through its queue's hub so
// that a Completion outliving its engine touches nothing (pending_jobs.hpp).
#include "rail/completion.hpp"

#include <utility>

#include "rail/detail/completions.hpp"
#include "rail/detail/pending_jobs.hpp"

namespace rail {

namespace {
/// Inside: the hub entered for one call, left on scope exit (also when finish throws).
class Inside {
 public:
  explicit Inside(detail::CompletionHub* hub) noexcept
      : hub_(hub != nullptr && hub->enter() ? hub : nullptr) {}
  Inside(const Inside&) = delete;
  Inside& operator=(const Inside&) = delete;
  ~Inside() {
    if (hub_ != nullptr) hub_->leave();
  }
  explicit operator bool() const noexcept { return hub_ != nullptr; }
  detail::Completions& completions() const noexcept { return hub_->completions(); }

 private:
  detail::CompletionHub* hub_;
};
}  // namespace

Completion::Completion(Completion&& other) noexcept
    : hub_(std::move(other.hub_)), record_(other.record_), id_(other.id_) {}

Completion& Completion::operator=(Completion&& other) noexcept {
  if (this != &other) {
    Completion dropped(std::move(*this));  // completes (as dropped) what this one held
    hub_ = std::move(other.hub_);
    record_ = other.record_;
    id_ = other.id_;
  }
  return *this;
}

Completion::~Completion() {
  if (!hub_) return;
  try {
    complete(Outcome::retry("completion dropped without an outcome"));
  } catch (...) {  // bad_alloc logging the failure: a destructor must not throw
  }
}

bool Completion::complete_as(Outcome&& outcome, std::type_index result_type) {
  // Used up first: a throw from finish() leaves no second completion behind.
  const std::shared_ptr<detail::CompletionHub> hub = std::move(hub_);
  const Inside inside(hub.get());
  if (!inside) return false;  // empty, or the engine is gone
  return inside.completions().complete(record_, std::move(outcome), result_type);
}

bool Completion::cancelled() const noexcept {
  const Inside inside(hub_.get());
  return !inside || inside.completions().cancelled(record_);
}

std::stop_token Completion::stop_token() const {
  const Inside inside(hub_.get());
  return inside ? inside.completions().stop_token(record_) : detail::StopCells::stopped();
}

bool Completion::extend_lease(Duration d) noexcept {
  const Inside inside(hub_.get());
  return inside && inside.completions().extend(record_, d);
}

}  // namespace rail
