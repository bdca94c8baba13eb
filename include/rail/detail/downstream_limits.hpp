// DownstreamLimits: the admission gate of one downstream service: a concurrency
// permit counter, a rate, and a pushback pause (HTTP 429 with retry-after). try_admit(now) admits
// a job only when all three allow it; otherwise it says what to wait for: a permit's release, or
// a time. The rate is a sliding window (BullMQ's limiter: at most `max` starts in any window of
// `per`; detail/rate_window.hpp holds its algorithm and proof) or a token bucket (below). Both
// take "tokens" through token_step and share the configuration protocol of "Rate changes".
//
// Guarantee: at most `concurrency` permits are held at once, exactly (linearizable, also across
// set_concurrency); for a bucket, the tokens granted to takes whose clock readings lie in a
// window [t1, t2]
// number at most burst + R(t2) - R(t1) <= burst + ceil((t2 - t1) * max / per), where R counts
// refills exactly (below): no rounding, so no drift over any horizon. A pause costs no token and
// no permit. The time a refused take is told to come back at is exact: a take at it succeeds (if
// no one else took the token first), a take 1 ns earlier fails.
//
// Algorithm, bucket tokens: GCRA (the ATM Forum's "virtual scheduling" cell-rate algorithm, ITU-T
// I.371; as used for rate limiting by redis-cell and Brandur Leach's "Rate limiting, cells, and
// GCRA") counted in tokens instead of time. Classic GCRA keeps a theoretical arrival time and adds
// the emission interval per/max to it on every take; 1 s / 7 is not a whole number of nanoseconds,
// so that drifts. Here the state is N, the tokens issued since the configuration's base time, in
// one atomic word, and the refills up to time t are
//     R(t) = floor((t - base) * max / per)    (0 before base; unsigned 128-bit intermediates)
// a pure function of t, never accumulated. The bucket's level at t is
//     L(t) = R(t) + burst - max(N, R(t))      (<= burst; < 0 only for a debt, see set_rate)
// A take at t sets N to max(N, R(t)) + 1 if that is <= R(t) + burst, else fails (N unchanged).
// The max() is the bucket's cap: tokens refilled while it was full are not kept. A refused take
// is told the earliest time R reaches N + 1 - burst:
//     available_at = base + ceil((N + 1 - burst) * per / max)
// Proof sketch: (1) Right after a take at t0 (or at base, N = 0), N >= R(t0) and the level is
// R(t0) + burst - N. With no take until t, L(t) = min(burst, level + R(t) - R(t0)): an integer
// bucket of capacity burst that gains one token each time R steps up, the cap applied lazily
// (caps compose: min(B, min(B, L + a) + b) = min(B, L + a + b) for a, b >= 0). A take succeeds
// iff L(t) >= 1 and leaves L(t) - 1. So the formula is the bucket, with no rounding anywhere.
// (2) Window bound: give each successful take the index N' it sets. N only grows, so indices are
// distinct, and a take at t gets R(t) < N' <= R(t) + burst, so the takes at times in [t1, t2]
// hold distinct indices in (R(t1), R(t2) + burst]. This holds for any interleaving, including
// takes that pass clock readings out of order (a stale, earlier reading is judged against a
// smaller R: stricter, never looser). R(t2) - R(t1) <= ceil((t2 - t1) * max / per) as
// floor(x + y) - floor(x) <= ceil(y). (3) available_at is the least t with (t - base) * max >=
// (N + 1 - burst) * per, by the definition of ceil.
//
// Worked example, max = 300, per = 1 s, burst = 300, base = 0: at t = 0, R = 0 and N = 0, so 300
// takes succeed (N = 300) and the 301st is told base + ceil(1 * 1e9 / 300) = 3,333,334 ns; at
// 3,333,333 ns R is still 0 (999,999,900 < 1e9), at 3,333,334 ns it is 1. At t = 1 s, R = 300 and
// N (if nobody took since t = 0) is 300: 300 more takes. After k seconds exactly 300 (k + 1)
// tokens were granted, for any k: R(k s) is computed from k s, not summed.
//
// Bounds (RateLimit::kMaxTokens, validated by rail::validate(DownstreamOptions)): max and burst
// are at most 2^40 and max is at most one token per ns (max <= per in ns), so R(t) <= t - base
// grows no faster than the clock. R is clamped at kMaxRefill = 2^61 (73 years at one token per
// ns; past it the bucket stops refilling and a refused take is told kNever), so N <= 2^61 +
// 2^40 < 2^62 and bit 62 of the word is free for the "closed" mark (set_rate). Intermediates:
// (t - base) * max < 2^64 * 2^40; (N + 1 - burst) * per < 2^62 * 2^63: both fit unsigned 128 bits.
// Every time sum goes through saturating_add; a wait past INT64_MAX ns is kNever.
//
// Algorithm, permits: one 64-bit word holds the limit (high half; 0 = unlimited) and the permits
// held (low half). try_acquire_permit CASes held + 1 in while held < limit, set_concurrency CASes
// a new limit in, release_permit subtracts 1. Limit and count change in one word, so a lowered
// limit binds the very next acquisition: no acquirer can pass on a limit it read before the
// change (a CAS on the old word fails), and lowering below the held count blocks acquisitions
// until enough permits come back.
//
// Admission order (try_admit): the pause, then a look at the token bucket that takes nothing,
// then a permit, then a token; no token left (another thread took the last one between the look
// and the take): the permit goes back. A permit is returned at no cost; a token cannot be
// returned without breaking the index argument above, so the token is taken last and a job that
// finds no permit free never spends one. The look keeps a rate-limited downstream's admissions
// off the permit word. The cost: a permit held for those few instructions may make a concurrent
// try_admit report no_permit; the admission that gave it back says so (returned_permit), and
// whoever parks jobs until a permit is released must treat it as a release.
//
// Rate changes (set_rate, cold, under a mutex): each configuration is an immutable Config
// {base, max, per, burst, predecessor} with its own issued word, published through config_ and
// kept until the object dies (configs_; changes are rare), so a reader that loaded an old one
// reads live memory and no reclamation scheme is needed. A change (1) publishes the successor
// with its word kPending, (2) closes the predecessor: a CAS sets bit 62 (kClosed) on its word,
// keeping the count, after which every take on it fails its CAS or sees the bit and moves to
// config_, (3) sets the successor's word from the predecessor's final count: it starts with the
// tokens the old bucket held at the successor's base time, capped at the new burst (or with the
// old bucket's debt, at most one new burst, when takes with later clock readings beat the close).
// Any thread that meets a kPending word does (2) and (3) itself: both are idempotent and every
// helper computes the same value from the closed word, so a change never blocks a take (lock-
// free). Hence a racing acquirer on the old configuration cannot overshoot: a take on it either
// linearized before the close and is in the carried count, or fails and retries on the successor.
// Removing the rate (nullopt) publishes an unlimited Config; setting one after that starts full.
// A window configuration uses the same word as its count of starts, closed and started the same
// way; a window that replaces a window carries its last starts (RateWindow::carry_from), and a
// change of kind starts afresh: a bucket full, a window with no start in it.
//
// Pause (pushback): paused_until_ only grows (a CAS max). Admissions at now < paused_until are
// refused with that time before any permit or token is looked at.
//
// Threading: every member may be called from any thread concurrently; set_rate serializes with
// itself on a mutex and never blocks the hot path. The destructor runs when no call is in flight.
// Allocation: only the constructor and set_rate allocate; admissions, takes, releases, pauses and
// snapshots do not. Atom is std::atomic in the engine and DeterministicAtomic in
// tests/downstream_limits_test.cpp.
//
// Memory ordering: permits are a semaphore: release_permit is release and a successful acquire
// is acquire, so the work done under a permit happens before the next holder of that permit
// starts (the high-water test relies on it). config_ is stored release by set_rate and loaded
// acquire, publishing the Config's fields and its kPending word. A Config's word: the close CAS
// is release (acq_rel) and every load or failed CAS of the word is acquire, so a thread that
// reads kClosed also reads the successor from config_ (the close happens after the successor's
// publication: in set_rate by program order, in a helper because it loaded config_ first), and
// retries on it. Token counts themselves publish no data (a job's data travels with the job).
// The pause is relaxed: it carries no data, and a thread that learns of a 429 through the job's
// own hand-off sees the pause through that hand-off's happens-before (write-read coherence).
//
// Shutdown: nothing to stop; the object owns its Configs and frees them when destroyed.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "rail/detail/assert.hpp"
#include "rail/detail/deadline.hpp"
#include "rail/detail/rate_window.hpp"
#include "rail/downstream.hpp"

namespace rail::detail {

/// Admission: what try_admit decided.
struct Admission {
  enum class Kind : std::uint8_t {
    admitted,      // the caller holds a permit and spent a token: release_permit() at the end
    no_permit,     // concurrency is at its limit: come back after a release_permit()
    rate_limited,  // no token before until_ns
    paused,        // a pushback pause lasts until until_ns
  };
  Kind kind = Kind::admitted;
  std::int64_t until_ns = 0;  // rate_limited, paused: when to come back (kNever: never)
  /// returned_permit: rate_limited only: this call held a permit for a moment and gave it back
  /// (see "Admission order" in the header), so a concurrent call may have reported no_permit
  /// meanwhile: wake a job parked for a permit as if a permit had been released.
  bool returned_permit = false;
};

/// DownstreamSnapshot: a figure for introspection; each field is read on its own (not one
/// instant across fields).
struct DownstreamSnapshot {
  std::uint32_t in_flight = 0;            // permits held
  std::uint32_t concurrency = 0;          // the limit; 0: unlimited
  std::optional<std::uint64_t> tokens{};  // available at the given time; nullopt: no rate
  std::int64_t paused_until_ns = 0;       // admissions wait while now < this
};

template <template <class> class Atom = std::atomic>
class BasicDownstreamLimits {
  __extension__ typedef unsigned __int128 U128;  // __extension__: no -Wpedantic note

 public:
  /// kNotPaused: paused_until before any pause.
  static constexpr std::int64_t kNotPaused = std::numeric_limits<std::int64_t>::min();

  /// BasicDownstreamLimits(o, now_ns): the limits o (validated with rail::validate first: an
  /// out-of-bounds rate aborts), the bucket full at now_ns.
  BasicDownstreamLimits(const DownstreamOptions& o, std::int64_t now_ns)
      : permits_(std::uint64_t{o.concurrency.value_or(0)} << 32) {
    configs_.push_back(make_config(o.rate, now_ns, nullptr));
    configs_.back()->issued.store(0, std::memory_order_relaxed);  // a full bucket
    // relaxed: the object is published to other threads by whoever constructed it.
    config_.store(configs_.back().get(), std::memory_order_relaxed);
  }
  BasicDownstreamLimits(const BasicDownstreamLimits&) = delete;
  BasicDownstreamLimits& operator=(const BasicDownstreamLimits&) = delete;

  // --- permits ---------------------------------------------------------------------------------

  /// try_acquire_permit(): a permit if fewer than the limit are held (always, when unlimited);
  /// false otherwise. Never blocks.
  [[nodiscard]] bool try_acquire_permit() noexcept {
    // relaxed: a first guess for the CAS, which re-reads on failure.
    std::uint64_t w = permits_.load(std::memory_order_relaxed);
    do {
      const std::uint64_t limit = w >> 32, held = w & kHeldMask;
      // held == kHeldMask: 2^32 - 1 held with no limit; one more would carry into the limit.
      if ((limit != 0 && held >= limit) || held == kHeldMask) return false;
      // acquire: pairs with release_permit's release (see the ordering contract).
    } while (!permits_.compare_exchange_weak(w, w + 1, std::memory_order_acquire,
                                             std::memory_order_relaxed));
    return true;
  }

  /// release_permit(): gives back a permit from try_acquire_permit or an admitting try_admit.
  /// Precondition: the caller holds one (checked: aborts otherwise). Returns whether a limit was
  /// in force at the release (else nobody could have been refused a permit before it).
  bool release_permit() noexcept {
    // release: the holder's work happens before the next acquirer of the permit starts.
    const std::uint64_t before = permits_.fetch_sub(1, std::memory_order_release);
    RAIL_INVARIANT((before & kHeldMask) != 0, "release_permit without a permit held");
    return (before >> 32) != 0;
  }

  /// in_flight(): permits held now (a figure).
  [[nodiscard]] std::uint32_t in_flight() const noexcept {
    // relaxed: a figure, orders nothing.
    return static_cast<std::uint32_t>(permits_.load(std::memory_order_relaxed) & kHeldMask);
  }

  /// permit_free(): fewer permits held than the limit (or no limit): a try_acquire_permit now
  /// would likely succeed. relaxed: a hint; the caller's own fence orders it (DownstreamGate).
  [[nodiscard]] bool permit_free() const noexcept {
    const std::uint64_t w = permits_.load(std::memory_order_relaxed);
    const std::uint64_t limit = w >> 32, held = w & kHeldMask;
    return limit == 0 || held < limit;
  }

  /// limited(): a concurrency limit is in force now (a hint: set_concurrency may change it).
  [[nodiscard]] bool limited() const noexcept {
    return (permits_.load(std::memory_order_relaxed) >> 32) != 0;  // relaxed: a hint
  }

  /// set_concurrency(limit): the limit for every acquisition from now on (0: unlimited). Held
  /// permits stay held; below the held count, acquisitions fail until enough are released.
  void set_concurrency(std::uint32_t limit) noexcept {
    std::uint64_t w = permits_.load(std::memory_order_relaxed);
    // relaxed: the limit carries no data; the RMW keeps the held count's release sequence intact.
    while (!permits_.compare_exchange_weak(w, (std::uint64_t{limit} << 32) | (w & kHeldMask),
                                           std::memory_order_relaxed)) {
    }
  }

  // --- tokens ----------------------------------------------------------------------------------

  /// try_take_token(now_ns): nullopt when a token was taken at now_ns (always, with no rate);
  /// else the earliest time a token is there (kNever: never), nothing taken.
  [[nodiscard]] std::optional<std::int64_t> try_take_token(std::int64_t now_ns) noexcept {
    return token_step<true>(now_ns);
  }

  /// set_rate(rate, now_ns): a new rate from now_ns on (nullopt: none), starting with the tokens
  /// the current bucket holds at now_ns, at most the new burst. Cold: allocates (may throw
  /// std::bad_alloc, before anything changes) and serializes with other set_rate calls; takes on
  /// other threads proceed meanwhile. rate must be validated: an out-of-bounds one aborts.
  void set_rate(const std::optional<RateLimit>& rate, std::int64_t now_ns) {
    std::lock_guard lock(change_mu_);
    // relaxed: only set_rate stores config_, under this mutex.
    Config* old = config_.load(std::memory_order_relaxed);
    configs_.reserve(configs_.size() + 1);  // the one allocation that may throw, before publishing
    configs_.push_back(make_config(rate, now_ns, old));
    Config* next = configs_.back().get();
    // release: publishes next's fields and its kPending word to config_'s acquire loads.
    config_.store(next, std::memory_order_release);
    // Close old and start next; a take that met kPending meanwhile may have done it already.
    // Done under the mutex, so the predecessor of a published Config is never kPending.
    finish_change(*next);
  }

  // --- pushback --------------------------------------------------------------------------------

  /// pause_until(until_ns): no admissions before until_ns; only extends an existing pause.
  void pause_until(std::int64_t until_ns) noexcept {
    // relaxed: the pause carries no data (see the ordering contract); the CAS keeps the maximum.
    std::int64_t cur = paused_until_.load(std::memory_order_relaxed);
    while (cur < until_ns &&
           !paused_until_.compare_exchange_weak(cur, until_ns, std::memory_order_relaxed)) {
    }
  }

  /// pause_for(now_ns, retry_after): pause_until(now_ns + retry_after), saturating
  /// (Duration::max(): paused for good).
  void pause_for(std::int64_t now_ns, Duration retry_after) noexcept {
    pause_until(saturating_add(now_ns, retry_after));
  }

  // --- admission -------------------------------------------------------------------------------

  /// try_admit(now_ns): a permit and a token (admitted: release_permit() when the job ends), or
  /// why not: no_permit, or rate_limited / paused with the time to come back. A refusal takes
  /// nothing (see "Admission order"). Never blocks.
  [[nodiscard]] Admission try_admit(std::int64_t now_ns) noexcept {
    // relaxed: see the ordering contract (pause).
    const std::int64_t paused = paused_until_.load(std::memory_order_relaxed);
    if (now_ns < paused) return {Admission::Kind::paused, paused, false};
    if (const auto at = token_step<false>(now_ns))
      return {Admission::Kind::rate_limited, *at, false};
    if (!try_acquire_permit()) return {Admission::Kind::no_permit, 0, false};
    if (const auto at = token_step<true>(now_ns)) {
      (void)release_permit();
      return {Admission::Kind::rate_limited, *at, true};
    }
    return {Admission::Kind::admitted, 0, false};
  }

  /// try_admit_held(now_ns): try_admit for a caller that holds a permit already
  /// (try_acquire_permit): the pause, then a token. Refused, the caller still holds its permit.
  [[nodiscard]] Admission try_admit_held(std::int64_t now_ns) noexcept {
    // relaxed: see the ordering contract (pause).
    const std::int64_t paused = paused_until_.load(std::memory_order_relaxed);
    if (now_ns < paused) return {Admission::Kind::paused, paused, false};
    if (const auto at = token_step<true>(now_ns))
      return {Admission::Kind::rate_limited, *at, false};
    return {Admission::Kind::admitted, 0, false};
  }

  /// may_admit(now_ns): a try_admit at now_ns would likely admit (not paused, a permit free, a
  /// token there), taking nothing. A hint (relaxed reads): the gate wakes the next waiting job
  /// after an admission only then.
  [[nodiscard]] bool may_admit(std::int64_t now_ns) noexcept {
    // relaxed: see the ordering contract (pause).
    if (now_ns < paused_until_.load(std::memory_order_relaxed)) return false;
    return permit_free() && !token_step<false>(now_ns).has_value();
  }

  // --- introspection ---------------------------------------------------------------------------

  /// token_due(now_ns): when the next token comes, if a take at now_ns would be refused for
  /// want of one (kNever: never); nullopt when one is there or there is no rate. Takes nothing
  /// (it may finish a rate change in progress, as any take does).
  [[nodiscard]] std::optional<std::int64_t> token_due(std::int64_t now_ns) noexcept {
    return token_step<false>(now_ns);
  }

  /// snapshot(now_ns): permits held, the limit, the tokens available at now_ns, the pause.
  [[nodiscard]] DownstreamSnapshot snapshot(std::int64_t now_ns) const noexcept {
    DownstreamSnapshot s;
    // relaxed: figures, order nothing.
    const std::uint64_t w = permits_.load(std::memory_order_relaxed);
    s.in_flight = static_cast<std::uint32_t>(w & kHeldMask);
    s.concurrency = static_cast<std::uint32_t>(w >> 32);
    s.paused_until_ns = paused_until_.load(std::memory_order_relaxed);
    for (;;) {
      // acquire, both: as in token_step.
      Config* c = config_.load(std::memory_order_acquire);
      if (c->max == 0) return s;
      const std::int64_t n = c->issued.load(std::memory_order_acquire);
      if (n == kPending) {
        finish_change(*c);
        continue;
      }
      if ((n & kClosed) != 0) continue;
      if (c->window) {
        s.tokens = c->window->available(n, now_ns);
        return s;
      }
      const std::int64_t r = refilled(*c, now_ns);
      s.tokens =
          static_cast<std::uint64_t>(std::max<std::int64_t>(0, r + c->burst - std::max(n, r)));
      return s;
    }
  }

 private:
  static constexpr std::uint64_t kHeldMask = 0xFFFF'FFFFu;
  static constexpr std::int64_t kMaxRefill = std::int64_t{1} << 61;
  static constexpr std::int64_t kClosed = std::int64_t{1} << 62;
  static constexpr std::int64_t kPending = -1;
  static constexpr std::int64_t kMaxBurst = static_cast<std::int64_t>(RateLimit::kMaxTokens);
  // The bounds of the header's "Bounds" paragraph, as code.
  static_assert(kMaxRefill + 2 * kMaxBurst + 1 < kClosed,
                "N (at most max(2 * burst, kMaxRefill + burst)) must stay below the closed bit");
  static_assert(sizeof(U128) == 16, "R and available_at need 128-bit intermediates");

  using Window = BasicRateWindow<Atom>;
  static_assert(Window::kClosed == kClosed, "the window and the bucket share the closed bit");

  /// Config: one rate configuration. Everything but `issued` (and a window's records) is
  /// immutable after publication.
  struct alignas(64) Config {
    std::int64_t base_ns = 0;  // R counts from here
    std::uint64_t max = 0;     // 0: no rate limit (the word is unused)
    std::uint64_t per_ns = 1;
    std::int64_t burst = 0;               // bucket capacity, >= 1 when max > 0
    std::unique_ptr<Window> window;       // set: a window (burst unused), else a bucket
    Config* prev = nullptr;               // the configuration this one replaced; nullptr: the first
    Atom<std::int64_t> issued{kPending};  // N; kClosed set once replaced; kPending until started
  };

  static std::unique_ptr<Config> make_config(const std::optional<RateLimit>& rate,
                                             std::int64_t now_ns, Config* prev) {
    auto c = std::make_unique<Config>();
    c->base_ns = now_ns;
    c->prev = prev;
    if (rate) {
      const bool window = rate->kind == RateLimit::Kind::window;
      const std::uint64_t burst = rate->burst.value_or(rate->max);
      RAIL_INVARIANT(rate->max >= 1 && rate->max <= RateLimit::kMaxTokens &&
                         rate->per.count() > 0 && rate->per != Duration::max() &&
                         rate->max <= static_cast<std::uint64_t>(rate->per.count()) &&
                         burst <= RateLimit::kMaxTokens &&
                         (!window || (rate->max <= RateLimit::kMaxWindowStarts && !rate->burst)),
                     "DownstreamLimits: a rate outside rail::validate(DownstreamOptions)'s bounds");
      c->max = rate->max;
      c->per_ns = static_cast<std::uint64_t>(rate->per.count());
      c->burst = static_cast<std::int64_t>(burst);
      if (window)
        c->window = std::make_unique<Window>(rate->max, rate->per.count(),
                                             prev != nullptr && prev->window != nullptr);
    }
    return c;
  }

  /// refilled(c, now_ns): R(now_ns) = floor((now_ns - base) * max / per), 0 before base, at
  /// most kMaxRefill. Exact: (now - base) < 2^64 and max <= 2^40, so the product fits 128 bits.
  static std::int64_t refilled(const Config& c, std::int64_t now_ns) noexcept {
    if (now_ns <= c.base_ns) return 0;
    // The difference of two int64 is below 2^64: exact in uint64 (modular subtraction).
    const std::uint64_t elapsed =
        static_cast<std::uint64_t>(now_ns) - static_cast<std::uint64_t>(c.base_ns);
    const U128 r = U128{elapsed} * c.max / c.per_ns;
    return r >= static_cast<U128>(kMaxRefill) ? kMaxRefill : static_cast<std::int64_t>(r);
  }

  /// available_at(c, n): the least t with R(t) >= n + 1 - burst (the next token given N = n),
  /// i.e. base + ceil((n + 1 - burst) * per / max); kNever past the clock's range or kMaxRefill.
  /// Precondition: n + 1 - burst >= 1 (the take was refused, so n >= R(now) + burst).
  static std::int64_t available_at(const Config& c, std::int64_t n) noexcept {
    const std::int64_t k = n + 1 - c.burst;
    if (k > kMaxRefill) return kNever;  // R stops at kMaxRefill: that token never comes
    const U128 wait = (static_cast<U128>(k) * c.per_ns + (c.max - 1)) / c.max;
    if (wait > static_cast<U128>(std::numeric_limits<std::int64_t>::max())) return kNever;
    return saturating_add(c.base_ns, Duration{static_cast<std::int64_t>(wait)});
  }

  /// token_step<kTake>(now_ns): with kTake, try_take_token; without, the same verdict for a
  /// take at now_ns, taking nothing (try_admit's look before it holds a permit).
  template <bool kTake>
  std::optional<std::int64_t> token_step(std::int64_t now_ns) noexcept {
    for (;;) {
      // acquire: pairs with set_rate's release store (the Config's fields, its kPending word).
      Config* c = config_.load(std::memory_order_acquire);
      if (c->max == 0) return std::nullopt;
      const std::int64_t r = c->window ? 0 : refilled(*c, now_ns);
      // acquire: a word read closed must show the successor in config_ (ordering contract).
      std::int64_t n = c->issued.load(std::memory_order_acquire);
      for (;;) {
        if (n == kPending) {  // a change in progress: finish it rather than wait for it
          finish_change(*c);
          n = c->issued.load(std::memory_order_acquire);
          continue;
        }
        if ((n & kClosed) != 0) break;  // replaced: config_ already shows the successor
        if (c->window) {
          const auto step = c->window->template step<kTake>(c->issued, n, now_ns);
          if (step.kind == Window::Step::Kind::taken) return std::nullopt;
          if (step.kind == Window::Step::Kind::refused) return step.until_ns;
          n = c->issued.load(std::memory_order_acquire);  // moved: take the next start's place
          continue;
        }
        const std::int64_t next = std::max(n, r) + 1;
        if (next > r + c->burst) return available_at(*c, n);  // refused: here n >= r + burst
        if constexpr (!kTake) return std::nullopt;
        // acquire (success and failure): a failed CAS may read the closed word, as the load
        // above; a success publishes nothing (a token carries no data) and costs no more.
        if (c->issued.compare_exchange_weak(n, next, std::memory_order_acquire))
          return std::nullopt;
      }
    }
  }

  /// finish_change(c): closes c's predecessor and starts c's word from the predecessor's final
  /// count. Idempotent; called by set_rate and by any take that meets c's word kPending.
  static void finish_change(Config& c) noexcept {
    RAIL_INVARIANT(c.prev != nullptr, "a kPending configuration without a predecessor");
    auto& old_word = c.prev->issued;
    std::int64_t n = old_word.load(std::memory_order_acquire);
    RAIL_INVARIANT(n != kPending, "the predecessor of a published configuration is not started");
    // acq_rel: release publishes "config_ shows c" (loaded or stored before this) to every reader
    // of the closed word. Failure re-reads; the loop ends once the bit is set, by us or a helper.
    while ((n & kClosed) == 0 &&
           !old_word.compare_exchange_weak(n, n | kClosed, std::memory_order_acq_rel,
                                           std::memory_order_acquire)) {
    }
    std::int64_t start = 0;
    if (c.window) {
      // The window's starts -W..-1 are the predecessor's last (or none: a change of kind).
      if (c.prev->window) c.window->carry_from(*c.prev->window, n & ~kClosed);
    } else {
      start = initial_issued(c, *c.prev, n & ~kClosed);
    }
    std::int64_t expected = kPending;
    // Every helper computes the same start (the closed count is final); the first CAS wins and
    // the rest fail on a started word. release: publishes the window's carried records (written
    // by this helper or read as written by another) to every take that reads the word started.
    c.issued.compare_exchange_strong(expected, start, std::memory_order_release,
                                     std::memory_order_relaxed);
  }

  /// initial_issued(c, old, last): c's starting N, so that its bucket holds at c's base what
  /// old's held then given old's final count `last`, capped at c's burst: N = burst - carried.
  /// A negative carry is a debt (takes with clock readings past c's base beat the close): kept,
  /// at most one burst, so that N stays in [0, 2 * burst].
  static std::int64_t initial_issued(const Config& c, const Config& old,
                                     std::int64_t last) noexcept {
    if (c.max == 0 || old.max == 0 || old.window) return 0;  // none before, or a window: full
    const std::int64_t r = refilled(old, c.base_ns);
    const std::int64_t level = r + old.burst - std::max(last, r);  // old's L(c.base)
    return c.burst - std::clamp(level, -c.burst, c.burst);
  }

  // Every admission and release writes this word: its own cache line, apart from the read-mostly
  // config_ and pause (a Config's word is in the Config's own line).
  alignas(64) Atom<std::uint64_t> permits_;  // (limit << 32) | held
  alignas(64) Atom<Config*> config_{nullptr};
  Atom<std::int64_t> paused_until_{kNotPaused};
  std::mutex change_mu_;                          // serializes set_rate
  std::vector<std::unique_ptr<Config>> configs_;  // every Config ever published; freed with us
};

using DownstreamLimits = BasicDownstreamLimits<>;

}  // namespace rail::detail
