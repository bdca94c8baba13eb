// hash_bytes: the 64-bit non-cryptographic hash of byte strings that the dedup window (DedupSet)
// picks shards and home slots with: MurmurHash3's x64 block mix over 8-byte words on a single
// lane, with murmur3's fmix64 finalizer. Fast, spreads sequential ids well, the same in every run
// of a process; not keyed, so it is no defence against ids chosen to collide.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace rail::detail {

/// hash_bytes(bytes) is a 64-bit non-cryptographic hash of `bytes`, the same in every run of a
/// process (it is not keyed). All 64 bits are mixed, so callers can slice any bits out of it.
inline std::uint64_t hash_bytes(std::string_view bytes) noexcept {
  // MurmurHash3_x64_128 constants and mixing steps (Austin Appleby, public domain). A
  // word-at-a-time FNV-style step `(h ^ w) * P` is not enough here. Multiplication carries only
  // upward, so ids that differ only in their last character, which sits in a word's top byte on
  // little-endian machines, would differ only in the top bits of h. The rotations below carry every
  // input bit into the low half, which picks the home slot.
  constexpr std::uint64_t kC1 = 0x87c37b91114253d5ULL;
  constexpr std::uint64_t kC2 = 0x4cf5ad432745937fULL;
  const auto mix_word = [](std::uint64_t k) noexcept {
    k *= kC1;
    k = std::rotl(k, 31);
    return k * kC2;
  };
  const char* p = bytes.data();
  std::size_t n = bytes.size();
  std::uint64_t h = 0x9e3779b97f4a7c15ULL;  // nonzero seed: all-zero words do not leave h at zero
  for (; n >= 8; p += 8, n -= 8) {
    std::uint64_t word;
    std::memcpy(&word, p, 8);  // memcpy: ids are not aligned; compiles to a single load
    h ^= mix_word(word);
    h = std::rotl(h, 27) * 5 + 0x52dce729;
  }
  if (n != 0) {
    std::uint64_t word = 0;
    std::memcpy(&word, p, n);
    h ^= mix_word(word);
  }
  // Mix in the length, so that "a" and "a\0" (the same zero-padded tail word) still differ.
  h ^= bytes.size();
  // murmur3 fmix64: full avalanche, so the shard bits and the home-slot bits are independent.
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  h ^= h >> 33;
  return h;
}

}  // namespace rail::detail
