// Text from a journal file on its way to a terminal or a JSON document: a hostile or damaged file
// may hold any bytes in a job's name or error, and printed raw its control characters (escape
// sequences) would reach the operator's terminal, while nlohmann::json refuses invalid UTF-8.
//
// Contract: for_terminal(s) returns s with every byte that is not part of a printable UTF-8
// character written as \xNN (C0 and C1 controls, DEL, and every byte of an invalid or overlong
// sequence, a surrogate or a code point past U+10FFFF) and each backslash doubled, so the output
// holds no control character and reads back unambiguously. valid_utf8(s) says whether s is UTF-8
// as JSON needs it. Pure functions; no allocation beyond the result.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace rail::tools {

/// utf8_length(s, i, cp): the length of the valid UTF-8 sequence at s[i], its code point in cp;
/// 0 if there is none (cp is then meaningless).
inline std::size_t utf8_length(std::string_view s, std::size_t i, std::uint32_t& cp) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  std::size_t n;
  std::uint32_t min;
  if (c < 0x80) {
    cp = c;
    return 1;
  } else if ((c & 0xE0) == 0xC0) {
    n = 2, min = 0x80, cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3, min = 0x800, cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4, min = 0x10000, cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    if ((b(k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(k) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

inline bool valid_utf8(std::string_view s) {
  std::uint32_t cp;
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = utf8_length(s, i, cp);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

inline std::string for_terminal(std::string_view s) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size());
  std::uint32_t cp;
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = utf8_length(s, i, cp);
    if (n != 0 && !(cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp <= 0x9F))) {  // printable
      if (cp == '\\') out += '\\';
      out.append(s.substr(i, n));
      i += n;
      continue;
    }
    const std::size_t bad = n == 0 ? 1 : n;  // an invalid byte alone, or the whole control
    for (std::size_t k = 0; k < bad; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      out += "\\x";
      out += kDigits[c >> 4];
      out += kDigits[c & 15];
    }
    i += bad;
  }
  return out;
}

}  // namespace rail::tools
