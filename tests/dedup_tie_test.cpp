// Tests for DedupSet's claims tied to their owners (DedupSet::Tie::owner): such a claim is live
// while the liveness hook finds its owner alive, goes with its owner without a release, and is
// reclaimed by the claims that meet it: a probe of its own key, or the sweep that a claim makes
// before it grows or fills a shard.
#include <gtest/gtest.h>

#include <cstdint>
#include <deque>
#include <set>
#include <string>
#include <string_view>
#include <utility>

#include "rail/detail/dedup_set.hpp"
#include "support/dedup_set_peer.hpp"

namespace rail::detail {
namespace {

using Result = DedupSet::Claim::Result;
using Tie = DedupSet::Tie;
using Peer = DedupSetTestPeer;

// Owners: the liveness hook of these tests. An owner in `alive` is alive, whatever the tie, and
// the hook counts the asks of each tie.
struct Owners {
  std::set<std::uint64_t> alive;
  int owner_asks = 0;
  int past_expiry_asks = 0;
  static bool of(const void* ctx, std::uint64_t owner, std::uint32_t, Tie tie) noexcept {
    auto* const self = static_cast<Owners*>(const_cast<void*>(ctx));
    ++(tie == Tie::owner ? self->owner_asks : self->past_expiry_asks);
    return self->alive.count(owner) != 0;
  }
};

// A make_owner that hands out 1, 2, 3, ... and makes each new owner alive before the claim is
// seen, as the engine's claim stores its job in the slot under the shard lock.
struct LiveOwner {
  Owners& owners;
  std::uint64_t next = 1;
  std::pair<std::uint64_t, std::uint32_t> operator()() noexcept {
    const std::uint64_t owner = next++;
    owners.alive.insert(owner);
    return {owner, 0};
  }
};

// A make_owner whose owners nobody made alive.
struct CountingOwnerNotAlive {
  std::uint64_t next = 1;
  std::pair<std::uint64_t, std::uint32_t> operator()() noexcept { return {next++, 0}; }
};

constexpr std::int64_t kNever = DedupSet::kNoExpiry;

// key_of(prefix, n): "<prefix><n>", by appends (GCC 12 warns a false -Wrestrict on `"k" + ...`).
std::string key_of(std::string_view prefix, std::uint64_t n) {
  std::string key(prefix);
  key += std::to_string(n);
  return key;
}

// TiedWindow: a window of `ids` ids over `shards` shards whose hook asks `owners`, and claims
// made by `make`.
struct TiedWindow {
  DedupSet set;
  Owners owners;
  LiveOwner make{owners};
  explicit TiedWindow(std::size_t ids, std::size_t shards = 64) : set(ids, shards) {
    set.watch_with(&Owners::of, &owners);
  }
  /// fill(prefix, n): claims ids prefix0 .. prefix<n-1>, tied to live owners; how many it made.
  int fill(std::string_view prefix, int n) {
    int made = 0;
    for (int i = 0; i < n; ++i)
      made += set.try_claim(key_of(prefix, i), 0, kNever, make, 0, Tie::owner).result ==
              Result::inserted;
    return made;
  }
};

// TiedClaims: the tests of one small window.
struct TiedClaims : ::testing::Test {
  TiedWindow window{64};
  DedupSet& set = window.set;
  Owners& owners = window.owners;
  LiveOwner& make = window.make;
};

TEST_F(TiedClaims, AnOwnerTiedClaimIsLiveWhileItsOwnerIsAndGoesWithItWithoutARelease) {
  const auto a = set.try_claim("order-1", 0, kNever, make, 0, Tie::owner);
  ASSERT_EQ(a.result, Result::inserted);
  const auto dup = set.try_claim("order-1", 10, kNever, make, 0, Tie::owner);
  EXPECT_EQ(dup.result, Result::duplicate);
  EXPECT_EQ(dup.owner, a.owner);
  EXPECT_EQ(set.find("order-1", 10)->first, a.owner);
  EXPECT_EQ(set.tie_of("order-1", a.owner), Tie::owner);

  owners.alive.erase(a.owner);  // its job ended: nobody told the set
  EXPECT_FALSE(set.find("order-1", 20).has_value());
  const auto b = set.try_claim("order-1", 20, kNever, make, 0, Tie::owner);
  ASSERT_EQ(b.result, Result::inserted) << "the id is free once its owner went";
  EXPECT_NE(b.owner, a.owner);
  EXPECT_EQ(set.size(), 1u) << "the probe reclaimed the gone owner's entry";
  EXPECT_EQ(Peer::check_invariants(set), "");
}

TEST_F(TiedClaims, AnOwnerTiedClaimStillEndsAtItsExpiry) {
  const auto a = set.try_claim("digest", 0, 100, make, 0, Tie::owner);
  ASSERT_EQ(a.result, Result::inserted);
  EXPECT_EQ(set.try_claim("digest", 99, kNever, make).result, Result::duplicate);
  EXPECT_EQ(set.try_claim("digest", 100, kNever, make).result, Result::inserted)
      << "live needs both: its owner alive and its expiry ahead";
}

TEST_F(TiedClaims, AClaimHeldForASuccessorOutlivesItsOwnerAndItsExpiryUntilTakenOver) {
  const auto a = set.try_claim("sync", 0, 100, make, 0, Tie::owner);
  ASSERT_EQ(a.result, Result::inserted);
  EXPECT_FALSE(set.hold_for_successor("sync", a.owner + 1)) << "only its owner's claim";
  ASSERT_TRUE(set.hold_for_successor("sync", a.owner));  // an add was kept for after the job
  EXPECT_EQ(set.tie_of("sync", a.owner), Tie::owner) << "its tie stays; the hold overrides it";
  EXPECT_TRUE(set.set_expiry("sync", a.owner, 50));  // a duplicate's extend moves the expiry
  owners.alive.erase(a.owner);
  EXPECT_EQ(set.try_claim("sync", 500, kNever, make).result, Result::duplicate)
      << "past its owner's end and its expiry";
  EXPECT_EQ(set.sweep(500), 0u);
  const auto next = set.try_claim("sync", 600, kNever, make, a.owner, Tie::owner);
  ASSERT_EQ(next.result, Result::inserted) << "the successor takes it over in place";
  EXPECT_EQ(set.tie_of("sync", next.owner), Tie::owner);
  owners.alive.erase(next.owner);
  EXPECT_EQ(set.sweep(700), 1u);
  EXPECT_EQ(Peer::check_invariants(set), "");
}

TEST(DedupTie, AProbeAsksAboutAnotherKeysTiedEntryOnlyInASweep) {
  DedupSet set(64, 1);
  // Every key hashes home to slot 0 of the one shard: each probe walks the whole chain.
  Peer::set_hash(set, [](std::string_view key) noexcept -> std::uint64_t {
    return key.size() * 8;  // a home of 0 in a table of 8, distinct per key length
  });
  Owners owners;
  set.watch_with(&Owners::of, &owners);
  LiveOwner make{owners};
  ASSERT_EQ(set.try_claim("a", 0, kNever, make, 0, Tie::owner).result, Result::inserted);
  EXPECT_EQ(owners.owner_asks, 1) << "a tied claim checks that its new owner is alive";
  ASSERT_EQ(set.try_claim("bb", 0, kNever, make, 0, Tie::owner).result, Result::inserted);
  EXPECT_EQ(owners.owner_asks, 2) << "another key's tied entry in the chain costs no ask";
  EXPECT_EQ(set.try_claim("a", 0, kNever, make, 0, Tie::owner).result, Result::duplicate);
  EXPECT_EQ(owners.owner_asks, 3) << "its own key's entry is asked about";
  owners.alive.clear();
  EXPECT_EQ(set.try_claim("ccc", 0, kNever, make, 0, Tie::owner).result, Result::inserted);
  EXPECT_EQ(set.size(), 3u) << "gone owners' entries in the chain stay until a sweep";
  // The fifth entry would take the load of the 8-slot table past 1/2: the claim sweeps first.
  EXPECT_EQ(set.try_claim("dddd", 0, kNever, make, 0, Tie::owner).result, Result::inserted);
  EXPECT_EQ(set.try_claim("eeeee", 0, kNever, make, 0, Tie::owner).result, Result::inserted);
  EXPECT_EQ(set.size(), 3u) << "the sweep before the grow took the two gone owners' entries";
  EXPECT_EQ(Peer::probed_size(set, 0), 8u) << "and the table did not grow";
  EXPECT_EQ(Peer::check_invariants(set), "");
}

// Jobs end in the order they were added, `live` of them at a time: the table stays the size that
// `live` entries need, however many claims pass through, and the sweeps ask about each entry a
// bounded number of times (a sweep comes only after size/8 claims or more).
TEST(DedupTie, ClaimsWhoseOwnersWentNeverGrowTheTable) {
  for (const std::size_t live : {1u, 5u, 40u}) {
    TiedWindow window(4096, 1);
    auto& [set, owners, make] = window;
    std::deque<std::uint64_t> running;
    constexpr int kClaims = 20'000;
    for (int i = 0; i < kClaims; ++i) {
      const auto c = set.try_claim(key_of("job-", i), i, kNever, make, 0, Tie::owner);
      ASSERT_EQ(c.result, Result::inserted) << i;
      running.push_back(c.owner);
      if (running.size() > live) {
        owners.alive.erase(running.front());
        running.pop_front();
      }
    }
    // At most 8/3 * live stored entries (3/8 load after a sweep), doubled for the grows between.
    EXPECT_LE(Peer::probed_size(set, 0), std::max<std::size_t>(8, std::bit_ceil(16 * live / 3 + 1)))
        << live << " live";
    EXPECT_LE(owners.owner_asks, 8 * kClaims) << live << " live";
    EXPECT_EQ(Peer::check_invariants(set), "") << live << " live";
    for (const std::uint64_t owner : running)
      EXPECT_EQ(set.tie_of(key_of("job-", owner - 1), owner), Tie::owner);
  }
}

// A burst grows the table; once its owners went, claims that reuse a few keys (each reclaims its
// own key's entry, so the count never grows again) still sweep it every `size` claims and
// shrink it back.
TEST(DedupTie, ABurstsTableShrinksBackOnceItsOwnersWentThoughLaterClaimsReuseTheirKeys) {
  TiedWindow window(4096, 1);
  auto& [set, owners, make] = window;
  ASSERT_EQ(window.fill("burst-", 1500), 1500);
  const std::size_t grown = Peer::probed_size(set, 0);
  EXPECT_GE(grown, 4096u);
  owners.alive.clear();  // the burst's jobs ended
  for (int i = 0; i < 2 * 4096; ++i) {
    const auto c = set.try_claim(key_of("k", i % 4), i, kNever, make, 0, Tie::owner);
    ASSERT_EQ(c.result, Result::inserted) << i;
    owners.alive.erase(c.owner);  // each job ends at once
  }
  EXPECT_LE(Peer::probed_size(set, 0), 16u) << "grown to " << grown;
  EXPECT_LE(set.size(), 8u);
  EXPECT_EQ(Peer::check_invariants(set), "");
}

TEST(DedupTie, AFullShardOfLiveTiedClaimsAnswersFullAndTakesAGoneOnesPlace) {
  TiedWindow window(8, 1);
  auto& [set, owners, make] = window;
  ASSERT_EQ(window.fill("k", 8), 8);
  EXPECT_EQ(set.try_claim("k8", 0, kNever, make, 0, Tie::owner).result, Result::full);
  owners.alive.erase(3);  // k2's owner
  EXPECT_EQ(set.try_claim("k8", 0, kNever, make, 0, Tie::owner).result, Result::inserted);
  EXPECT_FALSE(set.find("k2", 0).has_value());
  EXPECT_EQ(set.size(), 8u);
  EXPECT_EQ(Peer::check_invariants(set), "");
}

TEST(DedupTieDeathTest, AClaimTiedToAnOwnerNotAliveWhenMadeStopsTheProcessNamingWhy) {
  // Such a claim would be taken by the next claim of its key at once: two owners of one key.
  EXPECT_DEATH(
      {
        DedupSet set(64);
        Owners owners;
        set.watch_with(&Owners::of, &owners);
        CountingOwnerNotAlive make;
        (void)set.try_claim("order-1", 0, kNever, make, 0, Tie::owner);
      },
      "does not find the owner that make_owner returned alive");
}

}  // namespace
}  // namespace rail::detail
