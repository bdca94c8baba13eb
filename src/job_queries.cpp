// JobFlow's cold calls that only read: a job's state and end, listings by status, idle and
// drain. Each reads a slot it does not hold as a seqlock: the fields, then the word and the id
// again; a slot that moved meanwhile is read again or skipped. Ordering conventions:
// job_flow.hpp.
#include <algorithm>
#include <bit>
#include <chrono>

#include "rail/detail/deadline.hpp"
#include "rail/detail/job_flow.hpp"
#include "rail/detail/worker_pool.hpp"
#include "rail/error.hpp"

namespace rail::detail {

std::vector<JobInfo> JobFlow::jobs(JobStatus status, std::size_t limit) const {
  std::vector<JobInfo> out;
  if (limit == 0) return out;
  // The `limit` oldest (smallest ids: ids are given in add order) in a max-heap by id, so a
  // listing of 100 costs one pass plus O(log 100) per job, whatever the queue holds; a job newer
  // than every kept one is skipped before its state is read.
  const auto newer = [](const JobInfo& a, const JobInfo& b) { return a.id < b.id; };
  for (std::uint32_t i = 0; i < parts_.capacity; ++i) {
    const JobSlot& s = slot(i);
    const std::uint64_t c = s.ctl.load();
    if (status_of(ctl::state(c)) != status) continue;
    JobInfo j;
    j.id = s.id.load(std::memory_order_relaxed);
    if (out.size() == limit && j.id >= out.front().id) continue;
    j.state = live_state(s, c);
    // A seqlock read, as state(): the fields describe one job only if the word did not move.
    std::atomic_thread_fence(std::memory_order_acquire);
    if (s.ctl.load() != c) continue;  // it moved on: skipped, as if listed a moment later
    if (out.size() == limit) {
      std::pop_heap(out.begin(), out.end(), newer);
      out.back() = j;
    } else {
      out.push_back(j);
    }
    std::push_heap(out.begin(), out.end(), newer);
  }
  std::sort_heap(out.begin(), out.end(), newer);  // oldest first
  return out;
}

JobStatus JobFlow::status_of(SlotState st) noexcept {
  switch (st) {
    case SlotState::waiting:
      return JobStatus::waiting;
    case SlotState::delayed:
    case SlotState::updating:
      return JobStatus::delayed;
    case SlotState::active:
    case SlotState::finishing:
      return JobStatus::active;
    default:
      return JobStatus::unknown;  // ended or reused: the history knows
  }
}

JobState JobFlow::live_state(const JobSlot& s, std::uint64_t c) const noexcept {
  JobState st;
  st.status = status_of(ctl::state(c));
  switch (st.status) {
    case JobStatus::delayed:
      st.since = TimePoint{Duration{s.due_ns.load(std::memory_order_relaxed)}};
      break;
    case JobStatus::active:
      st.since = TimePoint{Duration{s.started()}};
      break;
    default:
      break;
  }
  st.deliveries = s.delivered();
  st.attempts_made = s.attempts();
  st.stalls = s.stalled();
  // acquire: pairs with the release that published the cells.
  if (const ProgressCells* table = progress_.get()) {
    const ProgressCell& p = table->cells[parts_.index_of(s)];
    // relaxed: a hint read beside the slot's counters (state() validates the slot, not this).
    if (p.id.load(std::memory_order_relaxed) == s.id.load(std::memory_order_relaxed))
      st.progress = std::bit_cast<double>(p.bits.load(std::memory_order_relaxed));
  }
  return st;
}

JobState JobFlow::state(JobId id) const {
  for (std::uint32_t i = 0; i < parts_.capacity; ++i) {
    const JobSlot& s = slot(i);
    if (s.id.load(std::memory_order_relaxed) != id) continue;
    for (;;) {
      const std::uint64_t c = s.ctl.load();
      const JobState st = live_state(s, c);
      // A seqlock read: the fields describe the job only if neither the word nor the id moved
      // while they were read (the fence keeps the re-reads after the field loads).
      std::atomic_thread_fence(std::memory_order_acquire);
      if (s.id.load(std::memory_order_relaxed) != id) break;
      if (s.ctl.load() != c) continue;
      if (st.status != JobStatus::unknown) return st;
      break;
    }
  }
  if (auto ended = parts_.stats.recall(id)) return JobState{*ended};
  if (in_dlq(id)) return JobState{JobStatus::dead_lettered};
  return JobState{};
}

std::optional<EndRecord> JobFlow::end_of(JobId id) const {
  // The history first: a job whose end is in it may still hold its slot for a moment (its end
  // record, if one is coming, is then on its way); a redriven job runs again under its id, so
  // a live slot comes next, and only then what was retained of an earlier end.
  for (std::uint32_t i = 0; i < parts_.capacity; ++i) {
    const JobSlot& s = slot(i);
    if (s.id.load(std::memory_order_relaxed) != id) continue;
    const SlotState st = ctl::state(s.ctl.load());
    if (s.id.load(std::memory_order_relaxed) == id &&
        (st == SlotState::waiting || st == SlotState::delayed || st == SlotState::active ||
         st == SlotState::updating))
      return std::nullopt;  // live (a finishing job's end is decided: the history may have it)
  }
  const std::optional<JobStatus> ended = parts_.stats.recall(id);
  if (auto retained = ends_.tracker().retained(id);
      retained && (!ended || retained->status == *ended))
    return retained;
  const JobState st = ended ? JobState{*ended} : state(id);
  if (st.status == JobStatus::waiting || st.status == JobStatus::delayed ||
      st.status == JobStatus::active)
    return std::nullopt;  // finishing, its end not in the history yet
  if (st.status == JobStatus::dead_lettered) {
    if (auto filed = dlq_end(id)) return filed;  // reason and errors from its entry
  }
  EndRecord end;
  end.id = id;
  end.status = st.status;
  if (st.status == JobStatus::unknown)
    end.error = "job " + std::to_string(id) + " is not in queue '" + parts_.name +
                "': never added here, or ended so long ago that the queue's history forgot it";
  return end;  // ended, but not retained: its status only (no result, no errors)
}

bool JobFlow::idle() const noexcept {
  const QueueCounts c = counts();
  return c.waiting == 0 && c.delayed == 0 && c.active == 0;
}

PoolWait JobFlow::pool_wait(const std::string& what, bool bounded) const {
  PoolWait wait(dispatch_.pool_of_caller());
  if (!wait.enter(bounded)) {
    const std::uint32_t others = wait.workers() - 1;
    throw Error(ErrorCode::would_deadlock,
                what + " on queue '" + parts_.name +
                    "' from a worker of the engine's shared pool: " +
                    (others == 0 ? std::string("the pool's only worker is the caller")
                                 : "the pool's other " + std::to_string(others) +
                                       " worker(s) already wait without a timeout for its jobs") +
                    ", so this wait would leave no worker free to run the queue's jobs; " +
                    (others == 0 ? "wait from outside the pool"
                                 : "wait with a timeout, from outside the pool") +
                    ", or give the pool more workers (EngineOptions.workers)");
  }
  return wait;
}

bool JobFlow::drain(Duration timeout) {
  if (parts_.core.mode() != Mode::threaded)
    throw Error(ErrorCode::wrong_mode, "drain() on queue '" + parts_.name +
                                           "' waits for worker threads; an inline engine has "
                                           "none (use Engine::run_until_idle)");
  if (current_delivery() == this || parts_.core.in_timer_context())
    throw Error(ErrorCode::would_deadlock,
                "drain() on queue '" + parts_.name +
                    "' was called from one of its own handlers or from a callback of the timer "
                    "(an observer of retry_due/stalled, a DLQ alert), which would wait for "
                    "itself; drain from outside handlers and callbacks");
  // Cold path: poll with a growing sleep. A drained queue stays drained only if nobody adds.
  const auto deadline = steady_deadline(timeout);  // Duration::max(): no timeout
  std::optional<PoolWait> checked;                 // taken when first about to block
  bool stranded = false;  // shutdown stopped the workers with jobs left that none will start
  for (;;) {
    const bool idled = poll_until(deadline, [&] {
      if (idle()) return true;
      // acquire: pairs with stop()'s store. Once the workers are stopped and no handler runs,
      // what is left (waiting, delayed) never starts: the queue never drains.
      if (dispatch_.stopping(std::memory_order_acquire) && counts().active == 0)
        return stranded = true;
      // About to block: a wait that would leave the shared pool no worker for the queue's jobs
      // is refused (a queue that is idle already drains from anywhere).
      if (!checked)
        checked.emplace(
            pool_wait("drain()", deadline != std::chrono::steady_clock::time_point::max()));
      return false;
    });
    if (!idled || stranded) return false;
    // The counts show a job ended by a lapse before the timer thread has told the observers;
    // and what they were told may have added jobs (an observer, a schedule's run): look again.
    if (!parts_.core.await_deliveries(deadline)) return false;
    if (idle()) return true;
  }
}

}  // namespace rail::detail
