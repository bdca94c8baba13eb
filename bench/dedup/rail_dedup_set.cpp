// bench_dedup contender: rail::detail::DedupSet, the engine's dedup window (64 shards, each an
// open-addressing table under a spin lock, expired entries reclaimed as probes meet them and by a
// sweep of a full shard).
//
// Like-for-like: the harness's capacity of keys up to kMaxKeyBytes, all allocated in the
// constructor (untimed); make_owner returns the harness's owner, so the set stores what the
// baseline stores (owner, a value, the expiry). Keys are passed as string_views of the harness's
// strings.
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "dedup/dedup_harness.hpp"
#include "rail/detail/dedup_set.hpp"

namespace rail_bench::dedup {
namespace {

class RailDedupSet {
 public:
  explicit RailDedupSet(std::size_t capacity) : set_(capacity, kShards, kMaxKeyBytes) {}

  Outcome claim(const std::string& key, std::int64_t now_ns, std::int64_t expires_at_ns,
                std::uint64_t owner) noexcept {
    const auto claim = set_.try_claim(key, now_ns, expires_at_ns, [owner]() noexcept {
      return std::pair<std::uint64_t, std::uint32_t>{owner, 0};
    });
    switch (claim.result) {
      case rail::detail::DedupSet::Claim::Result::inserted:
        return Outcome::inserted;
      case rail::detail::DedupSet::Claim::Result::duplicate:
        return Outcome::duplicate;
      default:
        return Outcome::full;  // key_too_long cannot happen: ids are <= kMaxKeyBytes
    }
  }

 private:
  static constexpr std::size_t kShards = 64;  // the DedupSet default, as the engine uses it
  rail::detail::DedupSet set_;
};

}  // namespace

void register_rail_dedup_set() {
  register_contender<RailDedupSet>("rail_dedup_set");
}

}  // namespace rail_bench::dedup
