// Tests for rail::detail::DedupSet, the deduplication window. These are behaviour tests for the
// contract in dedup_set.hpp, a model test against std::unordered_map that also checks the table's
// structural invariants after every operation, and concurrency tests. The concurrency tests
// oversubscribe (8-16 threads) so that they find races on a 2-core machine, and they scale down
// under ThreadSanitizer.
#include "rail/detail/dedup_set.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <barrier>
#include <bit>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <new>
#include <optional>
#include <ostream>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "rail/error.hpp"
#include "support/dedup_set_peer.hpp"
#include "support/watchdog.hpp"

// g++ defines __SANITIZE_*__; clang answers __has_feature instead.
#if defined(__SANITIZE_THREAD__)
#define RAIL_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define RAIL_TEST_TSAN 1
#endif
#endif
#ifndef RAIL_TEST_TSAN
#define RAIL_TEST_TSAN 0
#endif
#if defined(__SANITIZE_ADDRESS__)
#define RAIL_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RAIL_TEST_ASAN 1
#endif
#endif
#ifndef RAIL_TEST_ASAN
#define RAIL_TEST_ASAN 0
#endif

// --- allocation counter
// ---------------------------------------------------------------------------- The set promises no
// heap allocation per operation in steady state. Counting global operator new checks that promise
// directly; the count is read on the one thread that runs the loop under test. Sanitizer runtimes
// supply their own operator new, so the replacement is compiled only outside them (the test then
// checks the size bound alone).
#if !RAIL_TEST_TSAN && !RAIL_TEST_ASAN
#include "support/replaced_new.hpp"
#define RAIL_TEST_COUNTS_ALLOCATIONS 1
#else
#define RAIL_TEST_COUNTS_ALLOCATIONS 0
#endif

namespace rail::detail {

namespace {

using Result = DedupSet::Claim::Result;
using Peer = DedupSetTestPeer;
using rail::test::Watchdog;

constexpr bool kTsan = RAIL_TEST_TSAN != 0;
// scaled(n): the operation count for the Release build, cut fourfold under ThreadSanitizer, whose
// runtime makes each atomic and lock operation tens of times slower.
constexpr int scaled(int n) {
  return kTsan ? std::max(1, n / 4) : n;
}

// A make_owner that records how often it ran, the check that try_claim calls it exactly once for
// an insert and never otherwise.
struct CountingOwner {
  std::uint64_t next_owner = 1;
  int calls = 0;
  std::pair<std::uint64_t, std::uint32_t> operator()() noexcept {
    ++calls;
    const std::uint64_t owner = next_owner++;
    return {owner, static_cast<std::uint32_t>(owner * 10)};
  }
};

constexpr std::chrono::seconds kDeadline{kTsan ? 300 : 60};

// Forms "<prefix><n>" in a fixed buffer, so loops that must not allocate can make distinct keys.
// thread_prefix(t): "t<t>-", built by appends (GCC 12 warns a false -Wrestrict on `"t" + ...`
// once the test's lambdas inline it).
std::string thread_prefix(int t) {
  std::string prefix = "t";
  prefix += std::to_string(t);
  prefix += '-';
  return prefix;
}

struct KeyBuf {
  std::array<char, 32> bytes{};
  std::string_view make(std::string_view prefix, std::uint64_t n) {
    std::copy(prefix.begin(), prefix.end(), bytes.begin());
    char* end = std::to_chars(bytes.data() + prefix.size(), bytes.data() + bytes.size(), n).ptr;
    return {bytes.data(), static_cast<std::size_t>(end - bytes.data())};
  }
};

// --- single-threaded behaviour
// ----------------------------------------------------------------------

TEST(DedupSet, DuplicateWithinTtlIsMerged) {
  DedupSet set(64);
  CountingOwner make;
  const auto first = set.try_claim("order-42", 1000, 2000, make);
  ASSERT_EQ(first.result, Result::inserted);
  EXPECT_EQ(first.owner, 1U);
  EXPECT_EQ(first.value, 10U);
  EXPECT_EQ(make.calls, 1);

  for (std::int64_t now : {1000, 1001, 1500, 1999}) {
    const auto again = set.try_claim("order-42", now, now + 1000, make);
    EXPECT_EQ(again.result, Result::duplicate) << "now=" << now;
    EXPECT_EQ(again.owner, first.owner);
    EXPECT_EQ(again.value, first.value);
  }
  EXPECT_EQ(make.calls, 1) << "a duplicate must not call make_owner";
  EXPECT_EQ(set.size(), 1U);
  const auto found = set.find("order-42", 1999);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(*found, std::pair(first.owner, first.value));
}

TEST(DedupSet, AddAfterTtlIsNotMerged) {
  DedupSet set(64);
  CountingOwner make;
  const auto first = set.try_claim("k", 0, 100, make);
  ASSERT_EQ(first.result, Result::inserted);

  // The boundary: an entry is live while expires_at > now, so at now == expires_at it is gone.
  EXPECT_EQ(set.try_claim("k", 99, 500, make).result, Result::duplicate);
  EXPECT_TRUE(set.find("k", 99).has_value());
  EXPECT_FALSE(set.find("k", 100).has_value());

  const auto second = set.try_claim("k", 100, 200, make);
  ASSERT_EQ(second.result, Result::inserted);
  EXPECT_NE(second.owner, first.owner);
  EXPECT_EQ(make.calls, 2);
  EXPECT_EQ(set.size(), 1U) << "the expired entry is reclaimed, not kept beside the new one";
  EXPECT_EQ(set.try_claim("k", 150, 300, make).result, Result::duplicate);
  EXPECT_EQ(Peer::check_invariants(set), "");
}

std::uint64_t one_hash(std::string_view) noexcept {
  return 5;
}

TEST(DedupSet, ReleaseClaimRemovesOnlyTheOwnersEntryAmongCollidingKeys) {
  // Every key has the same hash, so "a", "b" and "c" share one chain and one home: only the owner
  // tells their entries apart.
  DedupSet set(64, 1);
  Peer::set_hash(set, &one_hash);
  CountingOwner make;
  const auto a = set.try_claim("a", 0, DedupSet::kNoExpiry, make);
  const auto b = set.try_claim("b", 0, DedupSet::kNoExpiry, make);
  const auto c = set.try_claim("c", 0, DedupSet::kNoExpiry, make);
  const auto ab = set.try_claim("ab", 0, DedupSet::kNoExpiry, make);
  ASSERT_EQ(c.result, Result::inserted);
  ASSERT_EQ(ab.result, Result::inserted);

  EXPECT_FALSE(set.release_claim("b", ab.owner + 100)) << "an owner nobody has removes nothing";
  EXPECT_FALSE(set.release_claim("b", ab.owner))
      << "the owner of a key of another length is not b's entry";
  EXPECT_TRUE(set.release_claim("b", b.owner));
  EXPECT_FALSE(set.release_claim("b", b.owner)) << "a second release finds nothing";
  EXPECT_EQ(set.try_claim("a", 1, DedupSet::kNoExpiry, make).owner, a.owner);
  EXPECT_EQ(set.try_claim("c", 1, DedupSet::kNoExpiry, make).owner, c.owner);
  EXPECT_EQ(set.try_claim("ab", 1, DedupSet::kNoExpiry, make).owner, ab.owner);
  EXPECT_EQ(set.size(), 3U);
  EXPECT_EQ(Peer::check_invariants(set), "");

  // A released key is free again, and the old owner cannot release the new claim.
  const auto b2 = set.try_claim("b", 2, DedupSet::kNoExpiry, make);
  ASSERT_EQ(b2.result, Result::inserted);
  EXPECT_FALSE(set.release_claim("b", b.owner));
  EXPECT_TRUE(set.release_claim("b", b2.owner));
  EXPECT_EQ(Peer::check_invariants(set), "");
}

TEST(DedupSet, ReleaseOnlyByOwner) {
  DedupSet set(64);
  CountingOwner make;
  const auto a = set.try_claim("invoice", 0, DedupSet::kNoExpiry, make);
  ASSERT_EQ(a.result, Result::inserted);

  EXPECT_FALSE(set.release("invoice", a.owner + 1)) << "a stranger must not release it";
  EXPECT_FALSE(set.release("invoice", 0));
  EXPECT_EQ(set.try_claim("invoice", 1, DedupSet::kNoExpiry, make).result, Result::duplicate);
  EXPECT_FALSE(set.release("other", a.owner)) << "releasing an absent key reports false";

  EXPECT_TRUE(set.release("invoice", a.owner));
  EXPECT_FALSE(set.release("invoice", a.owner)) << "a second release finds nothing";
  EXPECT_EQ(set.size(), 0U);

  const auto b = set.try_claim("invoice", 2, DedupSet::kNoExpiry, make);
  ASSERT_EQ(b.result, Result::inserted);
  // The old job finishing late must not release the new job's claim.
  EXPECT_FALSE(set.release("invoice", a.owner));
  const auto found = set.find("invoice", 3);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->first, b.owner);
}

TEST(DedupSet, NoExpiryKeyHeldUntilReleased) {
  DedupSet set(64);
  CountingOwner make;
  const auto a = set.try_claim("forever", 0, DedupSet::kNoExpiry, make);
  ASSERT_EQ(a.result, Result::inserted);
  constexpr std::int64_t kLate = DedupSet::kNoExpiry - 1;  // the latest clock a caller may pass
  EXPECT_EQ(set.try_claim("forever", kLate, DedupSet::kNoExpiry, make).result, Result::duplicate);
  EXPECT_EQ(set.sweep(kLate), 0U);
  EXPECT_TRUE(set.find("forever", kLate).has_value());
  EXPECT_TRUE(set.release("forever", a.owner));
  EXPECT_EQ(set.try_claim("forever", kLate, DedupSet::kNoExpiry, make).result, Result::inserted);
}

TEST(DedupSet, SetValueRepointsOnlyTheOwnersClaim) {
  DedupSet set(64);
  CountingOwner make;
  const auto a = set.try_claim("order-3", 0, DedupSet::kNoExpiry, make);
  ASSERT_EQ(a.result, Result::inserted);
  EXPECT_FALSE(set.set_value("order-3", a.owner + 1, 99)) << "only the owner may repoint";
  EXPECT_FALSE(set.set_value("absent", a.owner, 99));
  EXPECT_TRUE(set.set_value("order-3", a.owner, 99));
  auto live = set.find("order-3", 1);
  ASSERT_TRUE(live);
  EXPECT_EQ(live->first, a.owner);
  EXPECT_EQ(live->second, 99u);
}

TEST(DedupSet, ASuccessorTakesOverItsPredecessorsClaimInPlaceAndNobodyElses) {
  DedupSet set(64);
  CountingOwner make;
  const auto a = set.try_claim("sync", 0, DedupSet::kNoExpiry, make);
  ASSERT_EQ(a.result, Result::inserted);

  const auto b = set.try_claim("sync", 1, 500, make, a.owner);
  ASSERT_EQ(b.result, Result::inserted) << "the holder's successor takes the claim";
  EXPECT_NE(b.owner, a.owner);
  EXPECT_EQ(set.size(), 1U) << "taken over in place, not stored twice";
  EXPECT_EQ(set.find("sync", 2), std::optional(std::pair(b.owner, b.value)));
  EXPECT_FALSE(set.release("sync", a.owner)) << "the predecessor no longer owns it";
  EXPECT_FALSE(set.find("sync", 500).has_value()) << "with the successor's own expiry";

  const auto c = set.try_claim("sync", 2, DedupSet::kNoExpiry, make, a.owner);
  EXPECT_EQ(c.result, Result::duplicate) << "a successor of someone else merges";
  EXPECT_EQ(c.owner, b.owner);

  // The predecessor's expired entry is taken over too (as a fresh claim would have been).
  const auto d = set.try_claim("held", 0, 100, make);
  const auto e = set.try_claim("held", 200, DedupSet::kNoExpiry, make, d.owner);
  EXPECT_EQ(e.result, Result::inserted);
  EXPECT_EQ(set.find("held", 300)->first, e.owner);
  EXPECT_EQ(Peer::check_invariants(set), "");
}

// The liveness hook of the watched tests: owner `alive` (0: nobody) is alive, and the hook
// counts its calls.
struct Liveness {
  std::uint64_t alive = 0;
  int calls = 0;
  static bool of(const void* ctx, std::uint64_t owner, std::uint32_t, DedupSet::Tie) noexcept {
    auto* const self = static_cast<Liveness*>(const_cast<void*>(ctx));
    ++self->calls;
    return owner == self->alive;
  }
};

TEST(DedupSet, AWatchedClaimStaysLivePastItsExpiryWhileItsOwnerIsAlive) {
  DedupSet set(64);
  Liveness live;
  set.watch_with(&Liveness::of, &live);
  CountingOwner make;
  const auto a = set.try_claim("running", 0, 100, make, 0, DedupSet::Tie::past_expiry);
  ASSERT_EQ(a.result, Result::inserted);
  EXPECT_EQ(set.try_claim("running", 50, 900, make).result, Result::duplicate);
  EXPECT_EQ(live.calls, 0) << "a claim within its expiry asks nobody";
  live.alive = a.owner;
  EXPECT_EQ(set.try_claim("running", 500, 900, make).result, Result::duplicate);
  EXPECT_EQ(set.find("running", 500)->first, a.owner);
  EXPECT_EQ(set.sweep(500), 0u) << "an alive owner's claim is never swept";
  EXPECT_TRUE(set.set_expiry("running", a.owner, 700));  // the window still moves
  live.alive = 0;
  EXPECT_EQ(set.try_claim("running", 699, 900, make).result, Result::duplicate);
  EXPECT_FALSE(set.find("running", 700).has_value()) << "no longer alive: it expires";
  const auto b = set.try_claim("running", 700, 900, make);
  EXPECT_EQ(b.result, Result::inserted) << "no longer alive, it expires at its expiry";
  // Unwatched, an alive owner does not hold its claim.
  live.alive = b.owner;
  EXPECT_EQ(set.sweep(900), 1u);
  // A successor's claim carries its own mark: taken over unwatched, it expires while its
  // predecessor's owner would count as alive; taken over watched, it lives while its own does.
  const auto c = set.try_claim("next", 0, 100, make, 0, DedupSet::Tie::past_expiry);
  live.alive = c.owner;
  const auto d = set.try_claim("next", 50, 100, make, c.owner);
  ASSERT_EQ(d.result, Result::inserted);
  EXPECT_FALSE(set.find("next", 100).has_value());
  const auto e = set.try_claim("next", 200, 300, make, 0, DedupSet::Tie::past_expiry);
  ASSERT_EQ(e.result, Result::inserted);
  live.alive = e.owner;
  const auto f = set.try_claim("next", 250, 300, make, e.owner, DedupSet::Tie::past_expiry);
  ASSERT_EQ(f.result, Result::inserted);
  EXPECT_FALSE(set.find("next", 300).has_value()) << "the predecessor's liveness is not its";
  live.alive = f.owner;
  EXPECT_EQ(set.find("next", 300)->first, f.owner);
  EXPECT_EQ(Peer::check_invariants(set), "");
}

// A watched claim's owner that stays alive keeps its key through a full shard's sweep and
// through the in-place resizes that other keys cause, and expires with them once it is not.
TEST(DedupSet, AWatchedClaimSurvivesSweepsAndResizesOnlyWhileItsOwnerIsAlive) {
  DedupSet set(64, 1);
  Liveness live;
  set.watch_with(&Liveness::of, &live);
  CountingOwner make;
  const auto held = set.try_claim("held", 0, 10, make, 0, DedupSet::Tie::past_expiry);
  live.alive = held.owner;
  KeyBuf key;
  for (int round = 0; round < 3; ++round) {
    for (int k = 0; k < 63; ++k)  // fills the shard: 64 with "held"
      ASSERT_EQ(set.try_claim(key.make("k", k), 100 * round, 100 * round + 50, make).result,
                Result::inserted);
    EXPECT_EQ(set.try_claim("one-more", 100 * round + 10, 200, make).result, Result::full);
    ASSERT_EQ(set.try_claim("one-more", 100 * round + 60, 100 * round + 70, make).result,
              Result::inserted)
        << "the lapsed keys make room; the alive one stays";
    (void)set.sweep(100 * round + 99);  // what the claim's probe and sweep left of them
    EXPECT_EQ(set.size(), 1u) << "round " << round;
    EXPECT_EQ(set.find("held", 100 * round + 99)->first, held.owner);
    EXPECT_EQ(Peer::check_invariants(set), "");
  }
  live.alive = 0;
  EXPECT_EQ(set.sweep(1000), 1u);
  EXPECT_EQ(set.size(), 0u);
}

TEST(DedupSet, SetExpiryExtendsWindow) {
  DedupSet set(64);
  CountingOwner make;
  const auto a = set.try_claim("debounce", 0, 100, make);
  ASSERT_EQ(a.result, Result::inserted);

  EXPECT_FALSE(set.set_expiry("debounce", a.owner + 1, 1000)) << "only the owner may extend";
  EXPECT_FALSE(set.set_expiry("absent", a.owner, 1000));
  EXPECT_TRUE(set.set_expiry("debounce", a.owner, 200));
  EXPECT_EQ(set.try_claim("debounce", 150, 400, make).result, Result::duplicate);
  EXPECT_EQ(set.try_claim("debounce", 199, 400, make).result, Result::duplicate);
  EXPECT_EQ(set.try_claim("debounce", 200, 400, make).result, Result::inserted);

  // Simple mode: held with no expiry while the job runs, then kept for a TTL after completion.
  const auto b = set.try_claim("simple", 0, DedupSet::kNoExpiry, make);
  ASSERT_EQ(b.result, Result::inserted);
  EXPECT_EQ(set.try_claim("simple", 5000, DedupSet::kNoExpiry, make).result, Result::duplicate);
  EXPECT_TRUE(set.set_expiry("simple", b.owner, 5000 + 300));  // completed at 5000, TTL 300
  EXPECT_EQ(set.try_claim("simple", 5299, DedupSet::kNoExpiry, make).result, Result::duplicate);
  EXPECT_EQ(set.try_claim("simple", 5300, DedupSet::kNoExpiry, make).result, Result::inserted);
  EXPECT_EQ(Peer::check_invariants(set), "");
}

// All keys share one 64-bit hash: only the byte comparison can tell them apart.
std::uint64_t constant_hash(std::string_view) noexcept {
  return 0x0123'4567'89ab'cdefULL;
}

TEST(DedupSet, KeysAreComparedExactlyNotByHash) {
  DedupSet set(8, 1);
  Peer::set_hash(set, &constant_hash);
  CountingOwner make;
  // Same hash, and pairs that differ only in length, in an embedded NUL, or in the last byte.
  const std::vector<std::string> keys = {"a",   "ab",  std::string("a\0", 2), "b", "",
                                         "abc", "abd", std::string(200, 'x')};
  std::vector<std::uint64_t> owners;
  for (const std::string& k : keys) {
    const auto c = set.try_claim(k, 0, DedupSet::kNoExpiry, make);
    ASSERT_EQ(c.result, Result::inserted) << "key '" << k << "' merged with a different key";
    owners.push_back(c.owner);
  }
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const auto c = set.try_claim(keys[i], 0, DedupSet::kNoExpiry, make);
    ASSERT_EQ(c.result, Result::duplicate);
    EXPECT_EQ(c.owner, owners[i]) << "key '" << keys[i] << "'";
  }
  // Remove from the middle of the one long chain; backward shift must keep the rest findable.
  EXPECT_TRUE(set.release(keys[2], owners[2]));
  EXPECT_TRUE(set.release(keys[5], owners[5]));
  EXPECT_EQ(Peer::check_invariants(set), "");
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const auto found = set.find(keys[i], 0);
    if (i == 2 || i == 5) {
      EXPECT_FALSE(found.has_value()) << "key '" << keys[i] << "'";
    } else {
      ASSERT_TRUE(found.has_value()) << "key '" << keys[i] << "'";
      EXPECT_EQ(found->first, owners[i]);
    }
  }
  EXPECT_EQ(make.calls, static_cast<int>(keys.size()));
}

// An entry stores only its hash's low half. These hashes differ only above it, in bits that pick no
// shard of a one-shard set: they share a home slot and a stored hash.
std::uint64_t high_half_hash(std::string_view key) noexcept {
  return (key == "order-1" ? std::uint64_t{1} : std::uint64_t{2}) << 48 | 0x5U;
}

TEST(DedupSet, KeysWhoseHashesDifferOnlyInTheHighHalfStayApart) {
  DedupSet set(8, 1);
  Peer::set_hash(set, &high_half_hash);
  CountingOwner make;
  const auto a = set.try_claim("order-1", 0, DedupSet::kNoExpiry, make);
  const auto b = set.try_claim("order-2", 0, DedupSet::kNoExpiry, make);
  ASSERT_EQ(a.result, Result::inserted);
  ASSERT_EQ(b.result, Result::inserted) << "order-2 merged into order-1";
  EXPECT_TRUE(set.release("order-1", a.owner));
  const auto found = set.find("order-2", 0);
  ASSERT_TRUE(found.has_value()) << "releasing order-1 dropped order-2";
  EXPECT_EQ(found->first, b.owner);
  EXPECT_EQ(Peer::check_invariants(set), "");
}

TEST(DedupSet, FullShardReportsFullNotCrash) {
  DedupSet set(4, 1);
  ASSERT_EQ(set.capacity(), 4U);
  CountingOwner make;
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(set.try_claim("live" + std::to_string(i), 0, DedupSet::kNoExpiry, make).result,
              Result::inserted);
  }
  const auto short_lived = set.try_claim("short", 0, 50, make);
  ASSERT_EQ(short_lived.result, Result::inserted);

  const int calls_before = make.calls;
  const auto full = set.try_claim("extra", 10, 100, make);
  EXPECT_EQ(full.result, Result::full);
  EXPECT_EQ(full.owner, 0U);
  EXPECT_EQ(full.value, 0U);
  EXPECT_EQ(make.calls, calls_before) << "full must not call make_owner";
  EXPECT_EQ(set.try_claim("live1", 10, 100, make).result, Result::duplicate)
      << "a live key is still a duplicate when its shard is full";
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(set.try_claim("more" + std::to_string(i), 10, 100, make).result, Result::full);
  }

  // "short" expires at 50. The full shard reclaims it before refusing, with no sweep() call.
  const auto after = set.try_claim("extra", 50, 100, make);
  EXPECT_EQ(after.result, Result::inserted);
  EXPECT_EQ(set.try_claim("extra2", 60, 100, make).result, Result::full);
  EXPECT_TRUE(set.release("live0", 1));
  EXPECT_EQ(set.try_claim("extra2", 60, 100, make).result, Result::inserted);
  EXPECT_EQ(set.size(), 4U);
  EXPECT_EQ(Peer::check_invariants(set), "");

  // Fullness is per shard: one key per shard, so the second key of a shard is refused.
  DedupSet tiny(8, 8);
  ASSERT_EQ(Peer::shard_capacity(tiny), 1U);
  std::vector<std::string> same_shard;
  for (int i = 0; same_shard.size() < 2; ++i) {
    std::string k = "s" + std::to_string(i);
    if (Peer::shard_of(tiny, k) == 3) same_shard.push_back(std::move(k));
  }
  EXPECT_EQ(tiny.try_claim(same_shard[0], 0, 10, make).result, Result::inserted);
  EXPECT_EQ(tiny.try_claim(same_shard[1], 0, 10, make).result, Result::full);
  EXPECT_EQ(tiny.try_claim(same_shard[1], 10, 20, make).result, Result::inserted);
}

TEST(DedupSet, KeyTooLongRejected) {
  DedupSet set(16, 1, 16);
  CountingOwner make;
  const std::string ok(16, 'k');
  const std::string too_long(17, 'k');
  EXPECT_EQ(set.try_claim(ok, 0, 10, make).result, Result::inserted);
  const auto rejected = set.try_claim(too_long, 0, 10, make);
  EXPECT_EQ(rejected.result, Result::key_too_long);
  EXPECT_EQ(rejected.owner, 0U);
  EXPECT_EQ(make.calls, 1) << "key_too_long must not call make_owner";
  EXPECT_FALSE(set.find(too_long, 0).has_value());
  EXPECT_FALSE(set.release(too_long, 1));
  EXPECT_FALSE(set.set_expiry(too_long, 1, 20));
  EXPECT_EQ(set.size(), 1U);

  DedupSet by_default(16);
  EXPECT_EQ(by_default.try_claim(std::string(256, 'x'), 0, 10, make).result, Result::inserted);
  EXPECT_EQ(by_default.try_claim(std::string(257, 'x'), 0, 10, make).result, Result::key_too_long);
}

TEST(DedupSet, ConstructionRejectsBadOptions) {
  const auto expect_invalid = [](auto make_set, const char* needle) {
    try {
      make_set();
      ADD_FAILURE() << "expected rail::Error mentioning '" << needle << "'";
    } catch (const rail::Error& e) {
      EXPECT_EQ(e.code(), rail::ErrorCode::invalid_option);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_invalid([] { DedupSet s(0); }, "capacity is 0");
  expect_invalid([] { DedupSet s(10, 0); }, "shards is 0");
  expect_invalid([] { DedupSet s(10, 3); }, "shards is 3; expected a power of two");
  expect_invalid([] { DedupSet s(10, std::size_t{1} << 17); }, "shards is 131072");
  expect_invalid([] { DedupSet s(10, 1, 0); }, "max_key_bytes is 0");
  expect_invalid([] { DedupSet s(10, 1, 70000); }, "max_key_bytes is 70000");
  expect_invalid([] { DedupSet s(std::size_t{1} << 40, 1); }, "keys per shard");

  EXPECT_EQ(DedupSet(1000, 64).capacity(), 1024U) << "rounded up to whole shards";
  EXPECT_EQ(DedupSet(10, 1).capacity(), 10U);
  EXPECT_EQ(DedupSet(3, 4).capacity(), 4U) << "every shard holds at least one key";
}

TEST(DedupSet, HashBytesSpreadsSequentialIds) {
  // Sequential ids are the common case ("job-1", "job-2", ...). They must not collide in 64 bits,
  // and they must spread evenly over shards.
  constexpr int kKeys = 1 << 20;
  constexpr int kShards = 64;
  std::unordered_set<std::uint64_t> seen;
  seen.reserve(kKeys);
  std::array<int, kShards> per_shard{};
  KeyBuf buf;
  for (int i = 0; i < kKeys; ++i) {
    const std::uint64_t h = hash_bytes(buf.make("job-", static_cast<std::uint64_t>(i)));
    ASSERT_TRUE(seen.insert(h).second) << "64-bit collision at job-" << i;
    ++per_shard[(h >> 32) % kShards];
  }
  // Mean 16384 per shard, binomial sd ~127; a 5% band is ~6.5 sd.
  for (int count : per_shard) {
    EXPECT_NEAR(count, kKeys / kShards, kKeys / kShards / 20);
  }
  EXPECT_NE(hash_bytes("a"), hash_bytes(std::string_view("a\0", 2)));
  EXPECT_NE(hash_bytes(""), hash_bytes(std::string_view("\0", 1)));
  EXPECT_EQ(hash_bytes("same"), hash_bytes(std::string("same")));
}

TEST(DedupSet, ExpiredEntriesReclaimedSoMemoryDoesNotGrow) {
  // 1M distinct ids, each with a 100-tick TTL, one per tick: about 100 live at any time, in a set
  // of capacity 1000. Without reclamation it would be full after ~1000 ids.
  constexpr std::int64_t kTtl = 100;
  constexpr std::uint64_t kIds = 1'000'000;
  DedupSet set(1000);
  std::uint64_t next_owner = 1;
  const auto make = [&next_owner]() noexcept {
    const std::uint64_t owner = next_owner++;
    return std::pair{owner, static_cast<std::uint32_t>(owner)};
  };
  KeyBuf buf;
  std::uint64_t not_inserted = 0;
  std::uint64_t over_capacity = 0;
  std::uint64_t wrong_after_sweep = 0;

#if RAIL_TEST_COUNTS_ALLOCATIONS
  const std::uint64_t allocations_before = rail::test::allocations();
#endif
  for (std::uint64_t i = 0; i < kIds; ++i) {
    const auto now = static_cast<std::int64_t>(i);
    const auto c = set.try_claim(buf.make("dedup-", i), now, now + kTtl, make);
    not_inserted += c.result != Result::inserted ? 1 : 0;
    over_capacity += set.size() > set.capacity() ? 1 : 0;
    if (i % 10'000 == 9'999) {
      // After a sweep exactly the ids claimed in the last kTtl ticks remain.
      set.sweep(now);
      wrong_after_sweep += set.size() != static_cast<std::size_t>(kTtl) ? 1 : 0;
    }
  }
#if RAIL_TEST_COUNTS_ALLOCATIONS
  EXPECT_EQ(rail::test::allocations() - allocations_before, 0U)
      << "try_claim, sweep or size allocated in steady state";
#endif
  EXPECT_EQ(not_inserted, 0U) << "a distinct id was refused: expired entries were not reclaimed";
  EXPECT_EQ(over_capacity, 0U);
  EXPECT_EQ(wrong_after_sweep, 0U);
  EXPECT_EQ(set.sweep(static_cast<std::int64_t>(kIds) + kTtl), static_cast<std::size_t>(kTtl));
  EXPECT_EQ(set.size(), 0U);
  EXPECT_EQ(Peer::check_invariants(set), "");
}

// --- model test
// -------------------------------------------------------------------------------------

// Keeps only bits that choose among 4 shards and 8 home slots. 48 keys then share few hashes, so
// chains are long and exact hash ties are common.
std::uint64_t coarse_hash(std::string_view key) noexcept {
  return hash_bytes(key) & ((std::uint64_t{3} << 32) | 7U);
}

struct ModelParam {
  std::size_t shards;
  bool coarse;
};
// PrintTo: gtest would otherwise print the struct's raw bytes, padding included.
void PrintTo(const ModelParam& param, std::ostream* os) {
  *os << "shards=" << param.shards << (param.coarse ? ", colliding hash" : ", real hash");
}

class DedupSetModel : public ::testing::TestWithParam<ModelParam> {};

TEST_P(DedupSetModel, BackwardShiftKeepsProbeChainsIntact) {
  // Random claims, releases, expiry changes, finds, sweeps and clock steps, checked against a
  // std::unordered_map reference, with the table invariants (every entry reachable from its
  // home, counts and key slots consistent) checked after every step.
  const ModelParam param = GetParam();
  constexpr int kOps = 200'000;
  constexpr int kKeys = 48;
  const std::uint32_t seed =
      0x5eed0000U + static_cast<std::uint32_t>(param.shards) * 2U + (param.coarse ? 1U : 0U);
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  DedupSet set(12, param.shards);
  if (param.coarse) Peer::set_hash(set, &coarse_hash);
  const std::size_t cap = Peer::shard_capacity(set);

  struct Rec {
    std::uint64_t owner;
    std::uint32_t value;
    std::int64_t expires;
  };
  std::unordered_map<std::string, Rec> model;
  std::vector<std::string> keys;
  for (int i = 0; i < kKeys; ++i)
    keys.push_back("key-" + std::to_string(i * 7919));

  std::int64_t now = 0;
  std::uint64_t next_owner = 1;
  const auto live = [&](const std::string& k) {
    const auto it = model.find(k);
    return it != model.end() && it->second.expires > now;
  };
  const auto live_in_shard = [&](std::size_t shard) {
    std::size_t n = 0;
    for (const auto& [k, rec] : model) {
      n += rec.expires > now && Peer::shard_of(set, k) == shard ? 1 : 0;
    }
    return n;
  };
  const auto random_expiry = [&]() -> std::int64_t {
    const auto roll = rng() % 10;
    if (roll == 0) return DedupSet::kNoExpiry;
    if (roll == 1) return now;  // already expired when stored: a zero-length window
    return now + 1 + static_cast<std::int64_t>(rng() % 40);
  };

  int inserted = 0, duplicates = 0, fulls = 0;
  for (int op = 0; op < kOps; ++op) {
    const std::string& k = keys[rng() % kKeys];
    const auto roll = rng() % 100;
    if (roll < 45) {
      const std::int64_t expires = random_expiry();
      bool called = false;
      const auto c = set.try_claim(k, now, expires, [&]() noexcept {
        called = true;
        const std::uint64_t owner = next_owner++;
        return std::pair{owner, static_cast<std::uint32_t>(owner ^ 0xabcdU)};
      });
      if (live(k)) {
        ASSERT_EQ(c.result, Result::duplicate) << "op " << op;
        ASSERT_EQ(c.owner, model[k].owner) << "op " << op;
        ASSERT_EQ(c.value, model[k].value) << "op " << op;
        ASSERT_FALSE(called);
        ++duplicates;
      } else if (live_in_shard(Peer::shard_of(set, k)) >= cap) {
        ASSERT_EQ(c.result, Result::full) << "op " << op;
        ASSERT_FALSE(called);
        ++fulls;
      } else {
        ASSERT_EQ(c.result, Result::inserted) << "op " << op;
        ASSERT_TRUE(called);
        model[k] = Rec{c.owner, c.value, expires};
        ++inserted;
      }
    } else if (roll < 60) {
      // Release by the recorded owner, or by a stranger one time in four. The owner's own
      // release goes through release_claim half the time (owners are unique here, as it needs).
      const auto it = model.find(k);
      const bool stranger = rng() % 4 == 0;
      const std::uint64_t owner = it == model.end() ? 12345 : it->second.owner + (stranger ? 1 : 0);
      const bool by_claim = it != model.end() && !stranger && rng() % 2 == 0;
      const bool removed = by_claim ? set.release_claim(k, owner) : set.release(k, owner);
      if (it == model.end() || stranger) {
        ASSERT_FALSE(removed) << "op " << op;
      } else if (it->second.expires > now) {
        ASSERT_TRUE(removed) << "op " << op;
        model.erase(it);
      } else {
        // Expired: it may already have been reclaimed. Either way it is gone now.
        model.erase(it);
      }
    } else if (roll < 70) {
      const auto it = model.find(k);
      const std::int64_t expires = random_expiry();
      const std::uint64_t owner = it == model.end() ? 12345 : it->second.owner;
      const bool found = set.set_expiry(k, owner, expires);
      if (it == model.end()) {
        ASSERT_FALSE(found) << "op " << op;
      } else if (it->second.expires > now) {
        ASSERT_TRUE(found) << "op " << op;
        it->second.expires = expires;
      } else if (found) {
        it->second.expires = expires;  // revived: no claim had replaced it
      } else {
        model.erase(it);  // it had been reclaimed
      }
    } else if (roll < 85) {
      const auto found = set.find(k, now);
      if (live(k)) {
        ASSERT_TRUE(found.has_value()) << "op " << op;
        ASSERT_EQ(found->first, model[k].owner);
        ASSERT_EQ(found->second, model[k].value);
      } else {
        ASSERT_FALSE(found.has_value()) << "op " << op;
      }
    } else if (roll < 87) {
      set.sweep(now);
      std::erase_if(model, [&](const auto& kv) { return kv.second.expires <= now; });
      ASSERT_EQ(set.size(), model.size()) << "op " << op;
    } else {
      now += static_cast<std::int64_t>(rng() % 5);
    }
    const std::string broken = Peer::check_invariants(set);
    ASSERT_EQ(broken, "") << "op " << op;
    std::size_t live_count = 0;
    for (const auto& kv : model)
      live_count += kv.second.expires > now ? 1 : 0;
    ASSERT_GE(set.size(), live_count) << "op " << op;
    ASSERT_LE(set.size(), set.capacity()) << "op " << op;
  }
  // The mix must have exercised every outcome, or the test proves less than it claims.
  EXPECT_GT(inserted, 1000);
  EXPECT_GT(duplicates, 1000);
  EXPECT_GT(fulls, 100);
}

INSTANTIATE_TEST_SUITE_P(DedupSet, DedupSetModel,
                         ::testing::Values(ModelParam{1, false}, ModelParam{4, false},
                                           ModelParam{1, true}, ModelParam{4, true}),
                         [](const ::testing::TestParamInfo<ModelParam>& info) {
                           return "Shards" + std::to_string(info.param.shards) +
                                  (info.param.coarse ? "_CollidingHash" : "_RealHash");
                         });

// --- probed size
// ------------------------------------------------------------------------------------

// A shard probes only as many slots as its keys need (DedupTable): it doubles before the load
// passes 1/2 and halves once releases or a sweep leave it below 1/8, so a window holding few ids
// works in a few lines of its storage.
TEST(DedupSet, AShardProbesOnlyAsManySlotsAsItsKeysNeed) {
  DedupSet set(1000, 1);
  ASSERT_EQ(Peer::storage_size(set, 0), 2048U);
  EXPECT_EQ(Peer::probed_size(set, 0), DedupTable::kMinSize) << "an empty shard";
  CountingOwner make;
  std::vector<std::pair<std::string, std::uint64_t>> held;
  for (int i = 0; i < 600; ++i) {
    const std::string key = std::to_string(i) + "k";
    const auto c = set.try_claim(key, 0, DedupSet::kNoExpiry, make);
    ASSERT_EQ(c.result, Result::inserted) << key;
    held.emplace_back(key, c.owner);
    const std::size_t n = held.size();
    ASSERT_EQ(Peer::probed_size(set, 0), std::max(DedupTable::kMinSize, std::bit_ceil(2 * n)))
        << "the least size at load <= 1/2, after " << n << " keys";
  }
  EXPECT_EQ(Peer::check_invariants(set), "");
  // Down to 10: the size halves while the load is below 1/8, to 64 (10 in 64 is 1/6.4).
  while (held.size() > 10) {
    ASSERT_TRUE(set.release_claim(held.back().first, held.back().second));
    held.pop_back();
  }
  EXPECT_EQ(Peer::probed_size(set, 0), 64U);
  EXPECT_EQ(Peer::check_invariants(set), "");
  for (const auto& [key, owner] : held) {
    const auto found = set.find(key, 0);
    ASSERT_TRUE(found.has_value()) << key << " lost by the shrinks";
    EXPECT_EQ(found->first, owner);
  }
  // A sweep shrinks too: 200 ids with a ttl, expired and swept, leave the 10.
  for (int i = 0; i < 200; ++i)
    ASSERT_EQ(set.try_claim(std::to_string(i) + "t", 0, 100, make).result, Result::inserted);
  EXPECT_EQ(Peer::probed_size(set, 0), 512U);
  EXPECT_EQ(set.sweep(100), 200U);
  EXPECT_EQ(Peer::probed_size(set, 0), 64U);
  EXPECT_EQ(Peer::check_invariants(set), "");
}

// Random fills and drains of one shard, with real and colliding hashes: every grow and shrink
// rehashes in place, and afterwards every key is found with its owner, no released key is, and
// the table invariants hold (every entry reachable from its home, nothing past the probed size,
// no entry left marked moving).
TEST(DedupSet, GrowingAndShrinkingInPlaceKeepsEveryKeyReachable) {
  for (const bool coarse : {false, true}) {
    const std::uint32_t seed = coarse ? 0x5eed0101U : 0x5eed0100U;
    SCOPED_TRACE("seed " + std::to_string(seed) + (coarse ? ", colliding hash" : ", real hash"));
    std::mt19937_64 rng(seed);
    DedupSet set(400, 1);
    if (coarse) Peer::set_hash(set, &coarse_hash);
    std::unordered_map<std::string, std::uint64_t> model;
    std::vector<std::string> keys;
    for (int i = 0; i < 800; ++i)
      keys.push_back("key-" + std::to_string(i * 7919));
    std::uint64_t next_owner = 1;
    std::set<std::size_t> sizes;
    for (int phase = 0; phase < 24; ++phase) {
      // Alternately toward a random fill and a random drain, so that the size swings both ways.
      const std::size_t target = phase % 2 == 0 ? 50 + rng() % 350 : rng() % 20;
      for (int step = 0; step < 2000 && model.size() != target; ++step) {
        const std::string& k = keys[rng() % keys.size()];
        const auto it = model.find(k);
        if (model.size() < target) {
          const auto c = set.try_claim(k, 0, DedupSet::kNoExpiry, [&]() noexcept {
            return std::pair<std::uint64_t, std::uint32_t>{next_owner++, 0};
          });
          if (it != model.end()) {
            ASSERT_EQ(c.result, Result::duplicate) << k;
            ASSERT_EQ(c.owner, it->second) << k;
          } else {
            ASSERT_EQ(c.result, Result::inserted) << k;
            model.emplace(k, c.owner);
          }
        } else if (it != model.end()) {
          ASSERT_TRUE(set.release_claim(k, it->second)) << k;
          model.erase(it);
        }
        sizes.insert(Peer::probed_size(set, 0));
        ASSERT_EQ(Peer::check_invariants(set), "") << "phase " << phase << ", step " << step;
      }
      for (const auto& [key, owner] : model) {
        const auto found = set.find(key, 0);
        ASSERT_TRUE(found.has_value()) << key << ", phase " << phase;
        ASSERT_EQ(found->first, owner) << key;
      }
      ASSERT_EQ(set.size(), model.size()) << "phase " << phase;
    }
    // The swings went through every size from the least to past 512.
    EXPECT_TRUE(sizes.count(DedupTable::kMinSize) == 1 && sizes.count(512) == 1)
        << "sizes seen: " << sizes.size();
  }
}

// --- concurrency
// ------------------------------------------------------------------------------------

TEST(DedupSet, SpinLockIsMutuallyExclusive) {
  // A plain (non-atomic) counter under the lock: a lost update, or a ThreadSanitizer report, means
  // the lock's acquire/release pairing is broken.
  const Watchdog watchdog(kDeadline, "SpinLockIsMutuallyExclusive");
  constexpr int kThreads = 8;
  const int per_thread = scaled(100'000);
  Peer::Lock lock;
  std::uint64_t counter = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < per_thread; ++i) {
        lock.lock();
        ++counter;
        lock.unlock();
      }
    });
  }
  for (auto& th : threads)
    th.join();
  EXPECT_EQ(counter, static_cast<std::uint64_t>(kThreads) * per_thread);
}

TEST(DedupSet, ConcurrentSameKeyExactlyOneWins) {
  // 16 threads (8 per core here) claim the same key at each barrier release. Exactly one may
  // insert. The others must see that winner's owner and value. The barrier's completion step
  // checks the round and releases the key, so the next round claims it again.
  const Watchdog watchdog(kDeadline, "ConcurrentSameKeyExactlyOneWins");
  constexpr int kThreads = 16;
  const int rounds = scaled(3000);
  DedupSet set(64);
  std::atomic<std::uint64_t> next_owner{1};
  std::atomic<int> make_calls{0};
  std::vector<DedupSet::Claim> results(kThreads);
  int round = 0;
  int bad_rounds = 0;
  std::string first_failure;

  const auto key_of = [](int r) { return "same-" + std::to_string(r % 5); };
  const auto check_round = [&]() noexcept {
    // Runs on one thread while all others wait in the barrier, so plain accesses are ordered.
    int winners = 0;
    const DedupSet::Claim* winner = nullptr;
    for (const auto& c : results) {
      if (c.result == Result::inserted) {
        ++winners;
        winner = &c;
      }
    }
    // relaxed: the barrier orders the claimers' increments before this completion step.
    bool ok = winners == 1 && make_calls.exchange(0, std::memory_order_relaxed) == 1;
    for (const auto& c : results) {
      ok = ok && winner != nullptr &&
           (c.result == Result::inserted || (c.result == Result::duplicate &&
                                             c.owner == winner->owner && c.value == winner->value));
    }
    ok = ok && winner != nullptr && set.release(key_of(round), winner->owner);
    if (!ok && bad_rounds++ == 0) {
      first_failure =
          "round " + std::to_string(round) + ": " + std::to_string(winners) + " winners";
    }
    ++round;
  };
  std::barrier sync(kThreads, check_round);

  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < rounds; ++r) {
        results[t] = set.try_claim(key_of(r), 0, DedupSet::kNoExpiry, [&]() noexcept {
          // relaxed: both counters are only read after the barrier, which orders them.
          make_calls.fetch_add(1, std::memory_order_relaxed);
          const std::uint64_t owner = next_owner.fetch_add(1, std::memory_order_relaxed);
          return std::pair{owner, static_cast<std::uint32_t>(owner * 3)};
        });
        sync.arrive_and_wait();
      }
    });
  }
  for (auto& th : threads)
    th.join();
  EXPECT_EQ(bad_rounds, 0) << first_failure;
  EXPECT_EQ(round, rounds);
  EXPECT_EQ(set.size(), 0U);
  EXPECT_EQ(Peer::check_invariants(set), "");
}

TEST(DedupSet, ConcurrentDistinctKeysAllInserted) {
  // 8 threads insert disjoint key sets at the same time, then release them at the same time.
  // Every insert must succeed, every key must map to its own owner, and the set must end empty
  // and structurally intact.
  const Watchdog watchdog(kDeadline, "ConcurrentDistinctKeysAllInserted");
  constexpr int kThreads = 8;
  const int per_thread = scaled(20'000);
  const std::size_t total = static_cast<std::size_t>(kThreads) * per_thread;
  DedupSet set(total * 2);
  std::atomic<std::uint64_t> next_owner{1};
  std::atomic<int> failures{0};
  std::vector<std::vector<std::uint64_t>> owners(kThreads, std::vector<std::uint64_t>(per_thread));

  const auto run = [&](auto body) {
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back(body, t);
    for (auto& th : threads)
      th.join();
  };
  run([&](int t) {
    KeyBuf buf;
    const std::string prefix = thread_prefix(t);
    for (int i = 0; i < per_thread; ++i) {
      const auto c = set.try_claim(buf.make(prefix, i), 0, DedupSet::kNoExpiry, [&]() noexcept {
        // relaxed: only uniqueness matters; the shard lock orders the stored result.
        const std::uint64_t owner = next_owner.fetch_add(1, std::memory_order_relaxed);
        return std::pair{owner, static_cast<std::uint32_t>(i)};
      });
      owners[t][i] = c.owner;
      if (c.result != Result::inserted) failures.fetch_add(1, std::memory_order_relaxed);
    }
  });
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(set.size(), total);
  EXPECT_EQ(Peer::check_invariants(set), "");
  std::unordered_set<std::uint64_t> unique_owners;
  KeyBuf buf;
  for (int t = 0; t < kThreads; ++t) {
    const std::string prefix = thread_prefix(t);
    for (int i = 0; i < per_thread; ++i) {
      const auto found = set.find(buf.make(prefix, i), 0);
      ASSERT_TRUE(found.has_value()) << prefix << i;
      ASSERT_EQ(found->first, owners[t][i]);
      ASSERT_EQ(found->second, static_cast<std::uint64_t>(i));
      ASSERT_TRUE(unique_owners.insert(found->first).second) << "owner handed out twice";
    }
  }
  run([&](int t) {
    KeyBuf local;
    const std::string prefix = thread_prefix(t);
    for (int i = 0; i < per_thread; ++i) {
      if (!set.release(local.make(prefix, i), owners[t][i])) {
        failures.fetch_add(1, std::memory_order_relaxed);
      }
    }
  });
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(set.size(), 0U);
  EXPECT_EQ(Peer::check_invariants(set), "");
}

TEST(DedupSet, ConcurrentMixedStress) {
  // 8 threads claim, re-claim, find, extend, release and let lapse 48 keys in a set of capacity 24
  // (4 shards of 6, tables of 16), so chains are long, backward shifts frequent and `full` common.
  // A shared clock moves forward throughout, and lazy reclamation and sweeps run concurrently.
  //
  // "At most one live owner" is checked with a per-key atomic count of owners that believe they
  // hold the key. make_owner runs under the shard lock at the moment of insertion, and it
  // increments the count, which must have been 0. A holder decrements before it gives the key
  // up, by release() or by letting the claim lapse. To lapse, it sets expires_at = clock + d and
  // then advances the clock by d, so every later claimer sees the entry expired. Live claims
  // otherwise expire kFar ahead, which the clock never reaches during the test. A claim therefore
  // ends only when its holder says so, and the count is exact.
  const Watchdog watchdog(kDeadline, "ConcurrentMixedStress");
  constexpr int kThreads = 8;
  constexpr int kKeys = 48;
  constexpr std::size_t kMaxHeld = 3;
  constexpr std::int64_t kFar = std::int64_t{1} << 40;
  const int ops_per_thread = scaled(300'000);
  DedupSet set(24, 4);

  std::array<std::string, kKeys> keys;
  for (int k = 0; k < kKeys; ++k)
    keys[k] = "mixed-" + std::to_string(k);
  std::array<std::atomic<int>, kKeys> live_owners{};
  std::atomic<std::int64_t> clock{0};
  std::atomic<std::uint64_t> next_owner{1};
  std::atomic<int> two_owners{0};     // make_owner found another live owner: the invariant broke
  std::atomic<int> lost_claim{0};     // a holder's own claim was missing or changed
  std::atomic<int> bad_duplicate{0};  // a duplicate named a claim its claimer had given up
  std::atomic<int> stranger_ok{0};    // release/set_expiry by owner 0 succeeded
  std::atomic<long> inserts{0}, duplicates{0}, fulls{0}, lapses{0}, releases{0};

  // The clock: acquire on read pairs with the release in advance(). A claimer that reads a lapsing
  // holder's advance therefore locks the shard after that holder's set_expiry, and it sees the
  // entry expired.
  const auto now = [&clock] { return clock.load(std::memory_order_acquire); };
  const auto advance = [&clock](std::int64_t d) { clock.fetch_add(d, std::memory_order_release); };

  const auto worker = [&](int t) {
    std::mt19937_64 rng(0xC0FFEEULL + static_cast<std::uint64_t>(t));
    struct Held {
      int key;
      std::uint64_t owner;
    };
    std::vector<Held> held;
    held.reserve(kMaxHeld);
    std::array<std::uint64_t, kKeys> given_up{};  // our most recent owner id per key, given up
    const auto far_expiry = [&] {
      return rng() % 5 == 0 ? DedupSet::kNoExpiry
                            : now() + kFar + static_cast<std::int64_t>(rng() % 1000);
    };
    const auto give_up = [&](std::size_t h, bool by_release) {
      const Held g = held[h];
      // Decrement first. Until the claim is really released or lapsed nobody else can insert, so a
      // new owner never finds our 1 still counted. relaxed: the shard lock (our unlock, their
      // lock) orders this before their increment.
      live_owners[g.key].fetch_sub(1, std::memory_order_relaxed);
      given_up[g.key] = g.owner;
      if (by_release) {
        if (!set.release(keys[g.key], g.owner)) lost_claim.fetch_add(1);
        releases.fetch_add(1, std::memory_order_relaxed);
      } else {
        const std::int64_t d = static_cast<std::int64_t>(rng() % 3);
        if (!set.set_expiry(keys[g.key], g.owner, now() + d)) lost_claim.fetch_add(1);
        advance(d);
        lapses.fetch_add(1, std::memory_order_relaxed);
      }
      held[h] = held.back();
      held.pop_back();
    };

    for (int op = 0; op < ops_per_thread; ++op) {
      if (t == 0 && op % 256 == 0) set.sweep(now());
      if (rng() % 8 == 0) advance(1);
      const auto roll = rng() % 100;
      if (!held.empty() && (held.size() == kMaxHeld || roll < 40)) {
        const std::size_t h = rng() % held.size();
        const Held g = held[h];
        const auto action = rng() % 5;
        if (action == 0) {
          const auto c = set.try_claim(keys[g.key], now(), now() + 10, []() noexcept {
            return std::pair<std::uint64_t, std::uint32_t>{0, 0};
          });
          if (c.result != Result::duplicate || c.owner != g.owner) lost_claim.fetch_add(1);
        } else if (action == 1) {
          const auto found = set.find(keys[g.key], now());
          if (!found || found->first != g.owner) lost_claim.fetch_add(1);
        } else if (action == 2) {
          if (!set.set_expiry(keys[g.key], g.owner, far_expiry())) lost_claim.fetch_add(1);
        } else {
          give_up(h, action == 3);
        }
        continue;
      }
      const int k = static_cast<int>(rng() % kKeys);
      if (std::any_of(held.begin(), held.end(), [k](const Held& g) { return g.key == k; })) {
        continue;
      }
      if (roll < 45) {
        // Owner 0 is never handed out, so these must fail whoever holds the key.
        if (set.release(keys[k], 0)) stranger_ok.fetch_add(1);
        if (set.set_expiry(keys[k], 0, 1)) stranger_ok.fetch_add(1);
        continue;
      }
      const auto c = set.try_claim(keys[k], now(), far_expiry(), [&]() noexcept {
        // Under the shard lock, at the instant of insertion: nobody else may hold the key now.
        if (live_owners[k].fetch_add(1, std::memory_order_relaxed) != 0) two_owners.fetch_add(1);
        const std::uint64_t owner = next_owner.fetch_add(1, std::memory_order_relaxed);
        return std::pair{owner, static_cast<std::uint32_t>(k)};
      });
      if (c.result == Result::inserted) {
        held.push_back({k, c.owner});
        inserts.fetch_add(1, std::memory_order_relaxed);
      } else if (c.result == Result::duplicate) {
        // A claim we gave up is released, or expired at every clock value we read from now on.
        if (c.owner == 0 || c.owner == given_up[k] || c.value != static_cast<std::uint32_t>(k)) {
          bad_duplicate.fetch_add(1);
        }
        duplicates.fetch_add(1, std::memory_order_relaxed);
      } else {
        fulls.fetch_add(1, std::memory_order_relaxed);
      }
    }
    while (!held.empty())
      give_up(held.size() - 1, true);
  };

  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back(worker, t);
  for (auto& th : threads)
    th.join();

  EXPECT_EQ(two_owners.load(), 0) << "a key had two live owners";
  EXPECT_EQ(lost_claim.load(), 0) << "a holder's live claim was missing or changed";
  EXPECT_EQ(bad_duplicate.load(), 0);
  EXPECT_EQ(stranger_ok.load(), 0);
  for (int k = 0; k < kKeys; ++k) {
    EXPECT_EQ(live_owners[k].load(), 0) << keys[k];
    EXPECT_FALSE(set.find(keys[k], clock.load()).has_value()) << keys[k];
  }
  EXPECT_EQ(Peer::check_invariants(set), "");
  set.sweep(clock.load());
  EXPECT_EQ(set.size(), 0U);
  // Every path must have run, or the invariant was checked against too little. The floors sit
  // far below what any schedule produces (`full` depends most on interleaving: it ranges from
  // hundreds under ThreadSanitizer to tens of thousands in Release), so they never flake.
  EXPECT_GT(inserts.load(), 1000);
  EXPECT_GT(duplicates.load(), 100);
  EXPECT_GT(fulls.load(), 10);
  EXPECT_GT(lapses.load(), 100);
  EXPECT_GT(releases.load(), 100);
  std::printf("mixed stress: %ld inserts, %ld duplicates, %ld full, %ld lapses, %ld releases\n",
              inserts.load(), duplicates.load(), fulls.load(), lapses.load(), releases.load());
}

}  // namespace
}  // namespace rail::detail
