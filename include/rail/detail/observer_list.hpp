// ObserverList: an engine's event observers. Any number of them, each removable; walked by
// EngineCore::emit on every worker, timer and producer thread that raises an event, without a
// lock and without an allocation.
//
// Guarantee: for_each(f) calls f on the observers added before it began and not removed before
// it began (both in happens-before); and once remove(id) returns, observer `id` is never called
// again. Called outside any observer, remove also waits until no call of it is in progress on
// any thread, then destroys its callable before returning, so the caller may destroy what the
// observer uses the moment remove returns. Called from inside an observer (on any list), remove
// does not wait: a call already in progress on another thread may still be running, and the
// callable is destroyed later, by the next add/remove whose grace period covers it (or the
// destructor).
//
// Algorithm: read-copy-update with two-phase reader counts, the scheme of Linux's sleepable RCU
// (P. McKenney, "Sleepable RCU", LWN 2006). Writers (add, remove: cold, serialised by mu_) build
// a new immutable Snapshot (the live observers' Node pointers, in add order) and publish it with
// one exchange of current_. What it replaced is retired and freed after a grace period, once
// every reader that might have loaded it has left. A reader brackets its walk with an increment
// and a decrement of its thread's cell of the reader count of one of two phases
// (cell.count[phase]). A grace-period step waits for the count of the phase readers are *not*
// entering to be zero, then flips the phase, so new readers never hold up the count a step
// waits for; two consecutive steps have checked both counts, so any reader that entered before
// the retirement has left by then. remove() also flags its node first, so a walk that loaded
// the old snapshot skips it from then on (on this thread: the rest of the current event).
// Reader counts: a thread with an index below Owned (this_thread_index(): unique among live
// threads) counts in a cell of its own, owned_[index], with plain stores (one writer) and a
// light fence; any other thread counts in one of kStripes shared cells, chosen by its stripe,
// with locked read-modify-writes. A locked instruction waits for the store buffer to drain, and
// an event's walk follows the stores that built the event: two of them per event cost more than
// the rest of the walk. The step pays instead, with a heavy fence (asymmetric_fence.hpp).
// Alternatives not taken: std::atomic<std::shared_ptr> (and std::atomic_load of a shared_ptr)
// is a lock in libstdc++ (a spin bit in the pointer; a mutex pool for atomic_load) and makes
// every emitter write one shared reference count; hazard pointers need a record per thread and
// a scan per retirement, and a publication per walk with the same fence.
//
// Invariants:
//   I1  current_ is null (no observer) or a non-empty Snapshot whose nodes are all allocated.
//   I2  A snapshot or node is freed only once two steps completed after it was unlisted
//       (Retired::after + 2 <= steps_), or by the destructor.
//   I3  Each cell's count of a phase is the number of readers inside that entered it there
//       (>= 0: a reader's increment precedes its decrement in the counter's modification order).
//       An owned cell has one writer, the live thread holding its index; every walk leaves the
//       counts it raised as they were, and the index passes from an exited thread to the next
//       through the allocator's mutex (happens-before), so the next holder inherits zeros.
//
// Memory-ordering contract:
//   - add() builds the Node and Snapshot, then current_.exchange (seq_cst; its release half
//     publishes them to the reader's seq_cst load of current_).
//   - Reader in a shared cell: count.fetch_add(seq_cst), then current_.load(seq_cst). Writer:
//     current_.exchange (seq_cst), then, in every later step (under mu_, so strongly happening
//     after it), a heavy fence and the cells' count loads (seq_cst). A reader that loaded the
//     old snapshot read a value before the exchange, so its load, and its increment sequenced
//     before it, precede the exchange in the single total order S, hence precede the step's
//     loads: a load after a seq_cst write in S cannot read a value older than that write
//     ([atomics.order], coherence-ordered before), so the step sees the reader's increment
//     until it reads its decrement.
//   - Reader in an owned cell: count.store(relaxed), light_fence(), current_.load(seq_cst);
//     the step's heavy_fence() comes between the exchange and its count loads. The heavy fence
//     acts as a seq_cst fence on the reader's side too (asymmetric_fence.hpp), so this is the
//     store-buffering pattern with a seq_cst fence on each side: either the step's load reads
//     the reader's increment, or the reader's load of current_ reads the exchange (or later)
//     and never sees the old snapshot.
//   - Reader exit: fetch_sub(release) in a shared cell, store(release) in an owned one. A step
//     passes only on reading zero in every cell, and only a reader's exit (or the initial
//     value) writes zero, so the step's seq_cst load read that exit or a later RMW of its
//     release sequence (shared cells): the reader's last use of the snapshot happens before the
//     free.
//   - One heavy fence per publication: the first step after a publish (or after a flag store
//     of remove's no-memory path) fences before its deciding loads, and every later step's
//     loads follow that fence too (under mu_). A step that reads a non-zero count in a first,
//     unfenced look fails without fencing: failing is always safe.
//   - Node::removed: store seq_cst (before the grace period of the remove that waits) and load
//     seq_cst in the walk. A walk that reads false after the store did not precede it in S (a
//     shared cell), or read it across the fences (an owned cell), so its increment is seen by
//     the step's loads (as above): the wait covers that call. On x86 a seq_cst load is a plain
//     load.
//   - phase_: relaxed both ways. It only steers readers to a count, which decides how soon a
//     step can pass, never whether freeing is safe (the argument above holds whatever phase a
//     reader used).
//
// Threading: for_each from any thread, concurrently and re-entrantly (an observer may emit,
// add, remove); a walk ends on the thread it began on (an observer must not resume on another
// thread, as a migrated fiber would: its exit would write a cell another thread owns). A
// thread's first walk claims its thread index (a process-wide mutex, no allocation: the engine
// claims it when a worker starts, EventBus::prepare_thread). add/remove from any thread; a remove
// outside observers must not be called while holding a lock an observer may wait for (it waits for
// the calls in progress). remove() never waits holding mu_, so a writer inside an observer is never
// stuck behind a waiting remove. Shutdown: the destructor requires no walk in progress (the engine
// joins its threads first). Atom is std::atomic in the engine and DeterministicAtomic in
// tests/observers_test.cpp; Owned is 64 in the engine (threads beyond it share the striped cells),
// smaller in tests that make threads share.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <thread>
#include <utility>
#include <vector>

#include "rail/detail/asymmetric_fence.hpp"
#include "rail/detail/striped_counter.hpp"
#include "rail/detail/thread_index.hpp"

namespace rail::detail {

template <class Fn, template <class> class Atom = std::atomic, std::size_t Owned = 64>
class BasicObserverList {
 public:
  /// Shared reader cells, for threads without an owned one: a thread's enter and exit touch only
  /// its stripe's line.
  static constexpr std::size_t kStripes = 16;
  static_assert((kStripes & (kStripes - 1)) == 0, "kStripes must be a power of two");

  BasicObserverList() noexcept { init_asymmetric_fence(); }  // before any walk's light fence
  BasicObserverList(const BasicObserverList&) = delete;
  BasicObserverList& operator=(const BasicObserverList&) = delete;

  ~BasicObserverList() {
    // No reader is left (see Shutdown): free what is listed and what waits for a grace period.
    if (const Snapshot* s = current_.load(std::memory_order_relaxed)) {
      for (Node* n : s->nodes)
        delete n;
      delete s;
    }
    // retired_'s entries free themselves (Retired owns what it points to).
  }

  /// any(): some observer is listed. relaxed: a hint for skipping an event's construction; a
  /// walk re-loads current_ in order.
  [[nodiscard]] bool any() const noexcept {
    return current_.load(std::memory_order_relaxed) != nullptr;
  }

  /// inside_walk(): the calling thread is inside for_each of some list (an observer's call).
  [[nodiscard]] static bool inside_walk() noexcept { return walk_depth() != 0; }

  /// for_each(f): f(fn) for every listed observer, in add order. f must not throw (the engine's
  /// f catches what an observer throws). Lock-free, allocation-free.
  template <class F>
  void for_each(F&& f) const noexcept {
    if (!any()) return;
    const std::uint32_t thread = this_thread_index();
    const bool owned = thread < Owned;
    Cell& cell = owned ? owned_[thread] : shared_[this_thread_stripe() & (kStripes - 1)];
    const unsigned phase = phase_.load(std::memory_order_relaxed) & 1u;  // see the contract
    Atom<std::uint32_t>& count = cell.count[phase];
    if (owned) {
      // relaxed: this thread is the cell's one writer; light_fence() keeps the store before
      // the load of current_ below, and the step's heavy fence does the rest (see the contract).
      count.store(count.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      light_fence();
    } else {
      // seq_cst, with the load below: see the contract (the grace period sees this reader).
      count.fetch_add(1, std::memory_order_seq_cst);
    }
    struct Leave {
      Atom<std::uint32_t>& count;
      bool owned;
      ~Leave() {
        --walk_depth();
        // release: our last read of the snapshot happens before the step that reads this.
        if (owned) {
          count.store(count.load(std::memory_order_relaxed) - 1, std::memory_order_release);
        } else {
          count.fetch_sub(1, std::memory_order_release);
        }
      }
    } leave{count, owned};
    ++walk_depth();
    const Snapshot* s = current_.load(std::memory_order_seq_cst);
    if (s == nullptr) return;
    for (Node* n : s->nodes) {
      // seq_cst: see the contract (a call that reads false is covered by remove's wait).
      if (n->removed.load(std::memory_order_seq_cst)) continue;
      f(n->fn);
    }
  }

  /// add(fn): lists fn after the others; returns its id (never 0). Strong guarantee: on
  /// bad_alloc nothing changed. Never waits for readers.
  std::uint64_t add(Fn fn) {
    std::vector<Retired> dead;
    std::uint64_t id;
    {
      std::lock_guard lock(mu_);
      auto node = std::make_unique<Node>(next_id_, std::move(fn));
      const Snapshot* old = current_.load(std::memory_order_relaxed);  // writers hold mu_
      auto next = std::make_unique<Snapshot>();
      next->nodes.reserve((old ? old->nodes.size() : 0) + 1);
      if (old)
        for (Node* n : old->nodes)
          if (!n->removed.load(std::memory_order_relaxed)) next->nodes.push_back(n);
      next->nodes.push_back(node.get());
      retired_.reserve(retired_.size() + 1 + (old ? old->nodes.size() : 0));  // last throw
      id = next_id_++;
      node.release();
      publish(next.release(), old);
      advance(dead);
    }
    return id;  // `dead` is destroyed here, outside mu_: a callable's destructor may re-enter
  }

  /// remove(id): unlists observer `id`; false if no listed observer has that id. See the
  /// Guarantee for when it waits. Never throws: if no memory is left for the smaller snapshot,
  /// the node stays listed but flagged (never called) until a later add/remove drops it.
  bool remove(std::uint64_t id) noexcept {
    std::vector<Retired> dead;
    Node* mine = nullptr;
    std::uint64_t target = 0;
    const bool wait = !inside_walk();
    {
      std::lock_guard lock(mu_);
      const Snapshot* old = current_.load(std::memory_order_relaxed);
      if (old == nullptr) return false;
      const auto it = std::find_if(old->nodes.begin(), old->nodes.end(), [&](const Node* n) {
        return n->id == id && !n->removed.load(std::memory_order_relaxed);
      });
      if (it == old->nodes.end()) return false;
      Node* const node = *it;
      // seq_cst: see the contract; from here on no walk starts a call of it.
      node->removed.store(true, std::memory_order_seq_cst);
      fenced_ = false;  // the next step fences after this store (kept if nothing is published)
      try {
        std::unique_ptr<Snapshot> next;
        if (old->nodes.size() > 1) {
          next = std::make_unique<Snapshot>();
          next->nodes.reserve(old->nodes.size() - 1);
          for (Node* n : old->nodes)
            if (!n->removed.load(std::memory_order_relaxed)) next->nodes.push_back(n);
          if (next->nodes.empty()) next.reset();
        }
        retired_.reserve(retired_.size() + 1 + old->nodes.size());
        publish(next.release(), old, wait ? node : nullptr);
        if (wait) mine = node;  // freed by us once the grace period passed
      } catch (const std::bad_alloc&) {
        // Listed but flagged: the next add/remove that can allocate drops and retires it.
      }
      target = steps_ + 2;
      advance(dead);
    }
    dead.clear();  // outside mu_
    if (!wait) return true;
    // Wait for a grace period without holding mu_ (an observer may be adding or removing),
    // stepping it ourselves: steps need someone to run them.
    for (unsigned round = 0;; ++round) {
      {
        std::lock_guard lock(mu_);
        while (steps_ < target && try_step()) {
        }
        advance(dead);
        if (steps_ >= target) break;
      }
      dead.clear();
      backoff(round);
    }
    dead.clear();
    delete mine;  // no walk can reach it: its callable is destroyed before we return
    return true;
  }

  /// size(): listed observers (cold; under mu_).
  [[nodiscard]] std::size_t size() const {
    std::lock_guard lock(mu_);
    const Snapshot* s = current_.load(std::memory_order_relaxed);
    if (!s) return 0;
    return static_cast<std::size_t>(std::count_if(s->nodes.begin(), s->nodes.end(), [](Node* n) {
      return !n->removed.load(std::memory_order_relaxed);
    }));
  }

 private:
  struct Node {
    Node(std::uint64_t i, Fn f) : id(i), fn(std::move(f)) {}
    const std::uint64_t id;
    Fn fn;
    Atom<bool> removed{false};
  };
  struct Snapshot {
    std::vector<Node*> nodes;  // never empty (I1)
  };
  /// Retired: a snapshot or a node unlisted when steps_ was `after` (I2). A node removed by a
  /// waiting remove() is not here: that remove frees it itself.
  struct Retired {
    std::uint64_t after = 0;
    const Snapshot* snapshot = nullptr;
    Node* node = nullptr;
    Retired(std::uint64_t a, const Snapshot* s, Node* n) noexcept
        : after(a), snapshot(s), node(n) {}
    Retired(Retired&& o) noexcept
        : after(o.after),
          snapshot(std::exchange(o.snapshot, nullptr)),
          node(std::exchange(o.node, nullptr)) {}
    Retired& operator=(Retired&& o) noexcept {
      std::swap(after, o.after);
      std::swap(snapshot, o.snapshot);
      std::swap(node, o.node);
      return *this;
    }
    ~Retired() {
      delete snapshot;
      delete node;
    }
  };
  struct alignas(64) Cell {  // its own line: written by its threads on every event
    Atom<std::uint32_t> count[2] = {};
  };

  /// publish(next, old, keep): under mu_, with room reserved in retired_: lists `next` (null:
  /// no observer), then retires `old` and every flagged node `next` dropped, except `keep`.
  void publish(const Snapshot* next, const Snapshot* old, const Node* keep = nullptr) noexcept {
    // seq_cst: see the contract (publication, and the grace period's starting point).
    current_.exchange(next, std::memory_order_seq_cst);
    fenced_ = false;  // the next step fences after this exchange
    if (old == nullptr) return;
    retired_.emplace_back(steps_, old, nullptr);
    // A flagged node is never copied into a new snapshot, so each is retired exactly once: by
    // the first publish after its flag.
    for (Node* n : old->nodes)
      if (n != keep && n->removed.load(std::memory_order_relaxed))
        retired_.emplace_back(steps_, nullptr, n);
  }

  /// try_step(): under mu_: one half of a grace period, if the count of the phase readers are
  /// not entering is zero (else false: readers are still inside).
  bool try_step() noexcept {
    const unsigned phase = phase_.load(std::memory_order_relaxed) & 1u;  // writers hold mu_
    const auto inside = [&](const Cell& c) {
      return c.count[phase ^ 1u].load(std::memory_order_seq_cst) != 0;
    };
    const auto any_inside = [&] {
      return std::any_of(owned_.begin(), owned_.end(), inside) ||
             std::any_of(shared_.begin(), shared_.end(), inside);
    };
    if (!fenced_) {
      // Readers still inside: the step fails either way, without the fence's cost.
      if (any_inside()) return false;
      // Between the publication and the deciding loads: the owned cells' readers fence only
      // lightly (see the contract).
      heavy_fence();
      fenced_ = true;
    }
    if (any_inside()) return false;
    phase_.store(phase ^ 1u, std::memory_order_relaxed);  // steering only: see the contract
    ++steps_;
    return true;
  }

  /// advance(dead): under mu_: runs the steps that can pass without waiting (two at most: a
  /// third would re-check the count the first one did) and moves what is then free into
  /// `dead`, for the caller to destroy after unlocking (a callable's destructor may add or
  /// remove an observer, which takes mu_).
  void advance(std::vector<Retired>& dead) noexcept {
    if (retired_.empty()) return;
    for (int i = 0; i < 2 && try_step(); ++i) {
    }
    const auto free = std::partition(retired_.begin(), retired_.end(),
                                     [&](const Retired& r) { return r.after + 2 > steps_; });
    try {
      dead.reserve(dead.size() + static_cast<std::size_t>(retired_.end() - free));
      for (auto it = free; it != retired_.end(); ++it)
        dead.push_back(std::move(*it));
    } catch (const std::bad_alloc&) {
      // No memory for the list: they are destroyed below, under mu_ (a destructor that adds or
      // removes an observer would deadlock, but only once memory has run out).
    }
    retired_.erase(free, retired_.end());
  }

  static void backoff(unsigned round) noexcept {
    if (round < 64) {
      std::this_thread::yield();
    } else {
      const auto us = std::min<unsigned>(1000, 1u << std::min(10u, (round - 64) / 8));
      std::this_thread::sleep_for(std::chrono::microseconds(us));
    }
  }

  static int& walk_depth() noexcept {
    thread_local int depth = 0;
    return depth;
  }

  Atom<const Snapshot*> current_{nullptr};
  mutable std::array<Cell, Owned> owned_{};      // owned_[i]: the thread holding index i
  mutable std::array<Cell, kStripes> shared_{};  // the other threads', by stripe
  Atom<unsigned> phase_{0};
  mutable std::mutex mu_;
  std::uint64_t steps_ = 0;       // completed grace-period steps; under mu_
  bool fenced_ = true;            // a heavy fence followed the last publication; under mu_
  std::uint64_t next_id_ = 1;     // under mu_
  std::vector<Retired> retired_;  // under mu_
};

}  // namespace rail::detail
