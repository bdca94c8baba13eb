// DedupTable: one shard's table of the dedup window (dedup_set.hpp): open addressing with linear
// probing and backward-shift deletion, probing only a prefix of its storage whose size follows the
// entries it holds.
//
// Contract: sequential code. The caller holds its shard's lock around every call (DedupSet), so
// nothing here is atomic and nothing needs an order beyond the lock's.
//
// Why the size moves. The storage holds the shard's share of the window's capacity at load <= 1/2
// (a 65,536-id window has 8 MB of entries). A key's home is a hash of it, so a table that always
// probed all of its storage would touch a random line of those megabytes on every claim and
// release: a miss to memory, a hundred nanoseconds, although a queue that keeps up holds a few
// dozen ids at a time. So the table probes only its first size() slots: it doubles before an
// insert would take the load past 1/2, and halves once erases leave it below 1/8. Between two
// resizes at least size/8 inserts or erases happen, and a resize costs O(size): O(1) amortised.
//
// Resize in place: the rehash of Abseil's DropDeletesWithoutResize, for linear probing. First
// every stored entry is marked moving. Then, for each slot i in turn, while slot i holds a moving
// entry, the first slot from the entry's new home that is empty or holds a moving entry is found
// (one exists: the load is below 1 in the new size). If that slot is i itself, the entry stays and
// is unmarked. If it is empty, it takes the entry and i empties. If it holds a moving entry, the
// two are swapped, and the one now at i is handled next. A placed entry's probe crossed only
// placed entries, and a placed entry never moves or empties again in the pass, so afterwards every
// entry is again reachable from its home without crossing an empty slot.
//
// Invariants (DedupSetTestPeer::check_invariants checks them):
//   I1  size() is a power of two, kMinSize <= size() <= storage size; every slot at or past
//       size() is empty.
//   I2  No empty slot lies between an entry's home (hash & (size() - 1)) and the entry, cyclically
//       within the first size() slots.
//   I3  The caller keeps count <= size() / 2 (grow_for before each insert), so a probe always meets
//       an empty slot and ends.
//   I4  Outside resize no entry carries kMovingBit (nor, outside DedupSet's sweep, kGoneBit).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>

namespace rail::detail {

/// DedupEntry: 32 bytes; key_slot == DedupTable::kEmptySlot marks an empty table slot.
struct DedupEntry {
  std::uint64_t owner;         // id returned by make_owner
  std::int64_t expires_at_ns;  // live iff expires_at_ns > now_ns (or watched and alive)
  std::uint32_t hash;          // the key's hash_bytes, low half: the home slot
  std::uint32_t value;         // the caller's payload (the engine stores a slot index)
  std::uint32_t key_slot;      // index into the shard's key slots
  std::uint32_t key_len;       // bytes used in that key slot; bits 29-31: marks (DedupTable)
};
static_assert(std::is_trivially_copyable_v<DedupEntry>,
              "backward shift and resize move entries by assignment; keep it a plain record");
static_assert(std::is_trivially_destructible_v<DedupEntry>,
              "the storage is freed without running destructors");
static_assert(sizeof(DedupEntry) == 32, "the layout dedup_set.hpp documents");

/// DedupTable: see the contract at the top of this file.
class DedupTable {
 public:
  using Entry = DedupEntry;
  static constexpr std::uint32_t kEmptySlot = std::numeric_limits<std::uint32_t>::max();
  // Marks in key_len: watched (live past its expiry while its owner is alive), bound (live only
  // while its owner is alive), moving (during a resize only), gone (a bound entry whose owner a
  // sweep found gone, during that sweep only), held (live whatever its expiry and its owner,
  // until a successor takes it over). Keys are at most 2^16 bytes.
  static constexpr std::uint32_t kWatchedBit = std::uint32_t{1} << 31;
  static constexpr std::uint32_t kMovingBit = std::uint32_t{1} << 30;
  static constexpr std::uint32_t kBoundBit = std::uint32_t{1} << 29;
  static constexpr std::uint32_t kGoneBit = std::uint32_t{1} << 28;
  static constexpr std::uint32_t kHeldBit = std::uint32_t{1} << 27;
  static constexpr std::uint32_t kLengthBits = kHeldBit - 1;
  /// The smallest size: four cache lines of entries.
  static constexpr std::size_t kMinSize = 8;

  /// attach(slots, capacity): the table's storage, `capacity` entries (a power of two >=
  /// kMinSize), every one empty; the table starts at kMinSize slots.
  void attach(Entry* slots, std::size_t capacity) noexcept {
    slots_ = slots;
    capacity_ = capacity;
    mask_ = kMinSize - 1;
  }

  [[nodiscard]] std::size_t size() const noexcept { return mask_ + 1; }
  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }
  [[nodiscard]] std::size_t home(std::uint32_t hash) const noexcept { return hash & mask_; }
  [[nodiscard]] std::size_t next(std::size_t i) const noexcept { return (i + 1) & mask_; }
  Entry& operator[](std::size_t i) noexcept { return slots_[i]; }
  const Entry& operator[](std::size_t i) const noexcept { return slots_[i]; }
  [[nodiscard]] bool empty(std::size_t i) const noexcept {
    return slots_[i].key_slot == kEmptySlot;
  }
  static std::uint32_t length(const Entry& e) noexcept { return e.key_len & kLengthBits; }

  /// first_empty(hash): the first empty slot from hash's home, where an absent key goes (I3).
  [[nodiscard]] std::size_t first_empty(std::uint32_t hash) const noexcept {
    std::size_t i = home(hash);
    while (!empty(i))
      i = next(i);
    return i;
  }

  /// erase(i): removes the entry at `i` by backward shift (Knuth, TAOCP vol. 3, 6.4 Algorithm
  /// R) and returns its key slot. Walk the cluster after the hole: an entry at j whose home is not
  /// cyclically inside (hole, j] may legally sit in the hole, so it moves there and the hole moves
  /// to j. The walk stops at the first empty slot, and the last hole becomes empty. No tombstone
  /// is left, and entries only move to slots at or (cyclically) after i within the same cluster
  /// (DedupSet's sweep relies on that).
  std::uint32_t erase(std::size_t i) noexcept {
    const std::uint32_t key_slot = slots_[i].key_slot;
    std::size_t hole = i;
    for (std::size_t j = next(i); !empty(j); j = next(j)) {
      const std::size_t dist_home = (j - home(slots_[j].hash)) & mask_;
      const std::size_t dist_hole = (j - hole) & mask_;
      if (dist_home >= dist_hole) {
        slots_[hole] = slots_[j];
        hole = j;
      }
    }
    slots_[hole].key_slot = kEmptySlot;
    return key_slot;
  }

  /// fits(count): whether `count` entries keep the load at or below 1/2 at the current size.
  [[nodiscard]] bool fits(std::size_t count) const noexcept { return count * 2 <= size(); }

  /// grow_for(count, eighths): before an insert that makes `count` entries: doubles the size
  /// while the load would pass eighths/8 (at most 1/2, I3; the caller never holds more than
  /// capacity() / 2). A caller that has just swept the table asks for 3/8, so that the next
  /// sweep is at least size/8 inserts away.
  void grow_for(std::size_t count, std::size_t eighths = 4) noexcept {
    std::size_t size = this->size();
    while (count * 8 > size * eighths && size < capacity_)
      size *= 2;
    if (size != this->size()) resize(size);
  }

  /// shrink_for(count): after erases that leave `count` entries: halves the size while the load
  /// is below 1/8, so that the next grow is at least size/8 inserts away.
  void shrink_for(std::size_t count) noexcept {
    std::size_t size = this->size();
    while (count * 8 < size && size > kMinSize)
      size /= 2;
    if (size != this->size()) resize(size);
  }

 private:
  // resize(size): rehashes in place into the first `size` slots (see the contract).
  void resize(std::size_t size) noexcept {
    const std::size_t old_size = this->size();
    for (std::size_t i = 0; i < old_size; ++i)
      if (!empty(i)) slots_[i].key_len |= kMovingBit;
    mask_ = size - 1;
    for (std::size_t i = 0; i < old_size; ++i) {
      while (!empty(i) && (slots_[i].key_len & kMovingBit) != 0) {
        std::size_t j = home(slots_[i].hash);
        while (j != i && !empty(j) && (slots_[j].key_len & kMovingBit) == 0)
          j = next(j);
        if (j == i) {
          slots_[i].key_len &= ~kMovingBit;  // its first free place is where it is
        } else if (empty(j)) {
          slots_[j] = slots_[i];
          slots_[j].key_len &= ~kMovingBit;
          slots_[i].key_slot = kEmptySlot;
        } else {
          std::swap(slots_[i], slots_[j]);
          slots_[j].key_len &= ~kMovingBit;  // placed; the moving entry now at i goes next
        }
      }
    }
  }

  Entry* slots_ = nullptr;
  std::size_t capacity_ = 0;
  std::size_t mask_ = 0;
};

}  // namespace rail::detail
