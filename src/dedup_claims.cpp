// DedupClaims: see include/rail/detail/dedup_claims.hpp.
#include "rail/detail/dedup_claims.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <utility>

#include "rail/detail/deadline.hpp"
#include "rail/detail/prefetch.hpp"
#include "rail/error.hpp"

namespace rail::detail {

DedupClaims::Window::Window(std::size_t ids, std::size_t shards, const FlowParts& parts)
    : set(room_for(ids, shards), shards),
      gates(std::make_unique<std::atomic<std::uint64_t>[]>(parts.capacity)) {
  set.watch_with(&alive, &parts);  // before LazyOwned publishes the window
}

bool DedupClaims::alive(const void* parts, std::uint64_t owner, std::uint32_t idx,
                        DedupSet::Tie tie) noexcept {
  const auto& p = *static_cast<const FlowParts*>(parts);
  if (idx >= p.capacity) return false;
  const JobSlot& s = p.slot(idx);
  if (tie == DedupSet::Tie::owner) {
    // end_kind first (acquire), then the id: an end_kind of `none` stored for a later job of
    // the slot (init_slot, or a claim's make_owner) was stored after that job's id, so the id
    // read then is not `owner`'s. An end once decided is never undone for the same job, so a
    // job found gone stays gone (DedupSet::Alive), but for a redrive into the same slot, which
    // reclaim() settles.
    return s.ended_as() == EndKind::none && s.id.load(std::memory_order_relaxed) == owner;
  }
  // The word first (acquire), then the id: a word that shows another job active in the slot
  // was published after that job's id was written, so the id read then is not `owner`'s.
  return ctl::state(s.ctl.load()) == SlotState::active &&
         s.id.load(std::memory_order_relaxed) == owner;
}

std::size_t DedupClaims::shards_for(std::size_t ids) noexcept {
  return std::clamp<std::size_t>(std::bit_floor(std::max<std::size_t>(ids / 256, 1)), 1, 64);
}

std::size_t DedupClaims::room_for(std::size_t ids, std::size_t shards) noexcept {
  if (shards == 1) return ids;  // no spread to make room for
  const std::size_t mean = ids / shards + (ids % shards != 0 ? 1 : 0);
  const double p = 1.0 / static_cast<double>(shards);
  const double sd = std::sqrt(static_cast<double>(ids) * p * (1 - p));
  return (mean + static_cast<std::size_t>(std::ceil(6 * sd)) + 8) * shards;
}

DedupSet& DedupClaims::window() {
  return window_
      .get_or_make([&] {
        // Default: room for the queue's jobs and at least 4096 ids, because ids with a ttl
        // outlive their jobs (a small queue's window would otherwise fill at once).
        const std::size_t ids =
            parts_.options.dedup_capacity.value_or(std::max<std::uint32_t>(parts_.capacity, 4096));
        return std::make_unique<Window>(ids, parts_);
      })
      .set;
}

DedupSet::Claim DedupClaims::claim(std::uint32_t idx, const JobOptions& o, std::int64_t now,
                                   JobId successor_of) {
  const std::int64_t expires = window_end(o, now);
  JobSlot& s = parts_.slot(idx);
  // hold() copies the id into the slot's extra record once the claim is made: its allocations
  // come now, so that nothing after the claim throws (a claim made must be held or let go). A
  // warm record with a short id needs none: it is only fetched, so the claim overlaps the fetch
  // (as the keep gate's, which hold() writes too).
  if (s.extra == nullptr || o.dedup.id.size() > std::string().capacity()) {  // folds to a constant
    parts_.extra(s).dedup_key.reserve(o.dedup.id.size());
  } else {
    prefetch_for_write(s.extra);
  }
  DedupSet& ids = window();
  prefetch_for_write(&gate(idx));
  return ids.try_claim(
      o.dedup.id, now, expires,
      [&]() noexcept {
        const JobId id = parts_.core.next_ids(1);
        // Before the claim is seen (the shard lock's release): a claim tied to its job is live
        // only while alive() finds the job in its slot, not ended. The slot is ours (not
        // published), and init_slot stores the same again.
        s.id.store(id, std::memory_order_relaxed);
        s.end_as(EndKind::none);  // after the id: see alive()
        return std::pair<std::uint64_t, std::uint32_t>{id, idx};
      },
      successor_of, tie_for(hold_for(o)));
}

std::optional<DedupSet::Claim> DedupClaims::live_claim(const JobOptions& o, std::int64_t now) {
  auto live = window().find(o.dedup.id, now);
  if (!live) return std::nullopt;
  return DedupSet::Claim{DedupSet::Claim::Result::duplicate, live->first, live->second};
}

void DedupClaims::hold(std::uint32_t idx, const JobOptions& o) noexcept {
  JobSlot& s = parts_.slot(idx);
  s.extra->dedup_key = o.dedup.id;  // claim() made the record and its room: no allocation
  s.dedup = hold_for(o);
  // relaxed: the holder's store, published with the job (publish's release).
  gate(idx).store(open(s.id.load(std::memory_order_relaxed)), std::memory_order_relaxed);
}

void DedupClaims::reclaim(std::uint32_t idx, JobId id, const std::string& key, std::int64_t now) {
  JobSlot& s = parts_.slot(idx);
  SlotExtra& x = parts_.extra(s);
  DedupSet& ids = window();
  x.dedup_key.reserve(key.size());  // the last allocation: nothing below throws
  bool ttl;
  if (auto live = ids.find(key, now)) {
    if (live->first != id) return;  // another job's now: duplicates merge into that one
    // Kept after the first run (a ttl): it expires on its own. Or tied to the job's first run,
    // and this slot was its slot then: the redrive made it look alive again, and it is the
    // redriven job's until its end now. Either way it points at this slot now, so a debounce
    // of the redriven job finds it.
    ttl = ids.tie_of(key, id) != DedupSet::Tie::owner;
    if (!ids.set_value(key, id, idx)) return;  // expired and reclaimed in between
  } else {
    const auto claimed = ids.try_claim(
        key, now, DedupSet::kNoExpiry,
        [&]() noexcept {
          return std::pair<std::uint64_t, std::uint32_t>{id, idx};
        },
        0,
        tie_for(DedupHold::until_end));  // init_slot made it alive
    if (claimed.result != DedupSet::Claim::Result::inserted) return;
    ttl = false;
  }
  x.dedup_key.assign(key);
  s.dedup = ttl ? DedupHold::with_ttl : DedupHold::until_end;
  gate(idx).store(open(id), std::memory_order_relaxed);  // as hold()
}

std::optional<AddReceipt> DedupClaims::refusal(const DedupSet::Claim& claim, const JobOptions& o) {
  using R = DedupSet::Claim::Result;
  if (claim.result == R::full) return AddReceipt{0, AddStatus::dedup_full};
  if (claim.result == R::key_too_long)
    throw Error(ErrorCode::invalid_option, "JobOptions.dedup.id is " +
                                               std::to_string(o.dedup.id.size()) +
                                               " bytes; expected at most 256");
  return std::nullopt;
}

}  // namespace rail::detail
