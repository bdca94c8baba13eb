// DedupSet: rail's deduplication window. It maps dedup ids (BullMQ `deduplication.id`, SQS FIFO
// `MessageDeduplicationId`) to the job that owns them, each with its own expiry time. The engine
// claims an id when a job is added. A live claim makes the add a duplicate that resolves to the
// existing job; the id is released when that job completes, or kept until its TTL runs out.
//
// Guarantee: for any key, at most one live owner at a time. A try_claim of a live key never
// inserts, and after expiry or release the next try_claim inserts. "Live" depends on the claim's
// tie to its owner, which the set's liveness hook (watch_with) answers for:
//   Tie::none         present with expires_at_ns > now_ns;
//   Tie::past_expiry  that, or its owner is alive: it stays live past its expiry meanwhile;
//   Tie::owner        that, and its owner is alive: it goes when its owner does, with no
//                     release (a job's end lets its id go without touching the set).
// A claim held for a successor (hold_for_successor) is live whatever its tie and expiry, until
// the successor takes it over or it is released. An entry that is not live is expired, and every
// operation that takes a clock treats it as absent; the next claim whose probe or sweep meets it
// reclaims it.
//
// Algorithm: S shards, chosen by the key's 64-bit hash. Each shard is an open-addressing table with
// linear probing under a test-and-test-and-set spin lock. Deletion is by backward shift (Knuth,
// TAOCP vol. 3, 6.4 Algorithm R; it is also the usual deletion for Celis's Robin Hood hashing and
// is described in the Robin Hood notes that followed it), so there are no tombstones: memory and
// probe lengths depend only on the entries stored now, never on how many expired ids passed
// through. Expired entries are reclaimed lazily when a try_claim's probe meets them, when a
// claim would grow or fill a shard or is its size-th claim since the last sweep (it sweeps
// the shard first), and by sweep(). A shard probes only as much of its table as its entries
// need (DedupTable, dedup_table.hpp): a claim grows it before the load would pass 1/2; a release
// or a sweep shrinks it below 1/8; each by an in-place rehash. A claim sweeps only when an
// entry may have expired (min_expiry; an owner-tied entry may go at any moment), and a grow
// follows a sweep only while the load stays above 3/8, so sweeps are at least size/8 claims
// apart: expired ids never grow a table, and a burst's table shrinks back once its ids went.
//
// Why a sharded lock and not lock-free. A check-and-insert of a variable-length key has two
// lock-free options, and neither is acceptable here:
//   (a) Identify a key by its hash alone, so that one CAS on a 64-bit word both checks and claims.
//       Two different ids that share a hash would then merge, and a job would be dropped as a
//       "duplicate" of an unrelated one. This is a silent false merge, so it is ruled out.
//   (b) Publish a slot first and write the key bytes after it. A concurrent claimer of the same key
//       finds a half-written entry and must wait for the bytes before it can decide. That wait is a
//       lock by another name, and it has no owner to help or to time out.
// So the table is locked honestly. The critical section is one bounded probe: load <= 1/2, and
// expired entries are reclaimed as the probe meets them. With 64 shards, two threads contend only
// when their keys land in the same shard, on about 1/64 of operations for uniformly hashed keys.
//
// Threading contract: every member function may be called from any thread at the same time as any
// other. make_owner and the liveness hook run under the shard lock. It must be noexcept and cheap,
// and it must not call back into this set (the lock is not re-entrant; doing so deadlocks). Holding
// the lock while make_owner runs is what makes owner ids follow claim order for a key.
//
// Memory-ordering contract: each shard lock's acquire (exchange) pairs with the previous holder's
// release (store), so every write to a shard's entries, key bytes, free stack and min_expiry
// happens-before the next holder reads them. No entry field is read outside the lock. The per-shard
// `count` is atomic only so that size() can read it without the lock. Those reads are relaxed and
// give a snapshot that orders nothing.
//
// Shutdown idiom: none. There are no threads and no blocking waits. Destroy the set once no caller
// remains.
//
// Memory layout. One allocation at construction holds every shard's region. No operation allocates
// afterwards: key bytes go to a fixed slot taken from a per-shard free stack, and entries are
// reused.
//
// clang-format off
//   shards_[s]: one cache line             storage_ + s * region (64-byte aligned)
//   +-----------------------------+        +-------------------------------------------------+
//   | lock        TTAS flag       |        | Entry    table[table_size]  open addressing     |
//   | count       entries stored  |   +--->| uint32   free_slots[cap]    free key-slot stack |
//   | free_top    free stack top  |   |    | char     keys[cap][max_key] one slot per key    |
//   | min_expiry  <= each expiry  |   |    +-------------------------------------------------+
//   | table (probed size), free_slots, keys
//   +-----------------------------+
// clang-format on
//
// An Entry (DedupEntry, dedup_table.hpp) is 32 bytes: owner, expires_at_ns, the low half of the
// key's hash (its home; bits 32.. pick the shard, the same for all its entries, so not stored),
// value, key_slot and key_len (its high bits mark the claim's tie: DedupTable's marks).
//
// Sizes: cap = ceil(capacity / shards) keys per shard, and table_size = max(8, bit_ceil(2 * cap)),
// so load <= 1/2 when the shard is full. Per shard that is table_size * 32 + cap * (4 +
// max_key_bytes) bytes. With capacity 100'000, 64 shards and 256-byte keys, the total is about
// 8.4 MB of tables plus 25.6 MB of key slots. A shard probes only the first slots of its table,
// as many as its live keys need (DedupTable: from 8 up, load between 1/8 and 1/2), so a window
// holding few ids works in a few kilobytes of it; the key slots are reused last-in first-out.
// `full` is per shard: with skewed keys one shard can fill before capacity() keys are live in
// total.
//
// Hash: hash_bytes (hash_bytes.hpp), not keyed. If clients can choose dedup ids adversarially,
// they can aim every id at one shard. They cannot cause false merges, because keys are compared
// byte for byte. The damage stops at that shard reporting `full`, plus probes of at most its
// table length.
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "rail/detail/assert.hpp"
#include "rail/detail/dedup_table.hpp"
#include "rail/detail/hash_bytes.hpp"
#include "rail/detail/spin_lock.hpp"
#include "rail/error.hpp"

namespace rail::detail {

/// DedupSet: see the contract at the top of this file.
class DedupSet {
 public:
  /// kNoExpiry: an expires_at_ns that never expires at any now_ns < kNoExpiry. Simple-mode dedup
  /// ("until the job completes") uses it, and set_expiry() turns it into a TTL at completion.
  static constexpr std::int64_t kNoExpiry = std::numeric_limits<std::int64_t>::max();

  /// DedupSet(capacity, shards, max_key_bytes) allocates every table and key slot now. No
  /// operation allocates afterwards. `capacity` is the number of live keys to hold (>= 1). Each
  /// shard gets ceil(capacity / shards) of them, so capacity() may round up. `shards` is a power of
  /// two from 1 to 65536. `max_key_bytes` is the longest key accepted (1 to 65536). On a bad value
  /// it throws rail::Error(invalid_option), and std::bad_alloc if the memory is not there.
  DedupSet(std::size_t capacity, std::size_t shards = 64, std::size_t max_key_bytes = 256);

  DedupSet(const DedupSet&) = delete;
  DedupSet& operator=(const DedupSet&) = delete;

  /// Tie: how a claim's liveness follows its owner, as the liveness hook tells (see the top).
  enum class Tie : std::uint8_t { none, past_expiry, owner };

  struct Claim {
    enum class Result : std::uint8_t { inserted, duplicate, full, key_too_long };
    Result result;
    std::uint64_t owner;  // inserted: the id make_owner() returned; duplicate: the existing owner
    std::uint32_t value;  // inserted: make_owner()'s value; duplicate: the existing entry's value
  };

  /// try_claim(key, now_ns, expires_at_ns, make_owner) claims `key` for a new owner unless it is
  /// live at now_ns. If live, it returns {duplicate, owner, value} of the existing entry and does
  /// not call make_owner. Otherwise it calls make_owner() exactly once, under the shard lock, which
  /// returns std::pair<uint64_t, uint32_t>{owner, value}. It stores the key with those values and
  /// expires_at_ns, then returns {inserted, owner, value}. It returns {full, 0, 0} when the shard
  /// holds `cap` live keys (expired ones are reclaimed first), and {key_too_long, 0, 0} when
  /// key.size() > max_key_bytes. The last two never call make_owner. Owners should be unique and
  /// nonzero: release() and set_expiry() trust the owner to tell claims apart, and 0 is Claim's "no
  /// owner". Never blocks except on the shard spin lock.
  ///
  /// `successor_of`, when nonzero, names an owner whose entry for `key` (live or expired) is
  /// handed over in place: make_owner() is called and the entry takes its owner, value and
  /// expires_at_ns, with no moment at which the key is free for anyone else. `tie`: the new
  /// claim's (see the top). A claim tied to its owner is live from the moment make_owner()
  /// returns, so by then the hook must answer that its owner is alive.
  template <class MakeOwner>
  [[nodiscard]] Claim try_claim(std::string_view key, std::int64_t now_ns,
                                std::int64_t expires_at_ns, MakeOwner&& make_owner,
                                std::uint64_t successor_of = 0, Tie tie = Tie::none) noexcept;

  /// release(key, owner) removes `key` only if its stored owner is `owner`, so a finishing job
  /// releases its own id and never a newer job's claim. It returns whether an entry was removed.
  /// It takes no clock, so it also removes the owner's expired entry if that is still stored.
  /// False means someone else owns the key, or it was already released or reclaimed; callers may
  /// ignore that.
  bool release(std::string_view key, std::uint64_t owner) noexcept;
  /// release_claim(key, owner): release() for a caller whose owners are unique (each inserted
  /// claim drew a new one, as the engine's job ids are): the entry is the one in `key`'s chain
  /// with this owner and key length, found without reading the stored key bytes. Those bytes
  /// were written by the claiming thread, so a releasing worker saves a cache-line transfer per
  /// job. Exact for unique owners; with a repeated owner use release().
  bool release_claim(std::string_view key, std::uint64_t owner) noexcept;

  /// set_expiry(key, owner, expires_at_ns) sets the expiry of the entry for `key` if `owner` owns
  /// it. This covers debounce extend and simple mode switching to "keep for a TTL after
  /// completion". It returns whether the entry was found. It takes no clock, so it can also revive
  /// the owner's own expired entry that no claim has replaced yet. A claim by anyone else replaces
  /// the entry with a new owner, so no other owner's claim is ever overridden.
  bool set_expiry(std::string_view key, std::uint64_t owner, std::int64_t expires_at_ns) noexcept;

  /// Alive: the liveness hook, alive(ctx, owner, value, tie): whether the owner of an entry with
  /// that tie (past_expiry or owner) is alive. It runs under the shard lock, so it must be
  /// noexcept and cheap, and must not call back into this set. It may read shared state: the
  /// answer counts as of the moment it reads it, and the lock orders everything else the
  /// operation does around it. An owner tied claim whose owner it once found gone must stay
  /// gone (the entry may be reclaimed at any later moment).
  using Alive = bool (*)(const void* ctx, std::uint64_t owner, std::uint32_t value,
                         Tie tie) noexcept;
  /// watch_with(alive, ctx): installs the liveness hook. Call it before the set is shared with
  /// other threads, and before any tied claim; without it every claim lives by its expiry.
  void watch_with(Alive alive, const void* ctx) noexcept {
    alive_ = alive;
    alive_ctx_ = ctx;
  }

  /// hold_for_successor(key, owner): the entry for `key`, if `owner` owns it, is held: live
  /// whatever its expiry (a later set_expiry moves the expiry, not the hold) and its tie, so it
  /// outlives its owner until a successor takes it over (try_claim's successor_of, whose claim
  /// carries its own marks) or it is released. Returns whether it was found. It takes no clock:
  /// an entry whose owner went, or whose expiry passed, that is still stored is made live again,
  /// so a caller holds only for an owner whose successor will come (the engine: an add kept for
  /// after its job, whose end will hand the id over).
  bool hold_for_successor(std::string_view key, std::uint64_t owner) noexcept;
  /// tie_of(key, owner): the tie of the entry for `key`, if `owner` owns it (live or not).
  [[nodiscard]] std::optional<Tie> tie_of(std::string_view key, std::uint64_t owner) const noexcept;

  /// set_value(key, owner, value) replaces the value stored with `key` if `owner` owns it (a
  /// redriven job that kept its claim lives in another slot now). Returns whether it was found.
  bool set_value(std::string_view key, std::uint64_t owner, std::uint32_t value) noexcept;

  /// find(key, now_ns) returns the live {owner, value} of `key` at now_ns, or nullopt. Read-only:
  /// it skips expired entries without reclaiming them.
  [[nodiscard]] std::optional<std::pair<std::uint64_t, std::uint32_t>> find(
      std::string_view key, std::int64_t now_ns) const noexcept;

  /// sweep(now_ns) removes every entry expired at now_ns and returns how many it removed. It locks
  /// one shard at a time, for one pass over that shard's table.
  std::size_t sweep(std::int64_t now_ns) noexcept;

  /// size() counts stored entries, live or expired but not yet reclaimed. While operations run it
  /// is a snapshot, not a linearizable count. It is exact once they stop.
  [[nodiscard]] std::size_t size() const noexcept;

  /// capacity() is the most entries size() can reach: shards * ceil(capacity / shards).
  [[nodiscard]] std::size_t capacity() const noexcept {
    return shard_capacity_ * (shard_mask_ + 1);
  }

 private:
  friend struct DedupSetTestPeer;  // tests force hash collisions and check the table invariants

  static constexpr std::size_t kCacheLine = 64;
  using Entry = DedupEntry;
  static constexpr std::uint32_t kEmptySlot = DedupTable::kEmptySlot;
  static constexpr std::uint32_t kWatchedBit = DedupTable::kWatchedBit;
  static constexpr std::uint32_t kBoundBit = DedupTable::kBoundBit;
  static constexpr std::uint32_t kGoneBit = DedupTable::kGoneBit;
  static constexpr std::uint32_t kHeldBit = DedupTable::kHeldBit;
  // kMayGo: the min_expiry of a shard holding an owner-tied entry: it may go at any moment.
  static constexpr std::int64_t kMayGo = std::numeric_limits<std::int64_t>::min();
  // Bit budget: the shard index comes from hash bits 32..47 and the home slot from bits 0..30, so
  // the two never overlap. That caps shards at 2^16 and a shard's table at 2^31 slots.
  static constexpr std::size_t kMaxShards = std::size_t{1} << 16;
  static constexpr std::size_t kMaxShardCapacity = std::size_t{1} << 30;
  static constexpr std::size_t kMaxKeyBytes = std::size_t{1} << 16;
  static constexpr std::size_t kMinTableSize = DedupTable::kMinSize;
  using HashFn = std::uint64_t (*)(std::string_view) noexcept;

  // The shards' lock (spin_lock.hpp). The table code that uses it is plain sequential code
  // under the lock, so the lock is the only concurrent kernel here.
  template <template <class> class Atom = std::atomic>
  using SpinLock = detail::SpinLock<Atom>;

  static_assert(kMinTableSize * sizeof(Entry) % kCacheLine == 0,
                "every table size (a power of two >= kMinTableSize) must be whole cache lines, so "
                "no two shards' tables share a line");

  struct alignas(kCacheLine) Shard {
    SpinLock<> lock;
    // Written only under `lock`, as a plain load + store; it is atomic only so that size() can
    // read it without the lock (relaxed, a snapshot).
    std::atomic<std::uint32_t> count{0};
    std::uint32_t free_top = 0;     // free_slots[0, free_top) are the unused key slots
    std::uint32_t since_sweep = 0;  // claims that inserted since the last sweep
    // A lower bound on every stored expires_at_ns (kMayGo while an owner-tied entry is stored).
    // When a claim at now_ns below it would fill or grow the shard, nothing can have expired,
    // so the O(table) sweep is skipped. Otherwise every claim to a shard that is full of live
    // keys would rescan the whole shard.
    std::int64_t min_expiry = kNoExpiry;
    DedupTable table;  // its probed size follows count (dedup_table.hpp)
    std::uint32_t* free_slots = nullptr;
    char* keys = nullptr;
  };
  static_assert(alignof(Shard) == kCacheLine && sizeof(Shard) == kCacheLine,
                "each shard's lock and header must own exactly one cache line, so that threads "
                "working on neighbouring shards do not false-share and the headers stay compact");

  using Guard = SpinGuard;

  struct AlignedDelete {
    void operator()(std::byte* p) const noexcept {
      ::operator delete (p, std::align_val_t{kCacheLine});
    }
  };

  std::uint64_t hash_of(std::string_view key) const noexcept {
    // A null check, not an indirect call, so that hash_bytes inlines in production (the branch is
    // always predicted).
    return test_hash_ == nullptr ? hash_bytes(key) : test_hash_(key);
  }
  std::size_t shard_index(std::uint64_t hash) const noexcept { return (hash >> 32) & shard_mask_; }
  Shard& shard_for(std::uint64_t hash) const noexcept { return shards_[shard_index(hash)]; }
  // The entry keeps only the hash's low half: the home slot comes from bits 0..30 (a table has at
  // most 2^31 slots) and the shard's bits are the same for all its entries.
  static std::uint32_t hash_lo(std::uint64_t hash) noexcept {
    return static_cast<std::uint32_t>(hash);
  }
  char* key_bytes(const Shard& s, std::uint32_t slot) const noexcept {
    return s.keys + std::size_t{slot} * max_key_bytes_;
  }

  // expired: not live at now_ns (see the top). A watched entry's expiry still counts in a
  // shard's min_expiry, and an owner-tied entry counts as kMayGo, so while such owners stay
  // alive a full shard's claims sweep them in vain.
  bool expired(const Entry& e, std::int64_t now_ns) const noexcept {
    if ((e.key_len & kHeldBit) != 0) return false;  // hold_for_successor
    if ((e.key_len & kBoundBit) != 0) return e.expires_at_ns <= now_ns || !alive(e, Tie::owner);
    if (e.expires_at_ns > now_ns) return false;
    return (e.key_len & kWatchedBit) == 0 || !alive(e, Tie::past_expiry);
  }
  bool alive(const Entry& e, Tie tie) const noexcept {
    return alive_ != nullptr && alive_(alive_ctx_, e.owner, e.value, tie);
  }
  static std::uint32_t marks_of(Tie tie) noexcept {
    return tie == Tie::past_expiry ? kWatchedBit : tie == Tie::owner ? kBoundBit : 0;
  }
  // check_born_alive(e): a claim just made, if tied to its owner, finds its owner alive (see
  // try_claim); else the next claim of its key would take it at once, and two owners would hold
  // the key.
  void check_born_alive(const Entry& e) const noexcept {
    RAIL_INVARIANT((e.key_len & kBoundBit) == 0 || alive_ == nullptr || alive(e, Tie::owner),
                   "DedupSet::try_claim: the liveness hook does not find the owner that "
                   "make_owner returned alive; an owner-tied claim must be live when made");
  }
  // lowest_expiry: what entry e contributes to its shard's min_expiry.
  static std::int64_t lowest_expiry(const Entry& e) noexcept {
    return (e.key_len & kBoundBit) != 0 ? kMayGo : e.expires_at_ns;
  }

  bool matches(const Shard& s, const Entry& e, std::uint64_t hash,
               std::string_view key) const noexcept {
    // Hash first: it rejects almost every other key in the chain without touching key bytes. Then
    // length and bytes, so that equal hashes never merge different keys. The empty() test avoids
    // passing memcmp a null data() (UB even when the length is 0).
    return e.hash == hash_lo(hash) && DedupTable::length(e) == key.size() &&
           (key.empty() || std::memcmp(key_bytes(s, e.key_slot), key.data(), key.size()) == 0);
  }

  // locate: index of `key`'s entry in `s` (live or expired), or npos. At most one entry per key
  // exists, because try_claim inserts only after its probe found no entry for the key.
  /// update_owned(key, owner, update): calls update(shard, index of the entry) under the shard
  /// lock if `owner` owns `key`; returns whether it did.
  template <class Update>
  bool update_owned(std::string_view key, std::uint64_t owner, Update update) noexcept;
  // locate_owned: index of the entry of `owner` in the chain of `hash` for a key of `len` bytes,
  // or npos (release_claim: owners are unique, so the owner names the entry).
  std::size_t locate_owned(const Shard& s, std::uint64_t hash, std::size_t len,
                           std::uint64_t owner) const noexcept {
    for (std::size_t i = s.table.home(hash_lo(hash));; i = s.table.next(i)) {
      const Entry& e = s.table[i];
      if (e.key_slot == kEmptySlot) return npos;  // terminates: load <= 1/2
      if (e.owner == owner && e.hash == hash_lo(hash) && DedupTable::length(e) == len) return i;
    }
  }
  std::size_t locate(const Shard& s, std::uint64_t hash, std::string_view key) const noexcept {
    for (std::size_t i = s.table.home(hash_lo(hash));; i = s.table.next(i)) {
      const Entry& e = s.table[i];
      // Terminates: load <= 1/2, so an empty slot exists.
      if (e.key_slot == kEmptySlot) return npos;
      if (matches(s, e, hash, key)) return i;
    }
  }

  // erase_at: removes the entry at `i` (DedupTable::erase: backward shift, no tombstone) and
  // gives its key slot back. It never resizes, so indices stay valid in the caller's loop; the
  // public operations shrink the table once they are done (shrink).
  void erase_at(Shard& s, std::size_t i) noexcept {
    s.free_slots[s.free_top++] = s.table.erase(i);
    // relaxed: we hold the lock, so no other writer exists; size() only wants a snapshot.
    s.count.store(s.count.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
  }
  // shrink: after erases, the table halves while its load is below 1/8 (DedupTable).
  static void shrink(Shard& s) noexcept {
    s.table.shrink_for(s.count.load(std::memory_order_relaxed));  // relaxed: under the lock
  }

  // sweep_locked: removes every expired entry of `s` (see expired) and recomputes min_expiry
  // exactly. First it asks the hook about every owner-tied entry and marks those whose owners
  // went (kGoneBit): the asks are independent of each other, so the processor overlaps their
  // reads of the owners' state, where one at a time they would wait for each in turn. Then it
  // starts just past an empty slot and walks one full turn, so no cluster straddles the
  // starting point. A backward shift at i then moves entries only into slots >= i that the walk
  // has not passed, and slot i is examined again. Every marked entry is removed, so no mark
  // outlives the sweep.
  std::size_t sweep_locked(Shard& s, std::int64_t now_ns) noexcept {
    s.since_sweep = 0;
    if (s.count.load(std::memory_order_relaxed) == 0) {  // relaxed: we hold the lock
      s.min_expiry = kNoExpiry;
      return 0;
    }
    if (s.min_expiry == kMayGo) {  // owner-tied entries are stored
      for (std::size_t k = 0; k < s.table.size(); ++k) {
        Entry& e = s.table[k];
        if (e.key_slot != kEmptySlot && (e.key_len & (kBoundBit | kHeldBit)) == kBoundBit &&
            !alive(e, Tie::owner))
          e.key_len |= kGoneBit;
      }
    }
    std::size_t start = 0;  // an empty slot; one exists because load <= 1/2
    while (s.table[start].key_slot != kEmptySlot)
      ++start;
    std::size_t removed = 0;
    std::int64_t min_expiry = kNoExpiry;
    std::size_t i = s.table.next(start);
    for (std::size_t visited = 1; visited < s.table.size();) {
      const Entry& e = s.table[i];
      // A bound entry not marked gone was alive a moment ago: only its expiry can end it now
      // (unless it is held: see expired).
      if (e.key_slot != kEmptySlot &&
          ((e.key_len & kGoneBit) != 0 ||
           ((e.key_len & (kBoundBit | kHeldBit)) == kBoundBit ? e.expires_at_ns <= now_ns
                                                              : expired(e, now_ns)))) {
        erase_at(s, i);
        ++removed;
        continue;  // slot i now holds a shifted successor or is empty: examine it again
      }
      if (e.key_slot != kEmptySlot) min_expiry = std::min(min_expiry, lowest_expiry(e));
      i = s.table.next(i);
      ++visited;
    }
    s.min_expiry = min_expiry;
    return removed;
  }

  static constexpr std::size_t npos = std::numeric_limits<std::size_t>::max();

  std::unique_ptr<Shard[]> shards_;
  std::unique_ptr<std::byte, AlignedDelete> storage_;
  std::size_t shard_mask_ = 0;
  std::size_t shard_capacity_ = 0;
  std::size_t max_key_bytes_ = 0;
  HashFn test_hash_ = nullptr;  // null in production; DedupSetTestPeer sets it before any use
  Alive alive_ = nullptr;       // watch_with, before the set is shared
  const void* alive_ctx_ = nullptr;
};

template <class MakeOwner>
DedupSet::Claim DedupSet::try_claim(std::string_view key, std::int64_t now_ns,
                                    std::int64_t expires_at_ns, MakeOwner&& make_owner,
                                    std::uint64_t successor_of, Tie tie) noexcept {
  // Exactly this type, not one that converts to it: a 64-bit value would be narrowed silently.
  static_assert(
      std::is_nothrow_invocable_v<MakeOwner&&> &&
          std::is_same_v<std::invoke_result_t<MakeOwner&&>,
                         std::pair<std::uint64_t, std::uint32_t>>,
      "make_owner must be callable as `std::pair<uint64_t, uint32_t> () noexcept`: it runs under "
      "the shard lock, and try_claim is noexcept");
  if (key.size() > max_key_bytes_) return {Claim::Result::key_too_long, 0, 0};
  const std::uint64_t hash = hash_of(key);
  Shard& s = shard_for(hash);
  const Guard guard(s.lock);

  // Probe the chain from the key's home. Expired entries are removed as they are met, so
  // stale ids never lengthen later probes: the key's own entry whatever its tie, another key's
  // unless it is tied to its owner (asking the hook reads the owner's state, likely another
  // core's line: sweeps ask for all of a shard's at once). An erase can shift a later entry of
  // this chain into slot i, so slot i is examined again. When the loop ends, i is an empty slot
  // where the key may go.
  std::size_t i = s.table.home(hash_lo(hash));
  for (;;) {
    Entry& e = s.table[i];
    if (e.key_slot == kEmptySlot) break;
    if (successor_of != 0 && e.owner == successor_of && matches(s, e, hash, key)) {
      const auto [owner, value] = std::forward<MakeOwner>(make_owner)();
      e.owner = owner;
      e.value = value;
      e.expires_at_ns = expires_at_ns;
      e.key_len = DedupTable::length(e) | marks_of(tie);  // the new claim's tie
      s.min_expiry = std::min(s.min_expiry, lowest_expiry(e));
      check_born_alive(e);
      return {Claim::Result::inserted, owner, value};
    }
    const bool same = matches(s, e, hash, key);
    if ((same || (e.key_len & kBoundBit) == 0) && expired(e, now_ns)) {
      erase_at(s, i);
      continue;
    }
    if (same) return {Claim::Result::duplicate, e.owner, e.value};
    i = s.table.next(i);
  }

  // relaxed: we hold the lock, which orders every write to count.
  if (s.count.load(std::memory_order_relaxed) == shard_capacity_) {
    // Reclaim first, so `full` means "cap live keys", not "cap stored entries". The min_expiry
    // test skips the O(table) pass when no stored entry can be expired yet.
    if (now_ns < s.min_expiry) return {Claim::Result::full, 0, 0};
    sweep_locked(s, now_ns);
    if (s.count.load(std::memory_order_relaxed) == shard_capacity_) {
      return {Claim::Result::full, 0, 0};
    }
    // The sweep moved entries. The key is still absent (it was not live before the sweep), so the
    // end of its chain is the first empty slot from its home.
    i = s.table.first_empty(hash_lo(hash));
  }
  // Room at load <= 1/2 for one more: a grow rehashes, and the key's place moves with it. Before
  // a grow, as before `full`, and once every `size` claims, the expired entries go (see the
  // top), and a sweep that leaves the load below 1/8 shrinks the table: claims that reuse their
  // own keys never grow it, so after a burst only these sweeps shrink it back.
  const std::size_t size = s.table.size();
  std::size_t eighths = 4;
  // relaxed: the lock orders every write to count.
  const bool grows = !s.table.fits(s.count.load(std::memory_order_relaxed) + 1);
  if ((grows || ++s.since_sweep >= size) && now_ns >= s.min_expiry &&
      sweep_locked(s, now_ns) != 0) {
    shrink(s);
    eighths = 3;
  }
  s.table.grow_for(s.count.load(std::memory_order_relaxed) + 1, eighths);
  if (s.table.size() != size || eighths == 3) i = s.table.first_empty(hash_lo(hash));

  const auto [owner, value] = std::forward<MakeOwner>(make_owner)();
  const std::uint32_t slot = s.free_slots[--s.free_top];  // count < cap, so the stack is non-empty
  if (!key.empty()) std::memcpy(key_bytes(s, slot), key.data(), key.size());
  const auto key_len = static_cast<std::uint32_t>(key.size()) | marks_of(tie);
  s.table[i] = Entry{owner, expires_at_ns, hash_lo(hash), value, slot, key_len};
  s.min_expiry = std::min(s.min_expiry, lowest_expiry(s.table[i]));
  check_born_alive(s.table[i]);
  // relaxed: the lock orders every write to count.
  s.count.store(s.count.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  return {Claim::Result::inserted, owner, value};
}

template <class Update>
bool DedupSet::update_owned(std::string_view key, std::uint64_t owner, Update update) noexcept {
  if (key.size() > max_key_bytes_) return false;
  const std::uint64_t hash = hash_of(key);
  Shard& s = shard_for(hash);
  const Guard guard(s.lock);
  const std::size_t i = locate(s, hash, key);
  if (i == npos || s.table[i].owner != owner) return false;
  update(s, i);
  return true;
}

}  // namespace rail::detail
