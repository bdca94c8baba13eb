// DedupSet's operations that need no caller's type: see include/rail/detail/dedup_set.hpp.
#include "rail/detail/dedup_set.hpp"

namespace rail::detail {

DedupSet::DedupSet(std::size_t capacity, std::size_t shards, std::size_t max_key_bytes) {
  if (capacity == 0) {
    throw Error(ErrorCode::invalid_option, "DedupSet capacity is 0; expected 1 or more keys");
  }
  if (shards == 0 || !std::has_single_bit(shards) || shards > kMaxShards) {
    throw Error(ErrorCode::invalid_option, "DedupSet shards is " + std::to_string(shards) +
                                               "; expected a power of two from 1 to " +
                                               std::to_string(kMaxShards));
  }
  if (max_key_bytes == 0 || max_key_bytes > kMaxKeyBytes) {
    throw Error(ErrorCode::invalid_option, "DedupSet max_key_bytes is " +
                                               std::to_string(max_key_bytes) + "; expected 1 to " +
                                               std::to_string(kMaxKeyBytes));
  }
  const std::size_t per_shard = capacity / shards + (capacity % shards != 0 ? 1 : 0);
  if (per_shard > kMaxShardCapacity) {
    throw Error(ErrorCode::invalid_option,
                "DedupSet capacity is " + std::to_string(capacity) + " over " +
                    std::to_string(shards) + " shards, " + std::to_string(per_shard) +
                    " keys per shard; expected at most " + std::to_string(kMaxShardCapacity) +
                    " per shard (use more shards)");
  }
  const std::size_t table_size = std::max(kMinTableSize, std::bit_ceil(2 * per_shard));
  // Region: table, then free stack (4-byte aligned after a 256-byte multiple), then key slots,
  // rounded up to a cache line so that the next shard's table starts on its own line.
  const std::size_t table_bytes = table_size * sizeof(Entry);
  const std::size_t free_bytes = per_shard * sizeof(std::uint32_t);
  const std::size_t key_bytes = per_shard * max_key_bytes;  // <= 2^46: per_shard, key limits
  const std::size_t region =
      (table_bytes + free_bytes + key_bytes + kCacheLine - 1) / kCacheLine * kCacheLine;
  if (region > std::numeric_limits<std::size_t>::max() / shards) {
    throw Error(ErrorCode::invalid_option, "DedupSet capacity " + std::to_string(capacity) +
                                               " with max_key_bytes " +
                                               std::to_string(max_key_bytes) +
                                               " needs more bytes than size_t can count; "
                                               "expected a smaller capacity or key limit");
  }

  const std::size_t total_bytes = region * shards;
  storage_.reset(
      static_cast<std::byte*>(::operator new (total_bytes, std::align_val_t{kCacheLine})));
  shards_ = std::make_unique<Shard[]>(shards);
  shard_mask_ = shards - 1;
  shard_capacity_ = per_shard;
  max_key_bytes_ = max_key_bytes;

  for (std::size_t s = 0; s < shards; ++s) {
    std::byte* base = storage_.get() + s * region;
    Shard& shard = shards_[s];
    auto* const table = reinterpret_cast<Entry*>(base);
    for (std::size_t i = 0; i < table_size; ++i) {
      new (&table[i]) Entry{0, 0, 0, 0, kEmptySlot, 0};
    }
    shard.table.attach(table, table_size);
    shard.free_slots = reinterpret_cast<std::uint32_t*>(base + table_bytes);
    for (std::size_t i = 0; i < per_shard; ++i) {
      // Pop order 0, 1, 2, ...: the first keys use the first key slots, which keeps a lightly
      // loaded shard's key bytes on few pages.
      new (&shard.free_slots[i]) std::uint32_t(static_cast<std::uint32_t>(per_shard - 1 - i));
    }
    shard.free_top = static_cast<std::uint32_t>(per_shard);
    shard.keys = reinterpret_cast<char*>(base + table_bytes + free_bytes);
  }
  // The shards are published to other threads by however the caller shares `this`, e.g. a thread
  // start or a release store of a pointer. No operation can run before the constructor returns.
}

bool DedupSet::release(std::string_view key, std::uint64_t owner) noexcept {
  return update_owned(key, owner, [&](Shard& s, std::size_t i) noexcept {
    erase_at(s, i);
    shrink(s);
  });
}

bool DedupSet::release_claim(std::string_view key, std::uint64_t owner) noexcept {
  if (key.size() > max_key_bytes_) return false;
  const std::uint64_t hash = hash_of(key);
  Shard& s = shard_for(hash);
  const Guard guard(s.lock);
  const std::size_t i = locate_owned(s, hash, key.size(), owner);
  if (i == npos) return false;
  erase_at(s, i);
  shrink(s);
  return true;
}

bool DedupSet::set_expiry(std::string_view key, std::uint64_t owner,
                          std::int64_t expires_at_ns) noexcept {
  return update_owned(key, owner, [&](Shard& s, std::size_t i) noexcept {
    Entry& e = s.table[i];
    e.expires_at_ns = expires_at_ns;
    s.min_expiry = std::min(s.min_expiry, expires_at_ns);  // keep it a lower bound when shortening
  });
}

bool DedupSet::hold_for_successor(std::string_view key, std::uint64_t owner) noexcept {
  // min_expiry needs no change: the entry's expiry stays as it was (a held entry is never
  // expired; its expiry counts only as a bound that may let a sweep run in vain).
  return update_owned(key, owner,
                      [&](Shard& s, std::size_t i) noexcept { s.table[i].key_len |= kHeldBit; });
}

std::optional<DedupSet::Tie> DedupSet::tie_of(std::string_view key,
                                              std::uint64_t owner) const noexcept {
  if (key.size() > max_key_bytes_) return std::nullopt;
  const std::uint64_t hash = hash_of(key);
  Shard& s = shard_for(hash);  // as find(): a const lookup that must exclude writers
  const Guard guard(s.lock);
  const std::size_t i = locate(s, hash, key);
  if (i == npos || s.table[i].owner != owner) return std::nullopt;
  const std::uint32_t marks = s.table[i].key_len;
  return (marks & kBoundBit) != 0     ? Tie::owner
         : (marks & kWatchedBit) != 0 ? Tie::past_expiry
                                      : Tie::none;
}

bool DedupSet::set_value(std::string_view key, std::uint64_t owner, std::uint32_t value) noexcept {
  return update_owned(key, owner,
                      [&](Shard& s, std::size_t i) noexcept { s.table[i].value = value; });
}

std::optional<std::pair<std::uint64_t, std::uint32_t>> DedupSet::find(
    std::string_view key, std::int64_t now_ns) const noexcept {
  if (key.size() > max_key_bytes_) return std::nullopt;
  const std::uint64_t hash = hash_of(key);
  // shards_ is a pointer member, so a const method still reaches the lock. That is the intent:
  // find reads only, but it must exclude writers.
  Shard& s = shard_for(hash);
  const Guard guard(s.lock);
  const std::size_t i = locate(s, hash, key);
  if (i == npos || expired(s.table[i], now_ns)) return std::nullopt;
  return std::pair{s.table[i].owner, s.table[i].value};
}

std::size_t DedupSet::sweep(std::int64_t now_ns) noexcept {
  std::size_t removed = 0;
  for (std::size_t k = 0; k <= shard_mask_; ++k) {
    Shard& s = shards_[k];
    const Guard guard(s.lock);
    removed += sweep_locked(s, now_ns);
    shrink(s);
  }
  return removed;
}

std::size_t DedupSet::size() const noexcept {
  std::size_t total = 0;
  for (std::size_t k = 0; k <= shard_mask_; ++k) {
    // relaxed: a diagnostic snapshot; it publishes and consumes nothing.
    total += shards_[k].count.load(std::memory_order_relaxed);
  }
  return total;
}

}  // namespace rail::detail
