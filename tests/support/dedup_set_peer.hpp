// DedupSetTestPeer: white-box access to DedupSet for its tests (forced hashes, table sizes, the
// table invariants of dedup_table.hpp), shared by the test files that need it.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <string_view>

#include "rail/detail/dedup_set.hpp"

namespace rail::detail {

// White-box access, declared a friend by DedupSet. It can force hash collisions and check the table
// invariants that backward-shift deletion must preserve.
struct DedupSetTestPeer {
  using HashFn = DedupSet::HashFn;
  using Lock = DedupSet::SpinLock<>;

  // set_hash must be called before the set is shared with other threads.
  static void set_hash(DedupSet& set, HashFn fn) { set.test_hash_ = fn; }
  static std::size_t shard_of(const DedupSet& set, std::string_view key) {
    return set.shard_index(set.hash_of(key));
  }
  static std::size_t shard_capacity(const DedupSet& set) { return set.shard_capacity_; }
  // probed_size / storage_size: shard k's probed table size and its storage (DedupTable).
  static std::size_t probed_size(const DedupSet& set, std::size_t k) {
    const DedupSet::Guard guard(set.shards_[k].lock);
    return set.shards_[k].table.size();
  }
  static std::size_t storage_size(const DedupSet& set, std::size_t k) {
    return set.shards_[k].table.capacity();
  }

  // check_invariants returns "" or a description of the first broken invariant. It takes each
  // shard lock in turn, so it is safe to call while other threads operate.
  static std::string check_invariants(const DedupSet& set) {
    for (std::size_t k = 0; k <= set.shard_mask_; ++k) {
      DedupSet::Shard& s = set.shards_[k];
      const DedupSet::Guard guard(s.lock);
      const std::string where = "shard " + std::to_string(k) + ": ";
      const DedupTable& t = s.table;
      const std::size_t table_size = t.size();
      // I1: a power of two within the storage; nothing stored past the probed size.
      if (!std::has_single_bit(table_size) || table_size < DedupTable::kMinSize ||
          table_size > t.capacity()) {
        return where + "probed size " + std::to_string(table_size) + " is not a power of two in [" +
               std::to_string(DedupTable::kMinSize) + ", " + std::to_string(t.capacity()) + "]";
      }
      for (std::size_t i = table_size; i < t.capacity(); ++i)
        if (!t.empty(i)) return where + "an entry past the probed size, at " + std::to_string(i);
      const std::size_t stored = s.count.load(std::memory_order_relaxed);
      // I3: load <= 1/2 (the 1/8 floor is a policy, pinned by its own test: a claim's probe
      // reclaims expired entries without shrinking).
      if (stored * 2 > table_size) return where + "load above 1/2";
      std::size_t occupied = 0;
      std::set<std::uint32_t> used_slots;
      std::set<std::string> keys;
      for (std::size_t i = 0; i < table_size; ++i) {
        const DedupSet::Entry& e = s.table[i];
        if (e.key_slot == DedupSet::kEmptySlot) continue;
        ++occupied;
        if ((e.key_len & DedupTable::kMovingBit) != 0) return where + "an entry left moving";
        const std::string key(set.key_bytes(s, e.key_slot), DedupTable::length(e));
        if (DedupSet::hash_lo(set.hash_of(key)) != e.hash) {
          return where + "stored hash does not match key bytes";
        }
        if (set.shard_index(set.hash_of(key)) != k) return where + "entry in the wrong shard";
        if (e.key_slot >= set.shard_capacity_) return where + "key slot out of range";
        if (!used_slots.insert(e.key_slot).second) return where + "key slot used twice";
        if (!keys.insert(key).second) return where + "key stored twice: " + key;
        if ((e.key_len & DedupTable::kGoneBit) != 0) return where + "an entry left marked gone";
        // An owner-tied entry may go at any moment: its shard's bound says so.
        const std::int64_t lowest = (e.key_len & DedupTable::kBoundBit) != 0
                                        ? std::numeric_limits<std::int64_t>::min()
                                        : e.expires_at_ns;
        if (lowest < s.min_expiry) return where + "min_expiry is not a lower bound";
        // The probe invariant: no empty slot between the entry's home and the entry.
        for (std::size_t p = t.home(e.hash); p != i; p = t.next(p)) {
          if (s.table[p].key_slot == DedupSet::kEmptySlot) {
            return where + "entry at " + std::to_string(i) + " unreachable from its home " +
                   std::to_string(t.home(e.hash)) + " (empty slot at " + std::to_string(p) + ")";
          }
        }
      }
      if (occupied != s.count.load(std::memory_order_relaxed)) return where + "count is wrong";
      if (occupied > set.shard_capacity_) return where + "more entries than capacity";
      if (s.free_top + occupied != set.shard_capacity_) return where + "free stack size is wrong";
      for (std::uint32_t f = 0; f < s.free_top; ++f) {
        if (used_slots.count(s.free_slots[f]) != 0) return where + "a used key slot is free";
        if (s.free_slots[f] >= set.shard_capacity_) return where + "free slot out of range";
      }
    }
    return "";
  }
};

}  // namespace rail::detail
