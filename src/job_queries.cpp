// JobQueries: a job's state and end, and listings by status. Contract and ordering:
// job_queries.hpp.
#include "rail/detail/job_queries.hpp"

#include <algorithm>
#include <atomic>
#include <string>

namespace rail::detail {

std::vector<JobInfo> JobQueries::jobs(JobStatus status, std::size_t limit) const {
  std::vector<JobInfo> out;
  if (limit == 0) return out;
  // The `limit` oldest (smallest ids: ids are given in add order) in a max-heap by id, so a
  // listing of 100 costs one pass plus O(log 100) per job, whatever the queue holds; a job newer
  // than every kept one is skipped before its state is read.
  const auto newer = [](const JobInfo& a, const JobInfo& b) { return a.id < b.id; };
  for (std::uint32_t i = 0; i < parts_.capacity; ++i) {
    const JobSlot& s = parts_.slot(i);
    const std::uint64_t c = s.ctl.load();
    if (status_of(s, ctl::state(c)) != status) continue;
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

std::optional<std::int64_t> JobQueries::oldest_due(std::size_t bound) const noexcept {
  std::optional<std::int64_t> oldest;
  for (std::uint32_t i = 0; i < bound; ++i) {
    const JobSlot& s = parts_.slot(i);
    const std::uint64_t c = s.ctl.load();
    if (status_of(s, ctl::state(c)) != JobStatus::waiting) continue;
    const std::int64_t due = s.due_ns.load(std::memory_order_relaxed);
    // A seqlock read, as jobs(): the due time is this job's only if the word did not move.
    std::atomic_thread_fence(std::memory_order_acquire);
    if (s.ctl.load() != c) continue;  // it moved on: as if looked at a moment later
    if (!oldest || due < *oldest) oldest = due;
  }
  return oldest;
}

JobStatus JobQueries::status_of(const JobSlot& s, SlotState st) noexcept {
  switch (st) {
    case SlotState::waiting:
      return JobStatus::waiting;
    case SlotState::delayed:
    case SlotState::updating:
      if (s.marked(JobSlot::kWaitingChildren)) return JobStatus::waiting_children;
      return s.marked(JobSlot::kHeld) ? JobStatus::waiting : JobStatus::delayed;
    case SlotState::active:
    case SlotState::finishing:
      return JobStatus::active;
    default:
      return JobStatus::unknown;  // ended or reused: the history knows
  }
}

JobState JobQueries::live_state(const JobSlot& s, std::uint64_t c) const noexcept {
  JobState st;
  // Taken by the expiry sweep, it waits for its index's holder to end it (dead-lettered).
  st.status = SlotControl<>::expired(c) ? JobStatus::waiting : status_of(s, ctl::state(c));
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
  st.failed_attempts = s.attempts();
  st.stalls = s.stalled();
  st.progress = progress_.of(s);
  st.zombies = ctl::zombies(c);
  return st;
}

JobState JobQueries::state(JobId id) const {
  std::uint32_t zombies = 0;  // of an ended job whose slot its stale handlers still pin
  for (std::uint32_t i = 0; i < parts_.capacity; ++i) {
    const JobSlot& s = parts_.slot(i);
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
      if (ctl::state(c) == SlotState::ended) zombies += ctl::zombies(c);
      break;
    }
  }
  JobState st;
  if (auto ended = parts_.stats.recall(id)) {
    st.status = *ended;
  } else if (dlq_.in_dlq(id)) {
    st.status = JobStatus::dead_lettered;
  }
  st.zombies = zombies;
  return st;
}

std::vector<JobQueries::Known> JobQueries::take_known(std::unordered_set<JobId>& ids) const {
  std::vector<Known> out;
  // Ended first (a lookup each), so that only live ones cost a pass over the slots: one that
  // ended once counts as ended, even if redriven since.
  const auto ended = [&] {
    for (auto it = ids.begin(); it != ids.end();) {
      if (parts_.stats.recall(*it) || dlq_.in_dlq(*it)) {
        out.push_back({*it, kEnded});
        it = ids.erase(it);
      } else {
        ++it;
      }
    }
  };
  ended();
  for (std::uint32_t i = 0; i < parts_.capacity && !ids.empty(); ++i) {
    const JobId id = parts_.slot(i).id.load(std::memory_order_relaxed);
    if (ids.find(id) == ids.end() || place(i, id) == Place::gone) continue;
    out.push_back({id, i});
    ids.erase(id);
  }
  ended();  // one that ended while the slots were read
  return out;
}

JobQueries::Place JobQueries::place(std::uint32_t slot, JobId id, EndKind* kind) const noexcept {
  const JobSlot& s = parts_.slot(slot);
  // The word, the end's kind, then the id: a slot reused meanwhile holds another job, and a kind
  // written for a later job of the slot (its reset, or its own end) comes with that job's id
  // (ended_as acquires what end_as released after the id). With the id still ours, the word is
  // ours too for a caller that saw the job in this slot before a fence (FlowNode::make).
  const SlotState st = ctl::state(s.ctl.load());
  const EndKind k = s.ended_as();
  if (s.id.load(std::memory_order_relaxed) != id) return Place::gone;
  if (kind) *kind = k;
  switch (st) {
    case SlotState::waiting:
    case SlotState::delayed:
    case SlotState::active:
    case SlotState::updating:
      return Place::live;
    case SlotState::finishing:
    case SlotState::cancelled:
      return k == EndKind::none ? Place::moving : Place::decided;
    case SlotState::ended:  // only stale handlers hold it
      return k == EndKind::none ? Place::gone : Place::decided;
    default:  // free: a reset kind, or the last one's, is not this job's to go by
      return Place::gone;
  }
}

EndRecord JobQueries::ended_end(JobId id) const {
  const std::optional<JobStatus> ended = parts_.stats.recall(id);
  if (auto retained = ends_.retained(id); retained && (!ended || retained->status == *ended))
    return *retained;
  if (ended != JobStatus::completed) {
    if (auto filed = dlq_.dlq_end(id)) return *filed;  // reason and errors from its entry
  }
  EndRecord end;
  end.id = id;
  if (ended) {
    end.status = *ended;
  } else {
    end.error = "job " + std::to_string(id) + " of queue '" + parts_.name +
                "' ended, but its queue's history no longer says how";
  }
  return end;
}

std::optional<EndRecord> JobQueries::end_of(JobId id) const {
  // The history first: a job whose end is in it may still hold its slot for a moment (its end
  // record, if one is coming, is then on its way); a redriven job runs again under its id, so
  // a live slot comes next, and only then what was retained of an earlier end.
  for (std::uint32_t i = 0; i < parts_.capacity; ++i) {
    const JobSlot& s = parts_.slot(i);
    if (s.id.load(std::memory_order_relaxed) != id) continue;
    const SlotState st = ctl::state(s.ctl.load());
    if (s.id.load(std::memory_order_relaxed) == id &&
        (st == SlotState::waiting || st == SlotState::delayed || st == SlotState::active ||
         st == SlotState::updating))
      return std::nullopt;  // live (a finishing job's end is decided: the history may have it)
  }
  const std::optional<JobStatus> ended = parts_.stats.recall(id);
  if (auto retained = ends_.retained(id); retained && (!ended || retained->status == *ended))
    return retained;
  const JobState st = ended ? JobState{*ended} : state(id);
  if (st.status == JobStatus::waiting || st.status == JobStatus::delayed ||
      st.status == JobStatus::waiting_children || st.status == JobStatus::active)
    return std::nullopt;  // finishing, its end not in the history yet
  if (st.status == JobStatus::dead_lettered) {
    if (auto filed = dlq_.dlq_end(id)) return filed;  // reason and errors from its entry
  }
  EndRecord end;
  end.id = id;
  end.status = st.status;
  if (st.status == JobStatus::unknown)
    end.error = "job " + std::to_string(id) + " is not in queue '" + parts_.name +
                "': never added here, or ended so long ago that the queue's history forgot it";
  return end;  // ended, but not retained: its status only (no result, no errors)
}

}  // namespace rail::detail
