// Queue footprint: the memory a queue declaration preallocates, computed before anything is
// allocated, so that a capacity the machine cannot hold is refused with the size it would need
// instead of ending the process in the allocator or the OOM killer.
//
// What a queue of capacity C and payload T preallocates (QueueImpl's members):
//   C x sizeof(JobSlot) (128 B)  slot headers, written at declaration (each slot's timer tag)
//   C x sizeof(T)                payload cells: address space until a job first uses the cell
//   2 + L rings of 8-byte cells  ready (L: priority levels), timer inbox, free slots:
//                                bit_ceil(C) cells each
//   ended-job history            4 B x bit_ceil(max(C, 1024))
// The dedup window (built on the first add with a dedup id), the DLQ's entries and the worker
// pool's records are not preallocated and not counted.
//
// The bound: a queue promises room for C unfinished jobs, and back-pressure (AddStatus::full)
// must come before the machine runs out. A footprint above the machine's physical memory can
// never hold C jobs (the slot headers alone may not fit, and filling the cells would end in the
// OOM killer or swap), so it is refused up front. Below the bound an allocation can still fail
// (RLIMIT_AS, another process's memory); that std::bad_alloc becomes the same Error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace rail::detail {

/// QueueFootprint: the bytes a queue preallocates (saturating at UINT64_MAX).
struct QueueFootprint {
  std::uint64_t per_job = 0;  // slot header + payload cell
  std::uint64_t slots = 0;    // capacity x per_job
  std::uint64_t rings = 0;    // the three rings and the ended-job history
  std::uint64_t total = 0;    // slots + rings
};

/// queue_footprint(capacity, payload_size, levels): what a queue of `capacity` (1 .. 2^29,
/// validated) with payloads of `payload_size` bytes and `levels` priority levels (a ready ring
/// each) preallocates.
[[nodiscard]] QueueFootprint queue_footprint(std::size_t capacity, std::size_t payload_size,
                                             std::uint32_t levels = 1) noexcept;

/// physical_memory_bytes(): the machine's physical memory (sysconf), or 0 if unknown.
[[nodiscard]] std::uint64_t physical_memory_bytes() noexcept;

/// check_queue_footprint(queue, capacity, payload_size): throws Error(capacity) naming the queue,
/// the capacity, the payload size and the bytes it would need when that is more than the
/// machine's physical memory, with the largest capacity that would fit.
void check_queue_footprint(std::string_view queue, std::size_t capacity, std::size_t payload_size,
                           std::uint32_t levels = 1);

/// throw_queue_allocation_failed(queue, capacity, payload_size): the declaration's allocation
/// threw std::bad_alloc below the bound: throws Error(capacity) with the same figures.
[[noreturn]] void throw_queue_allocation_failed(std::string_view queue, std::size_t capacity,
                                                std::size_t payload_size, std::uint32_t levels = 1);

}  // namespace rail::detail
