// bench_dedup contender: std::mutex + std::unordered_map<std::string, Entry> + a FIFO of expiry
// times, the strongest simple "mutex + unordered_set with TTL" we could write for this workload.
//
// With one TTL for every id, insertion order is expiry order, so a FIFO of (expires_at, node)
// finds every expired id in O(1) amortised: each claim first erases the ids at the FIFO's front
// that have expired, then does the map lookup. No sweep ever walks the whole map, which is what
// makes this faster than mutex_unordered_map.cpp. The price is generality: it is only correct
// when expiry times are non-decreasing in claim order (a constant TTL on one clock), whereas
// DedupSet and the sweeping baseline take any expiry per id (the engine's dedup TTL is per job).
// With two threads each claiming at its own logical time, the FIFO is sorted only to within the
// threads' clock skew, so some ids are erased a little late; that only makes this baseline hold
// more than it must, never answer wrongly.
//
// Like-for-like: bucket array reserved for the capacity up front (no rehash is timed), an expired
// id found by a claim is taken over in place, a node allocation and a heap copy of the id for
// each new id (18-byte ids exceed libstdc++'s 15-byte small-string buffer), one lock for all
// threads, mimalloc as the allocator (rail::rail links it). The FIFO is a std::deque, whose
// 512-byte blocks are allocated and freed as it advances.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <unordered_map>

#include "dedup/dedup_harness.hpp"

namespace rail_bench::dedup {
namespace {

class MutexUnorderedMapFifo {
 public:
  explicit MutexUnorderedMapFifo(std::size_t capacity) : capacity_(capacity) {
    map_.reserve(capacity);
  }

  Outcome claim(const std::string& key, std::int64_t now_ns, std::int64_t expires_at_ns,
                std::uint64_t owner) noexcept {
    const std::lock_guard lock(mutex_);
    expire(now_ns);
    const auto found = map_.find(key);
    if (found != map_.end()) {
      if (found->second.expires_at_ns > now_ns) return Outcome::duplicate;
      found->second = Entry{expires_at_ns, owner, 0};  // expired: the new claim takes it over
      fifo_.push_back(Expiry{expires_at_ns, owner, found});
      return Outcome::inserted;
    }
    if (map_.size() >= capacity_) return Outcome::full;
    const auto inserted = map_.emplace(key, Entry{expires_at_ns, owner, 0}).first;
    fifo_.push_back(Expiry{expires_at_ns, owner, inserted});  // bad_alloc terminates: a bench
    return Outcome::inserted;
  }

 private:
  struct Entry {
    std::int64_t expires_at_ns;
    std::uint64_t owner;
    std::uint64_t value;
  };
  using Map = std::unordered_map<std::string, Entry>;
  // One per claim that stored an entry. `node` stays valid while the entry exists: the map never
  // rehashes (reserved for capacity, size kept <= capacity), and only the FIFO record whose owner
  // still matches erases it, which is the newest record for that node, so older ones (taken over
  // in place since) are popped while the node still exists and are skipped by the owner test.
  struct Expiry {
    std::int64_t expires_at_ns;
    std::uint64_t owner;
    Map::iterator node;
  };

  void expire(std::int64_t now_ns) noexcept {
    while (!fifo_.empty() && fifo_.front().expires_at_ns <= now_ns) {
      const Expiry& oldest = fifo_.front();
      if (oldest.node->second.owner == oldest.owner) map_.erase(oldest.node);
      fifo_.pop_front();
    }
  }

  std::mutex mutex_;
  Map map_;
  std::deque<Expiry> fifo_;
  const std::size_t capacity_;
};

}  // namespace

void register_mutex_unordered_map_fifo() {
  register_contender<MutexUnorderedMapFifo>("mutex_unordered_map_fifo");
}

}  // namespace rail_bench::dedup
