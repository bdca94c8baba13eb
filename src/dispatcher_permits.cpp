// Dispatcher's pushes and pops of ready jobs: into and out of the lanes or the ring, and the
// permits-first pops: a queue whose own downstream limits concurrency takes one of its permits
// before each job (PermitSource, dispatcher.hpp), one job per permit, from its ring (such a
// queue has no lanes), whose entries mark the jobs that need none. See
// include/rail/detail/dispatcher.hpp.
#include "rail/detail/dispatcher.hpp"

namespace rail::detail {

/// next_permitted_job(w, wc, idx): next_job for a worker that took a permit (PermitSource): one
/// job; no batch, as each job needs a permit of its own. The stashes first (a job held back for
/// a pause, or popped before the limit was set: older than the ring's), then the ring. The job
/// carries the permit; without a job it goes back. Another worker is woken when jobs and
/// permits are left for it.
bool Dispatcher::next_permitted_job(std::uint32_t w, WorkerContext& wc,
                                    std::uint32_t& idx) noexcept {
  if (!wc.stash->take(idx)) {
    if (!steal(w, wc, idx) && !ring_->try_pop(idx)) {
      permits_->give_back();
      return false;
    }
    const bool other = (idx & kNamesOther) != 0;  // calls another downstream: needs no permit
    idx = slot_of(idx);
    const bool paused = paused_after_pop();
    if (other || paused) permits_->give_back();
    if (paused) [[unlikely]]
      return hold_back(&wc, w, &idx, 1);
    if (other) return true;
  }
  wc.holds_permit = true;
  // As next_job's batches: a worker that keeps the duty wakes nobody (it comes back at once).
  if (!wc.holds_duty && workers() > 1 && ready_any() && permits_->free_now()) wake_for_ready(true);
  return true;
}

void Dispatcher::push_entries(const std::uint32_t* idx, std::size_t n) noexcept {
  if (lanes_) {
    lanes_->push_chain(idx, n);  // no PermitSource, so no marks
    return;
  }
  if (permits_ != nullptr) [[unlikely]] {
    for (std::size_t i = 0; i < n; ++i)
      if (entry_of(idx[i]) != idx[i]) {  // a marked one: each goes in with its mark
        for (std::size_t k = 0; k < n; ++k)
          ring_->push_back(entry_of(idx[k]));
        return;
      }
  }
  for (std::size_t i = 0; ring_->levels() > 1 && i < n; ++i)
    ring_->push_back(idx[i]);
  if (ring_->levels() == 1) ring_->push_new_bulk(idx, n);
}

void Dispatcher::put_back_entries(const std::uint32_t* idx, std::size_t n) noexcept {
  if (lanes_) {
    lanes_->push_chain(idx, n);
    return;
  }
  for (std::size_t i = 0; i < n; ++i)
    ring_->push_back(entry_of(idx[i]));
}

std::size_t Dispatcher::pop_ready(std::uint32_t* out, std::size_t max, std::uint32_t w) noexcept {
  if (lanes_) return lanes_->pop_bulk(out, max, w);
  const std::size_t n = ring_->try_pop_bulk(out, max);
  if (permits_ != nullptr) [[unlikely]]  // a limit lifted: its entries may carry the mark
    for (std::size_t i = 0; i < n; ++i)
      out[i] = slot_of(out[i]);
  return n;
}

/// pop_inline(wc, idx): the inline runner's pop: a ready job, with a permit when the queue's
/// downstream limits concurrency (as next_job); false when there is none or no permit.
bool Dispatcher::pop_inline(WorkerContext& wc, std::uint32_t& idx) noexcept {
  if (permits_ != nullptr && !ready_any()) return false;  // as next_job
  const PermitSource::Take take = permits_ ? permits_->take() : PermitSource::Take::unlimited;
  if (take == PermitSource::Take::refused) {
    // As next_job: the head of the line may need no permit of ours.
    if (!ring_->try_pop_if(idx, [](std::uint32_t e) { return (e & kNamesOther) != 0; }))
      return false;
    idx = slot_of(idx);
    return true;
  }
  if (!ring_->try_pop(idx)) {
    if (take == PermitSource::Take::taken) permits_->give_back();
    return false;
  }
  wc.holds_permit = take == PermitSource::Take::taken && (idx & kNamesOther) == 0;
  if (take == PermitSource::Take::taken && !wc.holds_permit) permits_->give_back();
  idx = slot_of(idx);
  return true;
}

}  // namespace rail::detail
