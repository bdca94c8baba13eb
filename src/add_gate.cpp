// AddGate (add_gate.hpp): the registry of adder slots, one per thread that adds, and shutdown's
// wait for the adds in progress.
#include "rail/detail/add_gate.hpp"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <thread>

#include "rail/detail/deadline.hpp"
#include "rail/detail/poll_until.hpp"

namespace rail::detail {
namespace {

/// The slots, newest first. Slots are never freed, so walking the list needs no lock;
/// g_register_mu serializes registration (taking a free slot or pushing a new one).
std::atomic<AdderSlot*> g_slots{nullptr};
std::mutex g_register_mu;

/// take_slot(recyclable): a free slot, or a new one. A slot that is not recyclable (taken by a
/// thread whose thread-local owner is already gone) stays in use for ever.
AdderSlot& take_slot(bool recyclable) {
  const std::lock_guard lock(g_register_mu);
  if (recyclable) {
    // acquire: pairs with take_slot's release push (the slots' fields).
    for (AdderSlot* s = g_slots.load(std::memory_order_acquire); s != nullptr; s = s->next) {
      bool free = false;
      // acquire: pairs with the exiting owner's release (its last writes to the slot first).
      if (s->in_use.compare_exchange_strong(free, true, std::memory_order_acquire)) return *s;
    }
  }
  auto* s = new AdderSlot;  // never freed: a slot outlives its thread for the lock-free walk
  s->in_use.store(true, std::memory_order_relaxed);
  s->next = g_slots.load(std::memory_order_relaxed);
  g_slots.store(s, std::memory_order_release);  // publishes the slot's fields to walkers
  return *s;
}

/// t_owner_gone: this thread's SlotOwner was destroyed (thread exit); a later add (from another
/// thread-local's destructor) must not use the slot it gave back.
thread_local bool t_owner_gone = false;

/// SlotOwner: gives the thread's slot back when the thread exits.
struct SlotOwner {
  AdderSlot& slot;
  explicit SlotOwner(AdderSlot& s) noexcept : slot(s) {}
  ~SlotOwner() {
    t_adder_slot = nullptr;
    t_owner_gone = true;
    slot.engine.store(nullptr, std::memory_order_relaxed);
    // release: the next owner (take_slot's acquire) sees the slot as this thread left it.
    slot.in_use.store(false, std::memory_order_release);
  }
};

}  // namespace

AdderSlot& register_adder_slot() {
  if (t_owner_gone) {  // past this thread's exit: a slot of its own, never recycled
    t_adder_slot = &take_slot(false);
    return *t_adder_slot;
  }
  thread_local SlotOwner owner(take_slot(true));
  t_adder_slot = &owner.slot;
  return owner.slot;
}

bool wait_for_adders(const void* engine, Duration bound) noexcept {
  // The registration orders this heavy fence after any light fence that relied on it (the
  // switch in asymmetric_fence.hpp); engines register when their first queue is declared.
  init_asymmetric_fence();
  heavy_fence();  // after the caller's accepting = false: see the header's Dekker argument
  const auto deadline = steady_deadline(bound);
  // This thread's own add (shutdown from an observer of it) is not waited for: null if it
  // never added.
  const AdderSlot* own = t_adder_slot;
  // acquire: pairs with take_slot's release push.
  for (const AdderSlot* s = g_slots.load(std::memory_order_acquire); s != nullptr; s = s->next) {
    if (s == own) continue;
    auto busy = [&] {
      // acquire: pairs with ~AddScope's release store of the depth.
      if (s->depth.load(std::memory_order_acquire) == 0) return false;
      const void* e = s->engine.load(std::memory_order_relaxed);
      return e == engine || e == kAnyEngine;
    };
    if (!poll_until(
            deadline, [&] { return !busy(); }, std::chrono::microseconds(1),
            std::chrono::microseconds(1000)))
      return false;
  }
  return true;
}

}  // namespace rail::detail
