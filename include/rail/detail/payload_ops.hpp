// PayloadOps: everything the engine does with a queue's payload type T, gathered in one table
// per T, so that the queue, its DLQ and its journal are compiled once in src/ and a user's
// translation unit instantiates only this table and the typed facades (Queue<T, R>,
// DeadLetterQueue<T>). What T must provide for each operation is in payload.hpp.
//
// Contract: every pointer names a T's storage (reached through std::launder: a debounce may have
// replaced the object in place) of ops.size bytes aligned to ops.align. move_to
// constructs a T there from the (moved-from, still alive) source; `trivial` says a memcpy does
// the same and that nothing needs destroying, so the hot path of plain payloads makes no
// indirect call (destroy is null then). A null copy operation means T is not copyable; a null
// codec_name means T has no JournalCodec. The entry operations build and free DeadLetter<T>
// objects, which the DLQ holds by their DeadLetterInfo base.
#pragma once

#include <cstddef>
#include <new>
#include <span>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>

#include "rail/dead_letter.hpp"
#include "rail/detail/payload.hpp"
#include "rail/journal_codec.hpp"

namespace rail::detail {

struct PayloadOps {
  const std::type_info& type;
  std::size_t size;
  std::size_t align;
  bool trivial;  // trivially copyable: memcpy moves it, nothing destroys it
  bool copyable;
  void (*move_to)(void* to, void* from) noexcept;
  void (*destroy)(void* at) noexcept;              // null when trivial
  void (*replace)(void* at, void* from) noexcept;  // replace_payload (payload.hpp)
  void (*copy_to)(void* to, const void* from);     // null unless copyable; may throw
  // DLQ entries: a DeadLetter<T> whose info is moved from `info` and whose payload is moved
  // (or, copying, copied: null unless copyable) from `payload`. May throw (no memory).
  DeadLetterInfo* (*new_entry)(DeadLetterInfo&& info, void* payload);
  DeadLetterInfo* (*copy_entry)(DeadLetterInfo&& info, const void* payload);
  void (*delete_entry)(DeadLetterInfo* entry) noexcept;
  void* (*entry_payload)(DeadLetterInfo& entry) noexcept;
  // The journal: JournalCodec<T> (journal_codec.hpp); all null without one. decode_entry builds
  // an entry from `info` and the payload's bytes, or throws what the codec threw.
  std::string (*codec_name)();
  void (*encode)(const void* payload, std::string& out);
  DeadLetterInfo* (*decode_entry)(DeadLetterInfo&& info, std::span<const std::byte> bytes);

  /// move(to, from): move_to, or a memcpy for a trivial T.
  void move(void* to, void* from) const noexcept {
    if (trivial) {
      __builtin_memcpy(to, from, size);
    } else {
      move_to(to, from);
    }
  }
  /// destroy_at(at): ends the T at `at` (nothing to do for a trivial T).
  void destroy_at(void* at) const noexcept {
    if (destroy != nullptr) destroy(at);
  }
};

namespace payload_ops_impl {
template <class T>
DeadLetter<T>* entry_of(DeadLetterInfo* e) noexcept {
  return static_cast<DeadLetter<T>*>(e);
}
template <class T>
DeadLetterInfo* make_entry(DeadLetterInfo&& info, T&& data) {
  return new DeadLetter<T>{std::move(info), std::move(data)};
}
}  // namespace payload_ops_impl

/// payload_ops<T>(): T's table (one per T in the program).
template <class T>
const PayloadOps& payload_ops() noexcept {
  static_assert(std::is_nothrow_move_constructible_v<T>,
                "a queue's payload type must be nothrow move constructible: jobs move between "
                "the queue, the DLQ and redrive on paths that must not fail halfway");
  using payload_ops_impl::entry_of;
  using payload_ops_impl::make_entry;
  constexpr bool copyable = std::is_copy_constructible_v<T>;
  constexpr bool codec = JournalCodecFor<T>::value;
  static const PayloadOps ops{
      .type = typeid(T),
      .size = sizeof(T),
      .align = alignof(T),
      .trivial = std::is_trivially_copyable_v<T>,
      .copyable = copyable,
      .move_to =
          [](void* to, void* from) noexcept {
            ::new (to) T(std::move(*std::launder(static_cast<T*>(from))));
          },
      .destroy =
          std::is_trivially_copyable_v<T>
              ? nullptr
              : +[](void* at) noexcept { std::destroy_at(std::launder(static_cast<T*>(at))); },
      .replace =
          [](void* at, void* from) noexcept {
            replace_payload(*std::launder(static_cast<T*>(at)),
                            std::move(*std::launder(static_cast<T*>(from))));
          },
      .copy_to =
          [] {
            void (*f)(void*, const void*) = nullptr;
            if constexpr (copyable)
              f = [](void* to, const void* from) {
                ::new (to) T(*std::launder(static_cast<const T*>(from)));
              };
            return f;
          }(),
      .new_entry =
          [](DeadLetterInfo&& info, void* payload) {
            return make_entry<T>(std::move(info),
                                 std::move(*std::launder(static_cast<T*>(payload))));
          },
      .copy_entry =
          [] {
            DeadLetterInfo* (*f)(DeadLetterInfo&&, const void*) = nullptr;
            if constexpr (copyable)
              f = [](DeadLetterInfo&& info, const void* payload) {
                return make_entry<T>(std::move(info),
                                     T(*std::launder(static_cast<const T*>(payload))));
              };
            return f;
          }(),
      .delete_entry = [](DeadLetterInfo* e) noexcept { delete entry_of<T>(e); },
      .entry_payload = [](DeadLetterInfo& e) noexcept -> void* { return &entry_of<T>(&e)->data; },
      .codec_name =
          [] {
            std::string (*f)() = nullptr;
            if constexpr (codec) f = [] { return std::string(JournalCodec<T>::name()); };
            return f;
          }(),
      .encode =
          [] {
            void (*f)(const void*, std::string&) = nullptr;
            if constexpr (codec)
              f = [](const void* payload, std::string& out) {
                JournalCodec<T>::encode(*std::launder(static_cast<const T*>(payload)), out);
              };
            return f;
          }(),
      .decode_entry =
          [] {
            DeadLetterInfo* (*f)(DeadLetterInfo&&, std::span<const std::byte>) = nullptr;
            if constexpr (codec)
              f = [](DeadLetterInfo&& info, std::span<const std::byte> bytes) {
                return make_entry<T>(std::move(info), JournalCodec<T>::decode(bytes));
              };
            return f;
          }(),
  };
  return ops;
}

/// PayloadBox: one payload off the slots (a kept add, a schedule's template), owned on the heap
/// through its type's table. Empty after a move.
class PayloadBox {
 public:
  PayloadBox() noexcept = default;
  /// PayloadBox(ops, from): a T moved from *from (may throw: no memory).
  PayloadBox(const PayloadOps& ops, void* from) : ops_(&ops), at_(allocate(ops)) {
    ops.move(at_, from);
  }
  /// copy(): a copy of this payload (its type is copyable; may throw).
  [[nodiscard]] PayloadBox copy() const {
    PayloadBox out;
    out.ops_ = ops_;
    out.at_ = allocate(*ops_);
    try {
      ops_->copy_to(out.at_, at_);
    } catch (...) {
      ::operator delete (out.at_, std::align_val_t{ops_->align});
      out.at_ = nullptr;
      throw;
    }
    return out;
  }
  PayloadBox(PayloadBox&& other) noexcept
      : ops_(other.ops_), at_(std::exchange(other.at_, nullptr)) {}
  PayloadBox& operator=(PayloadBox&& other) noexcept {
    if (this != &other) {
      reset();
      ops_ = other.ops_;
      at_ = std::exchange(other.at_, nullptr);
    }
    return *this;
  }
  PayloadBox(const PayloadBox&) = delete;
  PayloadBox& operator=(const PayloadBox&) = delete;
  ~PayloadBox() { reset(); }

  [[nodiscard]] void* get() const noexcept { return at_; }
  [[nodiscard]] explicit operator bool() const noexcept { return at_ != nullptr; }

 private:
  static void* allocate(const PayloadOps& ops) {
    return ::operator new (ops.size, std::align_val_t{ops.align});
  }
  void reset() noexcept {
    if (at_ == nullptr) return;
    ops_->destroy_at(at_);
    ::operator delete (at_, std::align_val_t{ops_->align});
    at_ = nullptr;
  }

  const PayloadOps* ops_ = nullptr;
  void* at_ = nullptr;
};

}  // namespace rail::detail
