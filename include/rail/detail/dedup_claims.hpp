// DedupClaims: a queue's deduplication ids — which live job holds each id (the queue's DedupSet
// window, built on the first add that carries an id), and the keep gate of each slot through
// which an add may be kept for after the running job that holds its id (keep_last_if_active).
//
// Guarantee: at most one job holds an id at a time; an id is let go exactly once per holding
// (at its job's end, or when its ttl lapses after a job that ran), and an add kept for after a
// job takes the id over from it in place, so no newer add can make a job that the kept add would
// then follow.
//
// An id held until its job's end (no ttl) is a claim tied to the job (DedupSet::Tie::owner): it
// is live while the window's liveness hook (alive) finds the job in the slot its entry names
// with no end decided (JobSlot::end_kind). So the job's end lets the id go by the store that
// decides it (JobEnds::note), and the worker that ends a job never touches the window: the next
// claim that meets the entry reclaims it. The claim stores the job's id and a `none` end in its
// slot under the shard lock, before any other claim can see the entry.
//
// The keep gate of a slot whose job holds an id is one atomic word, a hand-off between adds that
// keep a newer add for after the running job and the job's end:
//   open(id)  the job may still get a kept add   (set by the holder when the job claims)
//   kept(id)  an add is kept for after it        (an adder's CAS from open, once)
//   0         closed: the job has ended           (the holder's exchange in release_at_end)
// So exactly one of two things happens: the adder's CAS comes first, and the ending job sees
// kept(id), holds its id for the kept add and runs it; or the exchange comes first, the CAS fails,
// and the add is not kept and finds the id released (or held for a ttl). The id in the word makes
// the CAS fail on a slot reused since the adder looked (ids are never reused). Else a kept add
// whose job let the id go first could run after a newer add's job
// (PeerKeepLast.TheNewestAddIsNeverLostWhileWorkersRunTheKeptJob pins it).
//
// A keep_last_if_active id is held while its job runs, past its ttl (BullMQ: no second job while
// one is active): its claim is watched (Tie::past_expiry), and the liveness hook reads the slot
// its entry names: the id stays live while that slot is `active` with the entry's owner in it.
// The hook reads the same word whose CAS activates the job, so there is no moment between the
// job's activation and its hold: an add that comes after the CAS, by the word's modification
// order, finds the id live and is kept; one before it makes a job beside a job that was still
// waiting, as any add after a lapsed ttl does
// (PeerKeepLast.AnAddMadeOnceItsJobIsActiveIsKeptThoughTheTtlLapsedWhileItWaited pins it).
//
// Memory ordering: the window is published by LazyOwned (release/acquire); the DedupSet orders
// its own entries (dedup_set.hpp). A gate's open store is the holder's, relaxed: it travels with
// the job's publication (a ring push or a ctl release). The adder's CAS and the holder's exchange
// are acq_rel RMWs of one word: one total order decides between them.
// Threading: claims from any adding thread; release_at_end by the job's holder; keep_while_active
// under the caller's lock on its kept adds.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "rail/add_receipt.hpp"
#include "rail/detail/deadline.hpp"
#include "rail/detail/dedup_set.hpp"
#include "rail/detail/flow_parts.hpp"
#include "rail/detail/lazy_owned.hpp"
#include "rail/options.hpp"

namespace rail::detail {

class DedupClaims {
 public:
  explicit DedupClaims(FlowParts& parts) noexcept : parts_(parts) {}
  DedupClaims(const DedupClaims&) = delete;
  DedupClaims& operator=(const DedupClaims&) = delete;

  /// window(): the queue's dedup window, built on first use (cold; may throw bad_alloc).
  DedupSet& window();

  /// claim(idx, o, now, successor_of): claims id o.dedup.id for a new job in slot idx (its job
  /// id is drawn only if the claim is inserted), taking it over from job `successor_of` if that
  /// one holds it (a kept add after its ended job).
  DedupSet::Claim claim(std::uint32_t idx, const JobOptions& o, std::int64_t now,
                        JobId successor_of = 0);
  /// live_claim(o, now): the claim of a live job holding o.dedup.id, if any (a full queue's add
  /// checks it: a duplicate is a duplicate whether or not there is room).
  std::optional<DedupSet::Claim> live_claim(const JobOptions& o, std::int64_t now);
  /// window_end(o, now): when a window for o's id opened (or restarted) at `now` ends: now +
  /// ttl, or the job's due time + ttl with ttl_from_due; kNoExpiry without a ttl.
  static std::int64_t window_end(const JobOptions& o, std::int64_t now) noexcept {
    if (!o.dedup.ttl) return DedupSet::kNoExpiry;
    const std::int64_t from = o.dedup.ttl_from_due ? saturating_add(now, o.delay) : now;
    return saturating_add(from, *o.dedup.ttl);
  }
  /// hold(idx, o): slot idx's new job (filled, not yet published) now holds o.dedup.id, claimed
  /// by claim(idx, o, ...), which made the allocations this needs.
  void hold(std::uint32_t idx, const JobOptions& o) noexcept;
  /// reclaim(idx, id, key, now): a redriven job `id` in slot idx holds id `key` again: still its
  /// own (a ttl from its first run), or free and claimed now (until it ends). Held by another job
  /// since: this one runs without it. May throw (bad_alloc) before any change.
  void reclaim(std::uint32_t idx, JobId id, const std::string& key, std::int64_t now);
  /// refusal(claim, o): the add's status when the window refused the id (full); throws
  /// Error(invalid_option) when the id is too long; nullopt for a duplicate of a live job.
  static std::optional<AddReceipt> refusal(const DedupSet::Claim& claim, const JobOptions& o);

  /// release_at_end(s, cancelled): the job in s (held by the caller) is ending, its end not yet
  /// decided (JobEnds::note decides it next): closes its keep gate. An id held until the end
  /// goes when the end is decided (it is tied to the job); a ttl keeps merging adds of a job
  /// that ran, but a cancelled job never ran: its id is free again at once, as BullMQ removes a
  /// cancelled job's key. True when an add was kept for after it: the id stays held for that
  /// add (run_deferred).
  bool release_at_end(const JobSlot& s, bool cancelled) noexcept {
    if (s.dedup == DedupHold::none) return false;
    const JobId id = s.id.load(std::memory_order_relaxed);
    // acq_rel: one total order with an adder's CAS (keep_while_active).
    // kept: keep_while_active held the id for the kept add, which takes it over.
    if (gate(parts_.index_of(s)).exchange(0, std::memory_order_acq_rel) == kept(id)) return true;
    if (cancelled && s.dedup != DedupHold::until_end)
      // Owners are job ids, unique: release_claim is exact.
      (void)window_.get()->set.release_claim(s.extra->dedup_key, id);
    return false;
  }

  /// keep_while_active(idx, owner, key, keep, undo): under the caller's lock on its kept adds,
  /// keeps an add for after job `owner` if it is running in slot idx and no end closed its gate:
  /// calls keep() (which records the add), then moves the gate from open to kept, and holds id
  /// `key` past the job's ttl and past its end, until the kept add takes it over
  /// (DedupSet::hold_for_successor): else a newer add could make a job, once the ttl lapsed or
  /// the job's end let a tied id go, that the older kept add would follow. The gate moved first,
  /// so the job's end hands the id over (release_at_end sees kept). False: nothing kept (keep()
  /// undone by `undo`).
  template <class Keep, class Undo>
  bool keep_while_active(std::uint32_t idx, JobId owner, std::string_view key, Keep&& keep,
                         Undo&& undo) {
    const JobSlot& s = parts_.slot(idx);
    const SlotState st = ctl::state(s.ctl.load());
    if ((st != SlotState::active && st != SlotState::finishing) ||
        s.id.load(std::memory_order_relaxed) != owner)
      return false;  // waiting or delayed: a duplicate merges as usual; or it ended
    keep();
    std::uint64_t expected = open(owner);
    // acq_rel: one total order with the holder's exchange in release_at_end (see above).
    if (!gate(idx).compare_exchange_strong(expected, kept(owner), std::memory_order_acq_rel,
                                           std::memory_order_acquire)) {
      undo();
      return false;
    }
    if (window().hold_for_successor(key, owner)) return true;
    // The ttl lapsed, or the job's end let its tied id go, and another add took the id since
    // the caller's claim: that add is newer than the job, so this one merges into it instead.
    // Reopen the gate unless the job's end closed it meanwhile (then run_deferred finds nothing
    // kept: the id is not the job's).
    undo();
    expected = kept(owner);
    (void)gate(idx).compare_exchange_strong(expected, open(owner), std::memory_order_acq_rel,
                                            std::memory_order_acquire);
    return false;
  }

 private:
  /// alive(parts, owner, idx, tie): the window's liveness hook (DedupSet::Alive). Tie::owner:
  /// job `owner` is in slot idx with no end decided. Tie::past_expiry: job `owner` is active in
  /// slot idx: taken for a start, its handler about to run or running (a start its downstream
  /// then refuses, or that deliver() drops unstarted or puts back at shutdown, counts until it
  /// leaves `active`: options.hpp says so); its expiry goes on meanwhile (an extend still moves
  /// it) and counts again once the job leaves `active` (finish, lapse, a refused start).
  static bool alive(const void* parts, std::uint64_t owner, std::uint32_t idx,
                    DedupSet::Tie tie) noexcept;
  /// hold_for(o): how a job added with options o holds its id (JobSlot::dedup).
  static DedupHold hold_for(const JobOptions& o) noexcept {
    if (!o.dedup.ttl) return DedupHold::until_end;
    return o.dedup.keep_last_if_active ? DedupHold::ttl_unless_active : DedupHold::with_ttl;
  }
  /// tie_for(hold): the window claim's tie for a job that holds its id so.
  static DedupSet::Tie tie_for(DedupHold hold) noexcept {
    return hold == DedupHold::until_end           ? DedupSet::Tie::owner
           : hold == DedupHold::ttl_unless_active ? DedupSet::Tie::past_expiry
                                                  : DedupSet::Tie::none;
  }
  /// shards_for(ids): the window's shards: 64, fewer for a small window (256 ids a shard or
  /// more), so that the headroom below stays a small share of it.
  static std::size_t shards_for(std::size_t ids) noexcept;
  /// room_for(ids, shards): the DedupSet capacity at which `ids` live ids fit however their
  /// hashes spread. A shard holds at most capacity / shards ids and answers `full` on its own,
  /// while its share of `ids` uniformly hashed ids is binomial (mean ids / shards, standard
  /// deviation sd): sized exactly, the busiest shard fills with a few percent of the window
  /// still free (207 of 4096 adds refused). Each shard gets room for its mean + 6 sd + 8, which
  /// a shard exceeds with odds below 1e-9, so `dedup_full` means the window holds `ids` ids.
  /// Ids chosen to collide in one shard can still fill it (dedup_set.hpp: Hash).
  static std::size_t room_for(std::size_t ids, std::size_t shards) noexcept;
  static constexpr std::uint64_t open(JobId id) noexcept { return id << 1; }
  static constexpr std::uint64_t kept(JobId id) noexcept { return id << 1 | 1; }

  /// Window: the DedupSet and one keep gate per slot, built together. Its set holds `ids` live
  /// ids, whichever shards their hashes pick (room_for).
  struct Window {
    Window(std::size_t ids, const FlowParts& parts) : Window(ids, shards_for(ids), parts) {}
    Window(std::size_t ids, std::size_t shards, const FlowParts& parts);
    DedupSet set;
    std::unique_ptr<std::atomic<std::uint64_t>[]> gates;
  };
  /// gate(idx): slot idx's keep gate (its job holds an id, so the window is built).
  std::atomic<std::uint64_t>& gate(std::uint32_t idx) const noexcept {
    return window_.get()->gates[idx];
  }

  FlowParts& parts_;
  LazyOwned<Window> window_;
};

}  // namespace rail::detail
