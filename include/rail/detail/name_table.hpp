// NameTable: interns job names ("charge-card") so a job slot stores a 16-bit index instead of a
// string: adds allocate nothing, and events hand out string_views that live as long as the
// engine. Names are job kinds, not per-job data; the table holds the first kMaxNames distinct
// ones. A name seen after the table filled up is not interned: intern() answers kOwnName and the
// job keeps its own copy of the name (SlotExtra::own_name), which dies with the job — so names
// have no fixed limit and nothing is kept forever but the first kMaxNames.
//
// Guarantee: intern(s) returns the same index for equal strings, for the table's lifetime.
// Algorithm: open addressing over an array of atomic pointers; entries are never removed.
// Readers are lock-free (a probe of acquire loads); a new name is inserted under a mutex, which
// is a cold path (first sighting of a name only).
// Memory ordering: the inserter constructs the std::string, then publishes its pointer with a
// release store; readers' acquire load of the pointer makes the string's bytes visible.
// The last name: each thread remembers the entry its last intern() answered, tagged with the
// table's serial (unique per table for the process's life, so a tag never names a dead table's
// entry). A thread that adds one kind of job in a row then compares the text once instead of
// hashing it and probing. The entry was published to this thread by the load that found it.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "rail/error.hpp"

namespace rail::detail {

inline std::uint64_t fnv1a(std::string_view s) noexcept {
  std::uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s)
    h = (h ^ c) * 1099511628211ULL;
  return h;
}

class NameTable {
 public:
  static constexpr std::size_t kMaxNames = 4096;
  /// kOwnName: intern()'s answer once the table is full; the job then stores its name itself.
  static constexpr std::uint16_t kOwnName = 0xFFFF;
  static constexpr std::size_t kSlots = 8192;  // load factor <= 0.5 keeps probes short
  static_assert((kSlots & (kSlots - 1)) == 0 && kSlots >= 2 * kMaxNames);

  /// intern(name) returns name's index, or kOwnName once kMaxNames distinct names are interned
  /// and name is not one of them (lock-free then: a full table takes no lock).
  std::uint16_t intern(std::string_view name) {
    Last& last = last_;
    if (last.table == serial_ && last.entry->text == name) return last.entry->index;
    if (const Entry* e = find(name)) return remember(e);
    // relaxed: a hint; a stale false only costs the lock below, which re-checks.
    if (full_.load(std::memory_order_relaxed)) return kOwnName;
    std::lock_guard lock(mu_);
    if (const Entry* e = find(name)) return remember(e);
    if (names_.size() >= kMaxNames) {
      full_.store(true, std::memory_order_relaxed);
      return kOwnName;
    }
    auto& entry = names_.emplace_back(std::make_unique<Entry>(
        Entry{std::string(name), static_cast<std::uint16_t>(names_.size())}));
    std::size_t i = fnv1a(name) & (kSlots - 1);
    // relaxed: slots are only written under mu_, which orders writers among themselves.
    while (slots_[i].load(std::memory_order_relaxed) != nullptr)
      i = (i + 1) & (kSlots - 1);
    by_index_[entry->index].store(entry.get(), std::memory_order_release);
    slots_[i].store(entry.get(), std::memory_order_release);  // publishes entry's string
    return remember(entry.get());
  }

  /// name(index) is the interned string (index != kOwnName); valid for the table's lifetime.
  [[nodiscard]] std::string_view name(std::uint16_t index) const noexcept {
    // acquire pairs with intern()'s release store; entries are immutable once published.
    return by_index_[index].load(std::memory_order_acquire)->text;
  }

 private:
  struct Entry {
    std::string text;
    std::uint16_t index;
  };

  /// Last: the calling thread's last answer (see the header); table 0 is no table's serial.
  struct Last {
    std::uint64_t table;
    const Entry* entry;
  };

  [[nodiscard]] const Entry* find(std::string_view name) const noexcept {
    std::size_t i = fnv1a(name) & (kSlots - 1);
    for (;;) {
      const Entry* e = slots_[i].load(std::memory_order_acquire);  // see file comment
      if (e == nullptr || e->text == name) return e;
      i = (i + 1) & (kSlots - 1);
    }
  }
  std::uint16_t remember(const Entry* e) noexcept {
    last_ = Last{serial_, e};
    return e->index;
  }
  static std::uint64_t next_serial() noexcept {
    static std::atomic<std::uint64_t> serials{0};
    return serials.fetch_add(1, std::memory_order_relaxed) + 1;  // relaxed: only uniqueness
  }

  static inline thread_local Last last_{0, nullptr};
  const std::uint64_t serial_ = next_serial();

  std::array<std::atomic<const Entry*>, kSlots> slots_{};
  std::array<std::atomic<const Entry*>, kMaxNames> by_index_{};
  std::mutex mu_;
  std::vector<std::unique_ptr<Entry>> names_;
  std::atomic<bool> full_{false};
};

}  // namespace rail::detail
