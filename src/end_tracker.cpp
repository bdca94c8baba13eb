#include "rail/detail/end_tracker.hpp"

#include <algorithm>
#include <utility>

#include "rail/detail/deadline.hpp"

namespace rail::detail {

bool EndWaiter::resolve(const EndRecord& end) {
  std::vector<Callback> callbacks;
  {
    std::lock_guard lock(mu_);
    if (end_) return false;
    end_ = end;
    callbacks.swap(callbacks_);
  }
  // Outside the lock: a callback may wait on another job. One that throws (it must not) does
  // not keep the others from hearing of the end. Waiters wake after the callbacks ran.
  for (auto& cb : callbacks) {
    try {
      cb(end);
    } catch (...) {
    }
  }
  {
    std::lock_guard lock(mu_);
    woken_ = true;
  }
  cv_.notify_all();
  return true;
}

std::optional<EndRecord> EndWaiter::ended() const {
  std::lock_guard lock(mu_);
  return end_;
}

bool EndWaiter::wait_until(std::chrono::steady_clock::time_point deadline) const {
  std::unique_lock lock(mu_);
  return cv_.wait_until(lock, deadline, [&] { return woken_; });
}

void EndWaiter::on_end(Callback cb) {
  std::unique_lock lock(mu_);
  if (!end_) {
    callbacks_.push_back(std::move(cb));
    return;
  }
  const EndRecord end = *end_;
  lock.unlock();
  cb(end);
}

void EndTracker::configure(const ResultRetention& retention, bool has_result) {
  std::lock_guard lock(mu_);
  const std::size_t fallback = has_result ? 1000 : 0;
  const std::size_t keep_completed = retention.keep_completed.value_or(fallback);
  const std::size_t keep_failed = retention.keep_failed.value_or(keep_completed);
  const bool retained_before = keep_completed_ + keep_failed_ > 0;
  keep_completed_ = keep_completed;
  keep_failed_ = keep_failed;
  max_age_ = retention.max_age;
  const bool retains = keep_completed_ + keep_failed_ > 0;
  // relaxed: configured before the queue is handed out (Engine::queue).
  if (retains && !retained_before) wanted_.fetch_add(1, std::memory_order_relaxed);
  if (!retains && retained_before) wanted_.fetch_sub(1, std::memory_order_relaxed);
}

std::shared_ptr<EndWaiter> EndTracker::watch(JobId id) {
  std::lock_guard lock(mu_);
  auto& w = waiters_[id];
  if (!w) {
    w = std::make_shared<EndWaiter>();
    // relaxed: add_tracked registers before publishing the job, which orders this for the
    // thread that ends it; by-id waits re-check (see the header).
    wanted_.fetch_add(1, std::memory_order_relaxed);
  }
  return w;
}

void EndTracker::record(EndRecord&& end, bool retain_it) {
  std::shared_ptr<EndWaiter> waiter;
  {
    std::lock_guard lock(mu_);
    if (auto it = waiters_.find(end.id); it != waiters_.end()) {
      waiter = std::move(it->second);
      waiters_.erase(it);
      wanted_.fetch_sub(1, std::memory_order_relaxed);
    }
    if (retain_it && keep_completed_ + keep_failed_ > 0) {
      if (waiter) {
        retain(EndRecord(end));
      } else {
        retain(std::move(end));
      }
    }
  }
  if (waiter) (void)waiter->resolve(end);
}

std::optional<EndRecord> EndTracker::retained(JobId id) const {
  std::lock_guard lock(mu_);
  auto it = retained_.find(id);
  if (it == retained_.end()) return std::nullopt;
  return it->second;
}

void EndTracker::abandon(JobId id, std::string why) {
  std::shared_ptr<EndWaiter> waiter;
  {
    std::lock_guard lock(mu_);
    auto it = waiters_.find(id);
    if (it == waiters_.end()) return;
    waiter = std::move(it->second);
    waiters_.erase(it);
    wanted_.fetch_sub(1, std::memory_order_relaxed);
  }
  EndRecord end;
  end.id = id;
  end.error = std::move(why);
  waiter->resolve(end);
}

void EndTracker::retain(EndRecord&& end) {
  const std::int64_t at = end.ended_at.time_since_epoch().count();
  const bool completed = end.status == JobStatus::completed;
  auto& order = completed ? completed_ : failed_;
  const std::size_t keep = completed ? keep_completed_ : keep_failed_;
  if (keep != 0) {
    const JobId id = end.id;
    if (retained_.insert_or_assign(id, std::move(end)).second) order.emplace_back(id, at);
    while (order.size() > keep) {
      retained_.erase(order.front().first);
      order.pop_front();
    }
  }
  expire(at);
}

void EndTracker::expire(std::int64_t now_ns) {
  if (max_age_ == Duration::max()) return;
  // Ended before `cutoff`: older than max_age. Ends are recorded in about the order they happen,
  // so the fronts hold the oldest.
  const std::int64_t cutoff = now_ns - std::min<std::int64_t>(max_age_.count(), now_ns);
  for (auto* order : {&completed_, &failed_}) {
    while (!order->empty() && order->front().second < cutoff) {
      retained_.erase(order->front().first);
      order->pop_front();
    }
  }
}

}  // namespace rail::detail
