// QueueImpl's merges of a duplicate add into the live job that holds its dedup id: merge,
// debounce or replace a delayed job's payload, or keep the add for after the running job. The
// contract is in include/rail/detail/queue_impl.hpp; the dedup semantics in dedup_claims.hpp.
#include <algorithm>

#include "rail/detail/queue_impl.hpp"

namespace rail::detail {

AddReceipt QueueImpl::merge_duplicate(const DedupSet::Claim& claim, std::string_view job_name,
                                      void* data, const JobOptions& o, std::int64_t now,
                                      AddFrom from, std::shared_ptr<EndWaiter>* watch) {
  // A kept add finds the id taken by another job only if that job was added after the kept
  // add's own job let the id go (a ttl that lapsed), that is, by a newer add: it merges into
  // that one. Kept again or replacing, it would run after newer data, or overwrite an add kept
  // after it.
  if (from == AddFrom::kept) return note_duplicate(claim.owner, job_name, o, now, false);
  if (o.dedup.keep_last_if_active) {
    if (keep_last(claim, job_name, data, o))
      return note_duplicate(claim.owner, job_name, o, now, false, AddStatus::kept);
    // The kept job ended between the claim and the check (its id released, or held for its
    // ttl): one more try adds this as a new job, or merges it within the ttl, instead of
    // merging it into a job that will not run again.
    if (from == AddFrom::producer && !still_queued(claim))
      return add_one(job_name, data, o, AddFrom::producer_again, 0, watch);
  }
  const bool replaced = o.dedup.mode != DedupMode::merge && try_replace(claim, data, o, now);
  if (o.dedup.extend && !replaced)  // a replace restarted the window itself
    (void)claims().window().set_expiry(o.dedup.id, claim.owner, DedupClaims::window_end(o, now));
  return note_duplicate(claim.owner, job_name, o, now, replaced);
}

/// try_replace: while the kept job is still delayed, replace its payload; debounce also restarts
/// its delay (the timer re-arms lazily: the timer port sees due_ns moved and reschedules),
/// replace keeps it.
bool QueueImpl::try_replace(const DedupSet::Claim& claim, void* data, const JobOptions& o,
                            std::int64_t now) {
  const auto idx = static_cast<std::uint32_t>(claim.value);
  if (idx >= capacity()) return false;
  JobSlot& s = slot(idx);
  const std::uint64_t c = s.ctl.load();
  // The id is read after the word: if begin_update's CAS against that word succeeds, the slot
  // was not reused in between, so the id belongs to the job it takes.
  if (s.id.load(std::memory_order_relaxed) != claim.owner) return false;
  // Fails unless the job is still delayed and no stale handler of it still reads the payload:
  // the add then merges as a plain duplicate instead of writing under a reader.
  if (!s.ctl.begin_update(c)) return false;
  ops_.replace(payload(idx), data);  // any payload: see payload.hpp
  bool later = false;
  if (o.dedup.mode == DedupMode::debounce) {
    const std::int64_t before = s.due_ns.load(std::memory_order_relaxed);
    const std::int64_t due = std::max(before, saturating_add(now, o.delay));
    s.due_ns.store(due, std::memory_order_relaxed);
    later = due > before;
    // Held on the wheel for its downstream, it now waits for its debounce: delayed (into that
    // gauge before out of `waiting`: counts() over-counts, never under).
    if (later && s.take_mark(JobSlot::kHeld)) {
      stats().add(kToDelayed);
      stats().add(kFromReady);
    }
  }
  if (o.dedup.ttl && (o.dedup.mode == DedupMode::debounce || o.dedup.extend))
    (void)claims().window().set_expiry(o.dedup.id, claim.owner, DedupClaims::window_end(o, now));
  s.ctl.end_update();
  // A debounced job no longer waits for its downstream's token: if it led the jobs waiting for
  // it, another leads (else the rest wait out the debounce:
  // DownstreamWakeups.ALeaderDebouncedLaterStepsDown pins it).
  if (later) links().stepped_aside(claim.owner);
  return true;
}

/// still_queued(claim): the claim's job is waiting or delayed (not running, not ended).
bool QueueImpl::still_queued(const DedupSet::Claim& claim) const noexcept {
  const auto idx = static_cast<std::uint32_t>(claim.value);
  if (idx >= capacity()) return false;
  const SlotState st = ctl::state(slot(idx).ctl.load());
  return (st == SlotState::waiting || st == SlotState::delayed || st == SlotState::updating) &&
         slot(idx).id.load(std::memory_order_relaxed) == claim.owner;
}

/// keep_last(claim, ...): the kept job runs: keep this add (the newest wins) to add after it.
bool QueueImpl::keep_last(const DedupSet::Claim& claim, std::string_view job_name, void* data,
                          const JobOptions& o) {
  const auto idx = static_cast<std::uint32_t>(claim.value);
  if (idx >= capacity()) return false;
  return kept_.keep(claim.owner, job_name, data, o, [&](auto&& keep, auto&& undo) {
    return claims().keep_while_active(idx, claim.owner, o.dedup.id, keep, undo);
  });
}

}  // namespace rail::detail
