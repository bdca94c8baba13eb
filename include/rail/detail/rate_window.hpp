// RateWindow: a downstream's sliding-window rate: at most `max` starts in any window of `per`,
// in every window including the first (BullMQ's limiter {max, duration} as its users read it).
// It keeps the times of the last `max` starts; a start is allowed once the start `max` before it
// is `per` old. DownstreamLimits owns it (one per rate configuration of kind window) and its
// configuration word (`issued`), whose kClosed / kPending protocol it shares with the bucket.
//
// Guarantee: for admitted starts with clock readings r, any half-open window [s, s + per) holds
// at most `max` of them, whatever the interleaving of threads and however stale their readings.
// A refused take is told the exact time to come back: the start `max` before it plus `per` (a
// take at it succeeds if no one took that place first; 1 ns earlier fails). Lock-free: a thread
// stalled anywhere never stops another from taking.
//
// Algorithm (a sliding-window log over a ring of 2W slots, W = max): the word N counts the
// starts of this configuration; start n records its time T(n) in slot n % 2W. A take at `now` as
// start n reads N = n, then T(n - W) (slot (n - W) % 2W) and its own slot, then N again: if N
// moved, the slots may belong to later starts, and it retries. Its own slot holds T(n - 2W), or
// T(n) if another thread already claimed start n and has not moved N yet: records are monotone
// in n and T(n) >= T(n - W) + per > T(n - W) >= T(n - 2W), so the slot holds a claim exactly
// when it is greater than T(n - W); then the take helps move N and retries. It is refused if
// now < T(n - W) + per. Else it records T(n) = max(now, T(n - 1)) with one CAS on its slot from
// the T(n - 2W) it read (claiming start n), then moves N from n to n + 1 (a helper may have).
// A slot's record only grows (each write is 2W starts later), so a CAS from a record read
// earlier fails once anyone claimed the slot since: no ABA. For admitted starts a < b with
// b - a >= W: r(b) >= T(b - W) + per >= T(a) + per >= r(a) + per: max + 1 admitted starts never
// fit in a window of `per` (any max + 1 indices span W).
//
// A rate change (DownstreamLimits::set_rate) closes this configuration's word at its final count
// n, so no start n or later is admitted here (a claim of start n whose move of N meets kClosed is
// not admitted: its taker retries on the successor; its record sits in slot n % 2W, which no
// carry reads). A window successor carries the last W' of these records (carry_from): its own
// starts -W'..-1, with "long ago" before them; a predecessor's own starts below 0 are those it
// carried (changes within one window chain their records). A record older than the 2W this ring
// keeps is replaced by the oldest it keeps (a later time: stricter, never looser). Each successor
// slot is written once, by CAS from kUninit, so helpers that carry at once agree on what was
// written, and the successor's word is started only after every slot was written.
//
// Memory ordering: a claim's slot CAS is acq_rel and N's CAS acq_rel; N and slots are loaded
// acquire. A thread that reads N = n (acquire) sees the records of every start below n: each
// was written before N moved past it, by its claimer, or read (acquire) by the helper that moved
// N. The carried slots are published by the release CAS that starts the successor's word: its
// helper wrote each slot or read it (acquire) as another helper wrote it (release).
//
// Bounds: W <= RateLimit::kMaxWindowStarts (2^20; two 8-byte slots a start: 16 MiB at most;
// rail::validate(DownstreamOptions) refuses more). A reading below kLongAgo + 2 is recorded as
// kLongAgo + 2.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>

#include "rail/detail/deadline.hpp"

namespace rail::detail {

template <template <class> class Atom = std::atomic>
class BasicRateWindow {
 public:
  /// kClosed: the bit DownstreamLimits sets on a replaced configuration's word.
  static constexpr std::int64_t kClosed = std::int64_t{1} << 62;

  /// Step: what a take (or a look) found: taken (a look: would be), refused until `until_ns`, or
  /// changed (the word moved: the caller reloads it and its configuration).
  struct Step {
    enum class Kind : std::uint8_t { taken, refused, changed };
    Kind kind;
    std::int64_t until_ns;
  };

  /// BasicRateWindow(max, per_ns, carried): a window of `max` starts per `per_ns`. Without
  /// `carried` it starts empty (no start yet); with it, its slots wait for carry_from().
  BasicRateWindow(std::uint64_t max, std::int64_t per_ns, bool carried)
      : size_(max),
        per_ns_(per_ns),
        carried_(carried),
        slots_(std::make_unique<Atom<std::int64_t>[]>(2 * max)) {
    for (std::uint64_t i = 0; i < 2 * size_; ++i)  // published with the configuration
      slots_[i].store(carried ? kUninit : kLongAgo, std::memory_order_relaxed);
  }
  BasicRateWindow(const BasicRateWindow&) = delete;
  BasicRateWindow& operator=(const BasicRateWindow&) = delete;

  /// step<kTake>(issued, n, now): start n (the word read n, neither kPending nor closed) at now.
  template <bool kTake>
  Step step(Atom<std::int64_t>& issued, std::int64_t n, std::int64_t now) noexcept {
    const auto un = static_cast<std::uint64_t>(n);
    // acquire, all: the records read are ones written before N moved past them.
    const std::int64_t older = at(un - size_).load(std::memory_order_acquire);  // T(n - W)
    Atom<std::int64_t>& own = at(un);
    std::int64_t v = own.load(std::memory_order_acquire);  // T(n - 2W), or start n's claim
    // N still n: no start n + W or later wrote the slots read (each waits for N to reach it).
    if (issued.load(std::memory_order_acquire) != n) return {Step::Kind::changed, 0};
    if (v > older) {
      // Start n is claimed and N not moved yet: move it (acq_rel: publishes the record we read
      // to whoever reads N next); a failure means someone else moved or closed it.
      issued.compare_exchange_strong(n, n + 1, std::memory_order_acq_rel,
                                     std::memory_order_acquire);
      return {Step::Kind::changed, 0};
    }
    const std::int64_t due = saturating_add(older, std::chrono::nanoseconds{per_ns_});
    if (now < due) return {Step::Kind::refused, due};
    if constexpr (!kTake) return {Step::Kind::taken, 0};
    // T(n) = max(now, T(n - 1)): records monotone in n.
    const std::int64_t prev = at(un - 1).load(std::memory_order_acquire);
    const std::int64_t record = std::max({now, prev, kLongAgo + 2});
    // acq_rel: the release publishes the record to the thread that moves N past it.
    if (!own.compare_exchange_strong(v, record, std::memory_order_acq_rel,
                                     std::memory_order_acquire))
      return {Step::Kind::changed, 0};  // someone claimed start n first
    std::int64_t expected = n;
    if (issued.compare_exchange_strong(expected, n + 1, std::memory_order_acq_rel,
                                       std::memory_order_acquire))
      return {Step::Kind::taken, 0};
    // A helper moved N past n (our start counts), or a rate change closed the word at n (it does
    // not: the successor decides).
    if ((expected & ~kClosed) > n) return {Step::Kind::taken, 0};
    return {Step::Kind::changed, 0};
  }

  /// carry_from(old, last): this configuration replaces `old` (a window), closed at `last`
  /// starts: its starts -W..-1 are old's last W. Idempotent: every helper writes the same slots
  /// by CAS from kUninit, and the first value written stays.
  void carry_from(const BasicRateWindow& old, std::int64_t last) noexcept {
    const auto w = static_cast<std::int64_t>(size_);
    for (std::int64_t j = -2 * w; j < 0; ++j) {  // this configuration's start j
      std::int64_t record = kLongAgo;
      const std::int64_t k = last + j;  // old's start
      if (j >= -w && (k >= 0 || old.carried_)) {
        // Old's ring holds its starts last - 2W_old .. last - 1 (the first of them may show a
        // refused claim of start `last`: later, so stricter); an older one is replaced by the
        // oldest of those (stricter too). Below 0 they are what old carried.
        const std::int64_t kept = std::max(k, last - 2 * static_cast<std::int64_t>(old.size_));
        record = old.at(static_cast<std::uint64_t>(kept)).load(std::memory_order_acquire);
      }  // else a start before a fresh old's first: none
      std::int64_t expected = kUninit;
      // acq_rel (failure acquire): the helper that starts the word publishes every slot, those
      // written by other helpers included, which it read here (see the ordering contract).
      at(static_cast<std::uint64_t>(j))
          .compare_exchange_strong(expected, record, std::memory_order_acq_rel,
                                   std::memory_order_acquire);
    }
  }

  /// available(n, now): starts a take could make at now given N = n (a figure: the records are
  /// read one by one, not at one instant). Records grow with n: a binary search.
  [[nodiscard]] std::uint64_t available(std::int64_t n, std::int64_t now) const noexcept {
    // The k-th oldest of the last W records is start n - W + k; count those `per` old at now.
    std::uint64_t lo = 0, hi = size_;
    while (lo < hi) {
      const std::uint64_t mid = lo + (hi - lo) / 2;
      const std::int64_t t =
          at(static_cast<std::uint64_t>(n) - size_ + mid).load(std::memory_order_acquire);
      if (saturating_add(t, std::chrono::nanoseconds{per_ns_}) <= now) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    return lo;
  }

 private:
  static constexpr std::int64_t kLongAgo = std::numeric_limits<std::int64_t>::min();
  // Never a record: records are kLongAgo ("no start") or readings from kLongAgo + 2 up.
  static constexpr std::int64_t kUninit = kLongAgo + 1;

  /// at(j): start j's slot, j taken modulo 2^64 (so negative starts wrap: 2W divides 2^64 only
  /// when W is a power of two, hence the explicit signed modulo).
  Atom<std::int64_t>& at(std::uint64_t j) const noexcept {
    const auto n = static_cast<std::int64_t>(j);
    const auto m = static_cast<std::int64_t>(2 * size_);
    return slots_[static_cast<std::uint64_t>(((n % m) + m) % m)];
  }

  const std::uint64_t size_;
  const std::int64_t per_ns_;
  const bool carried_;  // its starts below 0 are a predecessor's (else none)
  std::unique_ptr<Atom<std::int64_t>[]> slots_;
};

}  // namespace rail::detail
