// AddGate: lets shutdown wait for the adds that got past its "still accepting?" check, so that
// every job an add reports as `added` is in the shutdown report and its waiters are told.
//
// Guarantee: once Engine::shutdown's wait_for_adders(engine, bound) returned true, every add
// (add, add_tracked, add_bulk, redrive) of that engine on another thread either answered
// shutting_down or has published its job, so the report and abandon_unstarted see it. Not
// covered: an add on the shutting-down thread itself (shutdown called from an observer of that
// add: waiting for it would deadlock), and adds still in progress after `bound` (an observer of
// the add that blocks); shutdown then reports without them and the destructor accounts for them.
//
// Algorithm: each thread that adds owns an AdderSlot (registered on its first add, recycled when
// the thread exits, never freed, so a list walk needs no lock). An add (AddScope) stores its
// engine and depth + 1 in its slot, light_fence(), then reads accepting(); shutdown stores
// accepting = false, heavy_fence(), then reads every slot. By the asymmetric fence's Dekker rule
// (asymmetric_fence.hpp) either the add sees false (and answers shutting_down) or shutdown sees
// the slot busy for its engine and waits until the add's end stores the depth back (release,
// paired with shutdown's acquire load, so the add's slot writes are visible to the report).
// Nested adds (an observer of an add that adds) count depth; one to another engine than the
// outer add's marks the slot kAnyEngine, which every engine's shutdown waits for.
//
// Cost per add: a thread-local load, two plain stores to the thread's own cache line and a
// compiler fence (a full fence where membarrier is unavailable); no shared write.
#pragma once

#include <atomic>
#include <cstdint>

#include "rail/clock.hpp"
#include "rail/detail/asymmetric_fence.hpp"

namespace rail::detail {

/// AdderSlot: one thread's adds in progress. alignas: two threads' slots never share a line.
struct alignas(64) AdderSlot {
  /// The engine (EngineCore*) of the add in progress, or kAnyEngine; meaningful while depth > 0.
  std::atomic<const void*> engine{nullptr};
  /// Adds in progress on the owning thread (nesting); written only by that thread.
  std::atomic<std::uint32_t> depth{0};
  /// Owned by a live thread (else free for the next thread's first add).
  std::atomic<bool> in_use{false};
  AdderSlot* next = nullptr;  // the registry's list: written before the slot is published
};

/// kAnyEngine: a slot in nested adds to two engines: every engine's shutdown waits for it.
inline const void* const kAnyEngine = &kAnyEngine;

/// t_adder_slot: this thread's slot, null until its first add (register_adder_slot).
inline constinit thread_local AdderSlot* t_adder_slot = nullptr;

/// register_adder_slot(): takes a slot for this thread (cold: once per thread) and sets
/// t_adder_slot. Throws std::bad_alloc when no memory is left for a new slot.
AdderSlot& register_adder_slot();

/// wait_for_adders(engine, bound): after accepting() turned false, waits until no other thread
/// is inside an add of `engine`, for at most `bound` (real time); false if the bound passed
/// first. Cold: shutdown only.
bool wait_for_adders(const void* engine, Duration bound) noexcept;

/// AddScope: an add in progress on this thread, from before its accepting() check until its job
/// is published (or it answered without one).
class AddScope {
 public:
  explicit AddScope(const void* engine)
      : slot_(t_adder_slot != nullptr ? *t_adder_slot : register_adder_slot()) {
    // relaxed: only this thread writes the slot; the light fence below orders these stores
    // before the caller's accepting() load against shutdown's heavy fence.
    outer_ = slot_.depth.load(std::memory_order_relaxed);
    if (outer_ == 0) {
      slot_.engine.store(engine, std::memory_order_relaxed);
    } else if (slot_.engine.load(std::memory_order_relaxed) != engine) {
      outer_engine_ = slot_.engine.load(std::memory_order_relaxed);
      slot_.engine.store(kAnyEngine, std::memory_order_relaxed);
    }
    slot_.depth.store(outer_ + 1, std::memory_order_relaxed);
    light_fence();
  }
  ~AddScope() {
    if (outer_engine_ != nullptr) slot_.engine.store(outer_engine_, std::memory_order_relaxed);
    // release: shutdown's acquire load that sees the depth back sees the add's slot writes.
    slot_.depth.store(outer_, std::memory_order_release);
  }
  AddScope(const AddScope&) = delete;
  AddScope& operator=(const AddScope&) = delete;

 private:
  AdderSlot& slot_;
  std::uint32_t outer_ = 0;
  const void* outer_engine_ = nullptr;  // set when this nested add marked the slot kAnyEngine
};

}  // namespace rail::detail
