// JournalCodec<T>: how a DLQ journal turns a queue's payload into bytes and back. rail provides
// codecs for std::string, byte vectors and trivially copyable types; other payload types get one
// by specialising rail::JournalCodec in the type's namespace-scope code:
//
//   template <>
//   struct rail::JournalCodec<Order> {
//     static std::string name() { return "Order/v1"; }          // stored in the file header
//     static void encode(const Order& o, std::string& out);      // append o's bytes to out
//     static Order decode(std::span<const std::byte> bytes);     // throw on malformed bytes
//   };
//
// `name()` is checked when a journal is opened, so a journal written by another codec (or an
// older version of yours: put a version in the name) is refused instead of misread. `decode`
// receives bytes that passed a checksum but must still be treated as untrusted: check every length
// before using it and throw (any std::exception) when they do not add up; the entry is then
// reported and skipped.
//
// Checking at compile time: declare a queue that must have a journal with
// `engine.declare_journaled_queue<Order>("orders", options)` (rail/engine.hpp). It is constrained
// on rail::JournalCodable<T>, so a payload type without a codec is a compile error whose
// diagnostic names the type and the unmet requirement, and it refuses options without a journal
// path (Error(invalid_option) naming the queue). Plain `queue<T>` keeps the journal a run-time
// option: a queue whose payload has no codec compiles, and declaring it with a journal throws
// Error(invalid_option) naming the type. `static_assert(rail::JournalCodable<Order>);` makes the
// same check anywhere else. A specialisation that exists but has the wrong shape is always a
// compile error (see the static_assert in JournalCodecFor).
#pragma once

#include <concepts>
#include <cstddef>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace rail {

/// JournalCodec<T>: the customization point. The primary template marks "no codec".
template <class T, class = void>
struct JournalCodec {
  static constexpr bool rail_no_codec = true;
};

/// JournalCodable<T>: T has a usable JournalCodec.
template <class T>
concept JournalCodable = requires(const T& value, std::string& out,
                                  std::span<const std::byte> bytes) {
  { JournalCodec<T>::name() } -> std::convertible_to<std::string>;
  JournalCodec<T>::encode(value, out);
  { JournalCodec<T>::decode(bytes) } -> std::same_as<T>;
};

template <>
struct JournalCodec<std::string> {
  static std::string name() { return "std::string"; }
  static void encode(const std::string& v, std::string& out) { out.append(v); }
  static std::string decode(std::span<const std::byte> bytes) {
    return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  }
};

/// Byte vectors (std::byte, unsigned char, char, std::uint8_t elements) are stored as they are.
template <class B>
struct JournalCodec<std::vector<B>, std::enable_if_t<sizeof(B) == 1 && std::is_trivial_v<B>>> {
  static std::string name() { return "bytes"; }
  static void encode(const std::vector<B>& v, std::string& out) {
    out.append(reinterpret_cast<const char*>(v.data()), v.size());
  }
  static std::vector<B> decode(std::span<const std::byte> bytes) {
    std::vector<B> v(bytes.size());
    if (!bytes.empty()) std::memcpy(v.data(), bytes.data(), bytes.size());
    return v;
  }
};

/// Trivially copyable types are stored as their object representation. Their bytes come back
/// as they were written (checksummed), so a type whose fields reject some bit patterns (bool,
/// enums, pointers) should not rely on this codec if the file may be edited by hand: give it a
/// codec that validates instead. The name records the size, so a changed layout is refused.
template <class T>
struct JournalCodec<
    T, std::enable_if_t<std::is_trivially_copyable_v<T> && std::is_default_constructible_v<T> &&
                        !std::is_pointer_v<T> && !std::is_array_v<T>>> {
  static std::string name() { return "trivially_copyable/" + std::to_string(sizeof(T)); }
  static void encode(const T& v, std::string& out) {
    out.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  static T decode(std::span<const std::byte> bytes) {
    if (bytes.size() != sizeof(T))
      throw std::length_error("payload holds " + std::to_string(bytes.size()) +
                              " bytes; expected " + std::to_string(sizeof(T)));
    T v;
    std::memcpy(&v, bytes.data(), sizeof(T));
    return v;
  }
};

namespace detail {
template <class T>
concept NoJournalCodec = JournalCodec<T>::rail_no_codec;

/// JournalCodecFor<T>::value: whether T's journal can be opened; a specialisation with the wrong
/// shape stops compilation here with the payload type in the instantiation trace.
template <class T>
struct JournalCodecFor {
  static_assert(NoJournalCodec<T> || JournalCodable<T>,
                "rail::JournalCodec<T> is specialised for this payload type but lacks "
                "`static std::string name()`, `static void encode(const T&, std::string&)` or "
                "`static T decode(std::span<const std::byte>)`");
  static constexpr bool value = JournalCodable<T>;
};
}  // namespace detail

}  // namespace rail
