// EndTracker (end_tracker.hpp): waiters on jobs' ends, the retained ends (QueueOptions::keep_ended)
// and the ended-job history that Queue::end_of and track() read.
#include "rail/detail/end_tracker.hpp"

#include <algorithm>
#include <thread>
#include <utility>

#include "rail/detail/asymmetric_fence.hpp"
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

void EndTracker::configure(const EndRetention& retention, bool has_result) {
  std::lock_guard lock(mu_);
  const std::size_t fallback = has_result ? 1000 : 0;
  const std::size_t keep_completed = retention.keep_completed.value_or(fallback);
  const std::size_t keep_failed = retention.keep_failed.value_or(keep_completed);
  const bool retained_before = keep_completed_ + keep_failed_ > 0;
  keep_completed_ = keep_completed;
  keep_failed_ = keep_failed;
  max_age_ = retention.max_age;
  const bool retains = keep_completed_ + keep_failed_ > 0;
  // relaxed: configured before the queue is handed out (Engine::declare_queue).
  if (retains && !retained_before) wanted_.fetch_add(1, std::memory_order_relaxed);
  if (!retains && retained_before) wanted_.fetch_sub(1, std::memory_order_relaxed);
}

namespace {
std::shared_ptr<EndWaiter> take_waiter(std::unordered_map<JobId, std::weak_ptr<EndWaiter>>& waiters,
                                       JobId id, std::atomic<std::uint32_t>& wanted) {
  auto it = waiters.find(id);
  if (it == waiters.end()) return nullptr;
  std::shared_ptr<EndWaiter> w = it->second.lock();
  if (!w) return nullptr;  // its last handle is going: its destructor unregisters it
  waiters.erase(it);
  wanted.fetch_sub(1, std::memory_order_relaxed);
  return w;
}
}  // namespace

EndWaiter::~EndWaiter() {
  if (!link_) return;
  std::lock_guard lock(link_->mu);
  if (link_->tracker) link_->tracker->unwatch(id_);
}

EndWaiter::Visit::Visit(TrackerLink* link) noexcept : link_(link) {
  if (link_ == nullptr) return;
  // seq_cst: the Dekker with close() (see the header): our increment, then its flag.
  link_->visitors.fetch_add(1, std::memory_order_seq_cst);
  if (link_->closed.load(std::memory_order_seq_cst)) {
    link_->visitors.fetch_sub(1, std::memory_order_release);
    link_ = nullptr;
  }
}

EndWaiter::Visit::~Visit() {
  // release: what the visit read of the queue happens before close() sees it gone.
  if (link_) link_->visitors.fetch_sub(1, std::memory_order_release);
}

EndTracker::EndTracker() : link_(std::make_shared<TrackerLink>()), mu_(link_->mu) {
  link_->tracker = this;
  init_asymmetric_fence();  // before any job of the queue ends
}

EndTracker::~EndTracker() {
  close("its queue was destroyed before it ended");
}

void EndTracker::close(std::string_view why) noexcept {
  std::vector<std::shared_ptr<EndWaiter>> open;
  {
    std::lock_guard lock(mu_);
    if (link_->tracker == nullptr) return;
    link_->tracker = nullptr;  // a waiter destroyed from now on leaves us alone
    try {
      open.reserve(waiters_.size());
    } catch (...) {  // no memory: the waiters stay unresolved, but nothing touches us again
    }
    // Only into reserved room: a strong reference dropped under the lock could be a waiter's
    // last, whose destructor takes this lock.
    if (open.capacity() >= waiters_.size()) {
      for (auto& [id, weak] : waiters_)
        if (auto w = weak.lock()) open.push_back(std::move(w));
    }
    waiters_.clear();
  }
  // seq_cst: the Dekker with Visit (see the header); then wait out the visits in progress
  // (acquire: pairs with their release decrement). A visit reads the queue, or on an inline
  // engine runs its jobs (wait()): the destructor of that engine waits for such a run.
  link_->closed.store(true, std::memory_order_seq_cst);
  while (link_->visitors.load(std::memory_order_seq_cst) != 0)
    std::this_thread::yield();
  for (auto& w : open) {
    try {
      EndRecord end;
      end.id = w->id();
      end.error = "job " + std::to_string(end.id) + ": " + std::string(why);
      (void)w->resolve(end);
    } catch (...) {  // no memory for the record: this waiter hears nothing
    }
  }
}

std::shared_ptr<EndWaiter> EndTracker::take(JobId id) {
  std::lock_guard lock(mu_);
  return take_waiter(waiters_, id, wanted_);
}

std::shared_ptr<EndWaiter> EndTracker::watch(JobId id, bool sure, Fence fence) {
  std::shared_ptr<EndWaiter> w;
  {
    std::lock_guard lock(mu_);
    // One entry per id, counted once in wanted_: an entry whose waiter is being destroyed is
    // taken over (its destructor then finds another waiter there and leaves it alone).
    if (link_->tracker == nullptr) {  // closed: nothing will end here any more
      auto w = std::make_shared<EndWaiter>();
      EndRecord end;
      end.id = id;
      end.error = "job " + std::to_string(id) + ": its queue is closed (the engine is destroyed)";
      (void)w->resolve(end);
      return w;
    }
    auto [it, inserted] = waiters_.try_emplace(id);
    w = it->second.lock();
    if (!w) {
      w = std::make_shared<EndWaiter>(link_, id);
      it->second = w;
      // relaxed: ordered before the caller's read of the history by the fence below, or, for a
      // sure waiter, published with the job (see wanted()).
      if (inserted) wanted_.fetch_add(1, std::memory_order_relaxed);
    }
    if (sure) w->make_sure();  // under mu_: a by-id watch() of the same job sees it set
  }
  // A waiter by id races the job's end: the heavy side of settle_end's light fence (Dekker).
  // A sure waiter was registered before its job was published: the end, which acquires that
  // publication, sees wanted_ raised without a fence.
  if (!sure && fence == Fence::now) heavy_fence();
  return w;
}

void EndTracker::unwatch(JobId id) noexcept {
  auto it = waiters_.find(id);
  // Only its own entry: record() or abandon() may have taken it, and a new waiter for the same
  // id may have been registered since. The dying waiter's own entry is expired (its count is 0
  // before its destructor runs), so a live entry is another's; a strong reference taken here
  // could be that waiter's last, whose destructor would take this lock again.
  if (it == waiters_.end() || !it->second.expired()) return;
  waiters_.erase(it);
  wanted_.fetch_sub(1, std::memory_order_relaxed);
}

void EndTracker::record(EndRecord&& end, bool retain_it) {
  std::shared_ptr<EndWaiter> waiter;
  {
    std::lock_guard lock(mu_);
    waiter = take_waiter(waiters_, end.id, wanted_);
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
  return it->second.end;
}

void EndTracker::forget(JobId id) {
  std::lock_guard lock(mu_);
  retained_.erase(id);  // its entry in an order queue goes stale (seq no longer matches)
}

void EndTracker::abandon(JobId id, std::string why) {
  std::shared_ptr<EndWaiter> waiter;
  {
    std::lock_guard lock(mu_);
    waiter = take_waiter(waiters_, id, wanted_);
  }
  if (!waiter) return;
  EndRecord end;
  end.id = id;
  end.error = std::move(why);
  (void)waiter->resolve(end);
}

void EndTracker::retain(EndRecord&& end) {
  const std::int64_t at = end.ended_at.time_since_epoch().count();
  const bool completed = end.status == JobStatus::completed;
  auto& order = completed ? completed_ : failed_;
  const std::size_t keep = completed ? keep_completed_ : keep_failed_;
  if (keep != 0) {
    const JobId id = end.id;
    const std::uint64_t seq = ++seq_;
    retained_.insert_or_assign(id, Kept{std::move(end), seq});
    order.push_back(Order{id, at, seq});
    while (order.size() > keep) {
      drop(order.front());
      order.pop_front();
    }
  }
  expire(at);
}

void EndTracker::drop(const Order& o) {
  auto it = retained_.find(o.id);
  if (it != retained_.end() && it->second.seq == o.seq) retained_.erase(it);
}

void EndTracker::expire(std::int64_t now_ns) {
  if (max_age_ == Duration::max()) return;
  // Ends are recorded in about the order they happen, so the fronts hold the oldest.
  for (auto* order : {&completed_, &failed_}) {
    while (!order->empty() && aged_out(order->front().at, max_age_, now_ns)) {
      drop(order->front());
      order->pop_front();
    }
  }
}

}  // namespace rail::detail
