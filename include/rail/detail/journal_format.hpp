// The DLQ journal's on-disk encoding (format: include/rail/journal_file.hpp): constants, CRC32C and
// the encoders the writer uses. The decoder is scan_journal (src/journal_format.cpp). Tests use the
// encoders to build damaged files by hand.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "rail/journal_file.hpp"

namespace rail::detail::journal {

inline constexpr char kMagic[8] = {'R', 'A', 'I', 'L', 'D', 'L', 'Q', 'J'};
inline constexpr std::uint32_t kVersion = 3;
inline constexpr std::uint32_t kMinHeader = 32;
inline constexpr std::uint32_t kMaxHeader = 4096;
inline constexpr std::uint32_t kRecordMagic = 0x52454331u;
inline constexpr std::uint32_t kRecordHeader = 16;
inline constexpr std::uint32_t kMaxBody = std::uint32_t{1} << 30;
inline constexpr std::uint8_t kTypeEntry = 1;
inline constexpr std::uint8_t kTypeTombstone = 2;
inline constexpr std::uint8_t kTypeDetailedEntry = 3;  // version 2
inline constexpr std::uint8_t kTypeRoutedEntry = 4;    // version 3: + JobOptions::downstream

/// crc32c(bytes, seed): CRC-32C (Castagnoli polynomial 0x1EDC6F41, reflected); `seed` continues a
/// previous call's result.
[[nodiscard]] std::uint32_t crc32c(std::span<const std::byte> bytes, std::uint32_t seed = 0);

/// padded(n): n rounded up to the record alignment (8).
[[nodiscard]] constexpr std::uint64_t padded(std::uint64_t n) noexcept {
  return (n + 7) & ~std::uint64_t{7};
}

/// shifted(t, d): t + d, saturated at the int64 range (times are saturating arithmetic).
[[nodiscard]] constexpr std::int64_t shifted(std::int64_t t, std::int64_t d) noexcept {
  std::int64_t r;
  if (__builtin_add_overflow(t, d, &r)) return d > 0 ? INT64_MAX : INT64_MIN;
  return r;
}
/// difference(a, b): a - b, saturated at the int64 range: a journal's times are whatever its
/// file says, and a checksum-valid record may hold any of them.
[[nodiscard]] constexpr std::int64_t difference(std::int64_t a, std::int64_t b) noexcept {
  std::int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) return b < 0 ? INT64_MAX : INT64_MIN;
  return r;
}

/// encode_header(queue, codec, created): the file header. Precondition: names of at most 2000 bytes
/// each (DlqJournal checks it with a clear Error).
[[nodiscard]] std::string encode_header(std::string_view queue, std::string_view codec,
                                        std::int64_t created_unix_ns);
/// encode_entry(e, version) / encode_tombstone(cause, ids): one framed record, padding included,
/// in the entry layout of a file of format `version`, which keeps its format: type 4 (version
/// 3), type 3 (version 2: no downstream) or type 1 (version 1: neither the details).
[[nodiscard]] std::string encode_entry(const StoredDeadLetter& e, std::uint32_t version = kVersion);
[[nodiscard]] std::string encode_tombstone(TombstoneCause cause, std::span<const JobId> ids);

}  // namespace rail::detail::journal
