// BatchState and BatchRegistry: see include/rail/detail/batch_state.hpp.
#include "rail/detail/batch_state.hpp"

#include <algorithm>
#include <utility>

#include "rail/detail/end_tracker.hpp"
#include "rail/error.hpp"

namespace rail::detail {

BatchState::BatchState(std::shared_ptr<BatchRegistry> registry, std::uint64_t id,
                       JobBatchOptions options, std::shared_ptr<BatchState> parent)
    : registry_(std::move(registry)),
      id_(id),
      options_(std::move(options)),
      parent_(std::move(parent)) {}

void BatchState::reserve() {
  const std::lock_guard lock(mu_);
  if (sealed_)
    throw Error(ErrorCode::sealed,
                "batch " + std::to_string(id_) + " ('" + options_.name +
                    "') is sealed: no job joins it after seal(); expected the adds before seal(), "
                    "or a new batch");
  ++in_flight_;
}

void BatchState::unreserve() {
  Fire f;
  {
    const std::lock_guard lock(mu_);
    --in_flight_;
    f = due_locked();  // the last add in flight of a sealed batch may leave it done
  }
  fire(std::move(f));
}

bool BatchState::joined(std::uint64_t id, const std::shared_ptr<EndWaiter>& watch_of) {
  registry_->member(id, shared_from_this());  // may throw: nothing of the batch changed yet
  Fire f;
  bool fresh;
  {
    const std::lock_guard lock(mu_);
    fresh = members_.try_emplace(id).second;  // may throw: likewise
    --in_flight_;
    // A second add merged into a job that is already a member (a duplicate) adds nothing, but
    // it was in flight: with it resolved, a sealed batch may be done.
    if (fresh) {
      members_[id].watch = watch_of;
    } else {
      f = due_locked();
    }
  }
  fire(std::move(f));
  return fresh;
}

std::shared_ptr<BatchState> BatchState::nest(JobBatchOptions options) {
  reserve();
  std::shared_ptr<BatchState> child;
  try {
    child = registry_->create(std::move(options), shared_from_this());
  } catch (...) {
    unreserve();
    throw;
  }
  {
    const std::lock_guard lock(mu_);
    --in_flight_;
    members_.try_emplace(child->id() | kNestedBit);
  }
  return child;
}

void BatchState::seal() {
  Fire f;
  {
    const std::lock_guard lock(mu_);
    sealed_ = true;
    f = due_locked();
  }
  fire(std::move(f));
}

void BatchState::ended(std::uint64_t key, JobStatus status) {
  Fire f;
  std::shared_ptr<EndWaiter> next_life;
  {
    const std::lock_guard lock(mu_);
    auto it = members_.find(key);
    if (it == members_.end() || it->second.ended) return;  // one end per life
    Member& m = it->second;
    m.watch.reset();
    if (EndTracker* tracker = std::exchange(m.redriven_early, nullptr);
        tracker && status == JobStatus::dead_lettered) {
      // The earlier life's end, after its redrive: the member stays live and its next life is
      // watched (had that life ended first, its end would have come through this waiter).
      try {
        next_life = tracker->watch(key, true);
        m.watch = next_life;
      } catch (...) {  // no memory to watch it: it counts as the dead-letter it was
      }
    }
    if (!next_life) {
      if (status == JobStatus::unknown) {
        // Handed back or dropped at shutdown: it left the engine unfinished, so the batch
        // stays open (ShutdownReport::open_batches listed it) and never reports it ended.
        ++unknown_;
        return;
      }
      m.ended = true;
      m.status = status;
      ++ended_;
      switch (status) {
        case JobStatus::completed:
          ++completed_;
          break;
        case JobStatus::dead_lettered:
          ++dead_lettered_;
          break;
        case JobStatus::cancelled:
          ++cancelled_;
          break;
        default:
          ++discarded_;
          break;
      }
      f = due_locked();
    }
  }
  if (next_life) {
    try {
      watch(key, [&](auto cb) { next_life->on_end(std::move(cb)); });
    } catch (...) {  // no memory for the callback: the member never ends (the batch stays open)
    }
    return;
  }
  if (status != JobStatus::dead_lettered && (key & kNestedBit) == 0) registry_->settled(key);
  fire(std::move(f));
}

void BatchState::succeeded(std::uint64_t key) {
  Fire f;
  {
    const std::lock_guard lock(mu_);
    auto it = members_.find(key);
    if (it == members_.end() || !it->second.ended || it->second.status == JobStatus::completed)
      return;
    Member& m = it->second;
    // A nested batch's failures were dead-lettered members (the only ones a redrive revives).
    --dead_lettered_;
    m.status = JobStatus::completed;
    ++completed_;
    f = due_locked();
  }
  fire(std::move(f));
}

void BatchState::redriven(std::uint64_t id, EndTracker& tracker) {
  std::shared_ptr<EndWaiter> w;
  {
    const std::lock_guard lock(mu_);
    auto it = members_.find(id);
    if (it == members_.end()) return;
    if (!it->second.ended) {
      // Redriven before its dead-letter's end reached us: see Member::redriven_early.
      it->second.redriven_early = &tracker;
      return;
    }
    if (it->second.status != JobStatus::dead_lettered) return;
    w = tracker.watch(id, true);  // may throw: nothing changed yet
    Member& m = it->second;
    m.ended = false;
    m.status = JobStatus::waiting;
    m.watch = w;
    --ended_;
    --dead_lettered_;
  }
  try {
    watch(id, [&](auto cb) { w->on_end(std::move(cb)); });  // not published yet: ends later
  } catch (...) {  // no memory for the callback: nothing changed after all
    const std::lock_guard lock(mu_);
    Member& m = members_[id];
    m.ended = true;
    m.status = JobStatus::dead_lettered;
    m.watch.reset();
    ++ended_;
    ++dead_lettered_;
    throw;
  }
}

BatchState::Fire BatchState::due_locked() {
  Fire f;
  if (!sealed_ || in_flight_ != 0) return f;
  const std::uint64_t n = members_.size();
  if (!complete_fired_ && ended_ == n) f.complete = complete_fired_ = true;
  if (!success_fired_ && completed_ == n) f.success = success_fired_ = true;
  if (f.complete || f.success) f.summary = summary_locked();
  return f;
}

void BatchState::fire(Fire f) {
  if (!f.complete && !f.success) return;
  // Keeps this batch alive through its callbacks, whoever drops it meanwhile.
  const std::shared_ptr<BatchState> self = shared_from_this();
  const auto call = [&](const std::function<void(const JobBatchSummary&)>& cb) {
    if (!cb || registry_->closed()) return;  // none while the engine is destroyed
    try {
      cb(f.summary);
    } catch (...) {  // a callback must not throw (job_batch_options.hpp): dropped
    }
  };
  if (f.complete) call(options_.on_complete);
  if (f.success) call(options_.on_success);
  // Then the parent hears of it: a nested batch has ended (completed if every member of it did,
  // else as failed), or turned completed since.
  const JobBatchSummary& s = f.summary;
  if (parent_ && f.complete) {
    parent_->ended(id_ | kNestedBit, f.success             ? JobStatus::completed
                                     : s.dead_lettered > 0 ? JobStatus::dead_lettered
                                     : s.discarded > 0     ? JobStatus::discarded
                                                           : JobStatus::cancelled);
  } else if (parent_) {
    parent_->succeeded(id_ | kNestedBit);
  }
  if (f.complete) registry_->completed(*this);
  // Kept until on_success fires, while a dead-lettered member may still be redriven.
  if (f.success || (f.complete && s.dead_lettered == 0)) registry_->release(*this);
}

JobBatchSummary BatchState::summary() const {
  const std::lock_guard lock(mu_);
  return summary_locked();
}

JobBatchSummary BatchState::summary_locked() const {
  JobBatchSummary s;
  s.id = id_;
  s.name = options_.name;
  s.members = members_.size();
  s.ended = ended_;
  s.completed = completed_;
  s.dead_lettered = dead_lettered_;
  s.cancelled = cancelled_;
  s.discarded = discarded_;
  s.unknown = unknown_;
  s.sealed = sealed_;
  s.complete_fired = complete_fired_;
  s.success_fired = success_fired_;
  return s;
}

// --- the registry --------------------------------------------------------------------------------

std::shared_ptr<BatchState> BatchRegistry::create(JobBatchOptions options,
                                                  std::shared_ptr<BatchState> parent) {
  if (closed())
    throw Error(ErrorCode::shutting_down,
                "a batch after its engine was destroyed; expected batches while the engine lives");
  auto b = std::make_shared<BatchState>(shared_from_this(),
                                        next_id_.fetch_add(1, std::memory_order_relaxed),
                                        std::move(options), std::move(parent));
  const std::lock_guard lock(mu_);
  open_.push_back(b);
  return b;
}

void BatchRegistry::close() noexcept {
  closed_.store(true, std::memory_order_release);
  std::vector<std::shared_ptr<BatchState>> open;
  {
    const std::lock_guard lock(mu_);
    open.swap(open_);
    open.insert(open.end(), awaiting_.begin(), awaiting_.end());
    awaiting_.clear();
    members_.clear();
  }
  // `open` goes here, outside the lock: a batch's last owner may be this vector.
}

void BatchRegistry::member(std::uint64_t id, const std::shared_ptr<BatchState>& batch) {
  const std::lock_guard lock(mu_);
  auto& of = members_[id];
  std::erase_if(of, [](const std::weak_ptr<BatchState>& w) { return w.expired(); });
  of.push_back(batch);
}

void BatchRegistry::settled(std::uint64_t id) {
  const std::lock_guard lock(mu_);
  members_.erase(id);
}

void BatchRegistry::completed(const BatchState& batch) {
  const std::lock_guard lock(mu_);
  auto it = std::find_if(open_.begin(), open_.end(),
                         [&](const std::shared_ptr<BatchState>& b) { return b.get() == &batch; });
  if (it == open_.end()) return;
  awaiting_.push_back(std::move(*it));  // until release()
  open_.erase(it);
}

void BatchRegistry::release(const BatchState& batch) {
  std::shared_ptr<BatchState> last;  // dropped after the lock (declared before it)
  const std::lock_guard lock(mu_);
  auto it = std::find_if(awaiting_.begin(), awaiting_.end(),
                         [&](const std::shared_ptr<BatchState>& b) { return b.get() == &batch; });
  if (it == awaiting_.end()) return;
  last = std::move(*it);
  awaiting_.erase(it);
}

void BatchRegistry::redriven(std::uint64_t id, EndTracker& tracker) {
  std::vector<std::shared_ptr<BatchState>> batches;
  {
    const std::lock_guard lock(mu_);
    auto it = members_.find(id);
    if (it == members_.end()) return;
    for (const auto& w : it->second)
      if (auto b = w.lock()) batches.push_back(std::move(b));
    if (batches.empty()) members_.erase(it);  // its batches are gone: nobody waits any more
  }
  for (const auto& b : batches)
    b->redriven(id, tracker);
}

std::vector<JobBatchSummary> BatchRegistry::open() const {
  std::vector<std::shared_ptr<BatchState>> batches;
  {
    const std::lock_guard lock(mu_);
    batches = open_;
  }
  std::vector<JobBatchSummary> out;
  out.reserve(batches.size());
  for (const auto& b : batches)
    out.push_back(b->summary());
  return out;
}

}  // namespace rail::detail
