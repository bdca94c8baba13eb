// TscTime: the kernel's steady time, read from the CPU's time-stamp counter (TSC). On this KVM
// guest a vDSO clock_gettime costs ~25 ns and this ~10.5; a job reads the engine clock about
// twice (its add, its start), and in a busy-core profile those reads are a sixth of a job's
// CPU time.
//
// Algorithm: time = base_ns + (tsc - base_tsc) * period, where (base_tsc, base_ns) is an anchor,
// a TSC reading and the kernel's steady time taken together, and `period` (nanoseconds per tick,
// 32.32 fixed point) is measured against the kernel clock from an origin anchor. A reading more
// than kWindowTicks past its anchor (or behind it) takes the slow path: it returns the kernel's
// time and, unless another thread is at it, re-anchors there. Re-anchoring re-measures the period
// from the origin: the baseline grows from kMinBaselineNs to between kMaxBaselineNs and twice
// that (the origin then moves up to an anchor at least kMaxBaselineNs old), so the sampling
// error fades (10 ms: ~1e-5; 10 s: ~1e-8) while the period still follows the kernel clock's own
// adjustments (NTP slews its rate). An anchor is taken only from a counter reading pair at most
// kAnchorSpreadTicks apart around the kernel's reading; a looser one (the thread was preempted)
// changes nothing. If the counter's estimate of the time since the last anchor disagrees with
// the kernel's by more than 1/1024 (+10 us), the counter jumped or changed rate (a VM restored
// or migrated, CPUs whose counters differ): the origin is discarded and the period measured
// afresh; after kMaxResets such resets within kResetSpanNs the counter is given up for good.
// Until a period is measured every reading is the kernel's, and so is every reading once the
// counter is given up or where the CPU has no invariant TSC (the Source says so).
// Invariants: base_* and period change together, only under the seqlock; period == 0 means "not
// measured": readers use the kernel clock. Only the thread holding writing_ touches origin_,
// next_origin_, last_ and the reset count.
// Guarantee: a reading is the kernel's time to within the period's error over one window (at
// most ~2 us in the window after the first measurement; tens of ns once the baseline is a
// second) plus the skew between CPUs' counters (KVM: tens of ns). It is not clamped here: a
// re-anchoring or a thread moving to another CPU may step back by that much. rail::TscClock
// clamps per thread.
// Memory ordering: a seqlock (Boehm, "Can seqlocks get along with programming language memory
// models?", 2012). The writer makes seq_ odd (relaxed), fences (release), stores the fields
// (relaxed) and makes seq_ even (release). A reader loads seq_ (acquire), the fields (relaxed),
// fences (acquire) and loads seq_ again (relaxed): if it read any field the writer stored after
// its fence, the fences synchronise and the second load sees the odd count, so a reader that
// sees the same even count twice read one anchor whole. writing_ is a try-lock (acquire on
// taking, release on leaving) that orders the writer-only fields between writers. usable_ and
// origin_ns_ are hints read relaxed: a stale value costs one more kernel reading or one more
// counter reading from a still-whole anchor, never a wrong time.
// Threading: now() from any thread at any time; lock-free (a reader that meets a writer reads
// the kernel clock rather than wait).
#pragma once

#include <atomic>
#include <cstdint>
#include <limits>

namespace rail::detail {

/// NoTscTimeHooks: production's hooks (none). A test substitutes a type whose static
/// publishing() holds the writer between two of an anchor's field stores, so that readers meet
/// a half-written anchor (which the seqlock must turn away).
struct NoTscTimeHooks {
  static void publishing() noexcept {}
};

/// BasicTscTime<Source>: Source supplies `std::uint64_t ticks()` (the counter),
/// `std::int64_t kernel_ns()` (the steady time it is calibrated against) and `bool usable()`
/// (the counter runs at a constant rate on every CPU); tests substitute a scripted one.
template <class Source, class Hooks = NoTscTimeHooks>
class BasicTscTime {
  // 128-bit products: a GCC and Clang extension (__extension__ keeps -Wpedantic quiet).
  __extension__ typedef unsigned __int128 Wide;

 public:
  /// A reading more than this many ticks past its anchor re-anchors (~0.13 s at 2 GHz).
  static constexpr std::int64_t kWindowTicks = std::int64_t{1} << 28;
  /// The shortest baseline a period is measured over: its error is two anchors' (~25 ns each,
  /// 64 ns at most) over it: ~5e-6, 1.3e-5 at most, until re-anchoring lengthens it.
  static constexpr std::int64_t kMinBaselineNs = 10'000'000;
  /// Once the baseline passes twice this, the origin moves up to an anchor at least this old.
  static constexpr std::int64_t kMaxBaselineNs = 10'000'000'000;
  /// An anchor whose two counter readings are further apart than this was interrupted (a vDSO
  /// read is ~55 ticks): the tightest of kAnchorTries is kept, and if even that one is loose
  /// the anchor is not used (no re-anchoring, no measurement; its kernel reading is).
  static constexpr std::uint64_t kAnchorSpreadTicks = 256;
  static constexpr int kAnchorTries = 4;
  /// How far one CPU's counter may trail another's before a reading behind its anchor counts as
  /// a jump (KVM measured: 168 ticks at most).
  static constexpr std::int64_t kSkewTicks = 4'096;
  /// Periods outside [0.1, 256) ns per tick (counters over 10 GHz or under 4 MHz, or a jump
  /// during the first baseline) are refused.
  static constexpr Wide kMinPeriod = (static_cast<Wide>(1) << 32) / 10;
  static constexpr Wide kMaxPeriod = static_cast<Wide>(1) << 40;
  /// This many resets within kResetSpanNs give the counter up: it keeps jumping or its CPUs
  /// disagree, and every reset costs kMinBaselineNs of kernel readings.
  static constexpr int kMaxResets = 3;
  static constexpr std::int64_t kResetSpanNs = 10'000'000'000;

  explicit BasicTscTime(Source source = Source{}) noexcept : source_(source) {
    usable_.store(source_.usable(), std::memory_order_relaxed);
    if (usable()) set_origin(anchor());
  }
  BasicTscTime(const BasicTscTime&) = delete;
  BasicTscTime& operator=(const BasicTscTime&) = delete;

  /// now(): nanoseconds on the kernel's steady timeline (see the file comment for how close).
  [[nodiscard]] std::int64_t now() noexcept {
    if (!usable()) [[unlikely]]
      return source_.kernel_ns();
    // acquire: pairs with the writer's release store of the even count (see the file comment).
    const std::uint64_t s = seq_.load(std::memory_order_acquire);
    const std::uint64_t base_tsc = base_tsc_.load(std::memory_order_relaxed);
    const std::int64_t base_ns = base_ns_.load(std::memory_order_relaxed);
    const std::uint64_t period = period_.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    // relaxed: the fence above orders it after the field loads (the seqlock's re-check).
    if ((s & 1) != 0 || seq_.load(std::memory_order_relaxed) != s) [[unlikely]]
      return source_.kernel_ns();  // a writer is at it: no need for a second
    if (period == 0) [[unlikely]] {
      // Not measured: kernel readings, and one of them measures once the baseline is long
      // enough (the others do not queue up on the try-lock meanwhile).
      const std::int64_t k = source_.kernel_ns();
      if (k - origin_ns_.load(std::memory_order_relaxed) < kMinBaselineNs) return k;
      return slow();
    }
    auto d = static_cast<std::int64_t>(source_.ticks() - base_tsc);
    if (d < 0 || d > kWindowTicks) [[unlikely]] {
      // A little behind: this CPU's counter trails the anchoring CPU's (skew), or rdtsc ran
      // ahead of the loads above; the anchor's time is as good a reading.
      if (d < -kSkewTicks || d > kWindowTicks) return slow();
      d = 0;
    }
    return base_ns + scaled(static_cast<std::uint64_t>(d), period);
  }

  /// measured(): a period is in use (readings come from the counter, not the kernel).
  [[nodiscard]] bool measured() const noexcept {
    // relaxed: a report, orders nothing.
    return usable() && period_.load(std::memory_order_relaxed) != 0;
  }

  /// given_up(): the counter was usable and kept jumping (kMaxResets): kernel readings for good.
  [[nodiscard]] bool given_up() const noexcept {
    return gave_up_.load(std::memory_order_relaxed);  // relaxed: a report
  }

 private:
  struct Anchor {
    std::uint64_t tsc = 0;
    std::int64_t ns = 0;
    bool tight = false;  // its counter readings were at most kAnchorSpreadTicks apart
  };

  bool usable() const noexcept {
    return usable_.load(std::memory_order_relaxed);  // relaxed: see the file comment
  }

  /// scaled(d, period): d ticks in nanoseconds, saturated (only agrees() passes d that large).
  static std::int64_t scaled(std::uint64_t d, std::uint64_t period) noexcept {
    const Wide ns = (static_cast<Wide>(d) * period) >> 32;
    return ns > static_cast<Wide>(std::numeric_limits<std::int64_t>::max())
               ? std::numeric_limits<std::int64_t>::max()
               : static_cast<std::int64_t>(ns);
  }

  /// anchor(): a counter reading and the kernel's time taken together: the middle of the two
  /// counter readings around the kernel's, the tightest pair of a few tries.
  Anchor anchor() noexcept {
    Anchor best;
    std::uint64_t best_spread = std::numeric_limits<std::uint64_t>::max();
    for (int i = 0; i < kAnchorTries && best_spread > kAnchorSpreadTicks; ++i) {
      const std::uint64_t before = source_.ticks();
      const std::int64_t ns = source_.kernel_ns();
      const std::uint64_t after = source_.ticks();
      if (after < before) continue;  // the counter went back between the two: no pair
      const std::uint64_t spread = after - before;
      if (spread < best_spread) {
        best_spread = spread;
        best = {before + spread / 2, ns, spread <= kAnchorSpreadTicks};
      }
    }
    if (best_spread == std::numeric_limits<std::uint64_t>::max())
      best.ns = source_.kernel_ns();  // no pair at all: the reading slow() returns
    return best;
  }

  /// slow(): the kernel's time, re-anchoring on the way if no other thread is.
  std::int64_t slow() noexcept {
    // acquire: the previous writer's writer-only fields are visible to us (its release below).
    if (writing_.exchange(true, std::memory_order_acquire)) return source_.kernel_ns();
    const Anchor a = anchor();
    if (!a.tight) {  // interrupted every try: its kernel reading is good, its pairing is not
      writing_.store(false, std::memory_order_release);
      return a.ns;
    }
    const std::uint64_t old_period = period_.load(std::memory_order_relaxed);  // only we write it
    std::uint64_t period = 0;
    if (old_period != 0 && !agrees(a, old_period)) {
      reset(a);  // the counter jumped or changed rate: measure it afresh
    } else if (!origin_.tight || a.tsc <= origin_.tsc || a.ns < origin_.ns) {
      set_origin(a);  // a loose origin, or one we went back past: start over from here
    } else if (a.ns - origin_.ns >= kMinBaselineNs) {
      const Wide p = (static_cast<Wide>(a.ns - origin_.ns) << 32) / (a.tsc - origin_.tsc);
      if (p >= kMinPeriod && p < kMaxPeriod) {
        period = static_cast<std::uint64_t>(p);
        if (a.ns - next_origin_.ns >= kMaxBaselineNs) {  // the baseline stays 10-20 s long
          origin_ = next_origin_;
          next_origin_ = a;
        }
      } else {
        reset(a);
      }
    }
    publish(a, period);
    writing_.store(false, std::memory_order_release);
    return a.ns;
  }

  /// publish(a, period): the seqlock's write side (see the file comment). Under writing_.
  void publish(const Anchor& a, std::uint64_t period) noexcept {
    const std::uint64_t s = seq_.load(std::memory_order_relaxed);  // only we write it
    seq_.store(s + 1, std::memory_order_relaxed);
    // release: the odd count is ordered before the field stores (see the file comment).
    std::atomic_thread_fence(std::memory_order_release);
    base_tsc_.store(a.tsc, std::memory_order_relaxed);
    Hooks::publishing();
    base_ns_.store(a.ns, std::memory_order_relaxed);
    period_.store(period, std::memory_order_relaxed);
    seq_.store(s + 2, std::memory_order_release);  // the fields before the even count
    last_ = a;
  }

  /// set_origin(a): the period is measured from `a` (under writing_, or in the constructor).
  void set_origin(const Anchor& a) noexcept {
    origin_ = next_origin_ = a;
    origin_ns_.store(a.ns, std::memory_order_relaxed);  // relaxed: readers' hint (see now())
  }

  /// reset(a): the counter misbehaved at `a`: measure afresh from it, or give it up after
  /// kMaxResets within kResetSpanNs.
  void reset(const Anchor& a) noexcept {
    if (resets_ == 0 || a.ns - first_reset_ns_ > kResetSpanNs) {
      resets_ = 0;
      first_reset_ns_ = a.ns;
    }
    if (++resets_ >= kMaxResets) {
      gave_up_.store(true, std::memory_order_relaxed);
      usable_.store(false, std::memory_order_relaxed);  // relaxed: see the file comment
    }
    set_origin(a);
  }

  /// agrees(a, period): the counter's estimate of the time from the last anchor to `a` is the
  /// kernel's to within 1/1024 (plus the anchors' own uncertainty, 10 us). Signed: `a` may be
  /// taken on a CPU whose counter trails the last anchor's.
  bool agrees(const Anchor& a, std::uint64_t period) const noexcept {
    const auto ticks = static_cast<std::int64_t>(a.tsc - last_.tsc);
    const std::int64_t kernel = a.ns - last_.ns;
    if (kernel < 0 || ticks < -kSkewTicks) return false;
    const std::int64_t counted = ticks < 0 ? -scaled(static_cast<std::uint64_t>(-ticks), period)
                                           : scaled(static_cast<std::uint64_t>(ticks), period);
    const std::int64_t off = counted > kernel ? counted - kernel : kernel - counted;
    return off <= kernel / 1024 + 10'000;
  }

  Source source_;
  // The writer's own: under writing_.
  Anchor origin_;
  Anchor next_origin_;  // the origin-to-be, once it is kMaxBaselineNs old
  Anchor last_;
  int resets_ = 0;
  std::int64_t first_reset_ns_ = 0;
  alignas(64) std::atomic<bool> writing_{false};
  std::atomic<bool> gave_up_{false};
  // Read by every reading: their own line, written once per window.
  alignas(64) std::atomic<std::uint64_t> seq_{0};
  std::atomic<std::uint64_t> base_tsc_{0};
  std::atomic<std::int64_t> base_ns_{0};
  std::atomic<std::uint64_t> period_{0};
  std::atomic<std::int64_t> origin_ns_{0};  // origin_.ns, for readers before a period
  std::atomic<bool> usable_{false};
};

}  // namespace rail::detail
