// Payload requirements: what rail asks of a queue's payload type T, per operation, so that a
// type is refused only by the call that needs what it lacks.
//
//   every queue         std::is_nothrow_move_constructible_v<T> (QueueImpl's static_assert): a
//                       job moves between the queue, the DLQ and redrive on paths that must not
//                       fail halfway.
//   debounce            nothing more: replace_payload() below assigns when T's move assignment
//                       is noexcept and otherwise (a const member, say) destroys and
//                       move-constructs in place.
//   dlq().list / get    std::copy_constructible<T> (a requires-clause on each): they return
//                       copies. Move-only payloads read the DLQ in place with dlq().visit(fn)
//                       and dlq().inspect(id, fn) instead (dead_letter_queue.hpp).
//   DLQ journal         a rail::JournalCodec<T> specialisation (journal_codec.hpp).
#pragma once

#include <memory>
#include <new>
#include <type_traits>
#include <utility>

namespace rail::detail {

/// replace_payload(cell, data): the payload living in `cell` becomes `data`. The caller holds
/// the cell exclusively (debounce: SlotControl::begin_update) and must not be left holding it by
/// an exception, so it never throws: without a noexcept move assignment (none at all for a
/// const member) the old object is destroyed and the new one move-constructed in its storage,
/// which is noexcept; readers reach the cell through std::launder, so the new object is the one
/// they see.
template <class T>
void replace_payload(T& cell, T&& data) noexcept {
  static_assert(std::is_nothrow_move_constructible_v<T>);
  if constexpr (std::is_nothrow_move_assignable_v<T>) {
    cell = std::move(data);
  } else {
    std::destroy_at(&cell);
    ::new (static_cast<void*>(&cell)) T(std::move(data));
  }
}

}  // namespace rail::detail
