// Queue footprint: see include/rail/detail/footprint.hpp.
#include "rail/detail/footprint.hpp"

#include <unistd.h>

#include <cstdio>
#include <limits>
#include <string>

#include "rail/detail/job_slot.hpp"
#include "rail/detail/mpmc_ring.hpp"
#include "rail/detail/queue_stats.hpp"
#include "rail/error.hpp"

namespace rail::detail {
namespace {

constexpr std::uint64_t kSaturated = std::numeric_limits<std::uint64_t>::max();

std::uint64_t add(std::uint64_t a, std::uint64_t b) noexcept {
  std::uint64_t r;
  return __builtin_add_overflow(a, b, &r) ? kSaturated : r;
}
std::uint64_t mul(std::uint64_t a, std::uint64_t b) noexcept {
  std::uint64_t r;
  return __builtin_mul_overflow(a, b, &r) ? kSaturated : r;
}

/// bytes(n): "n bytes (x.y GiB)", the exact figure and one a human reads at a glance.
std::string bytes(std::uint64_t n) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(n);
  std::size_t u = 0;
  while (v >= 1024 && u + 1 < std::size(kUnits)) {
    v /= 1024;
    ++u;
  }
  char human[32];
  std::snprintf(human, sizeof human, "%.1f %s", v, kUnits[u]);
  return std::to_string(n) + " bytes (" + human + ")";
}

/// what(queue, capacity, payload_size, f): the figures both errors give.
std::string what(std::string_view queue, std::size_t capacity, std::size_t payload_size,
                 std::uint32_t levels, const QueueFootprint& f) {
  return "queue '" + std::string(queue) + "' with capacity " + std::to_string(capacity) +
         " and a " + std::to_string(payload_size) + "-byte payload needs " + bytes(f.total) + ": " +
         std::to_string(capacity) + " x (" + std::to_string(sizeof(JobSlot)) + "-byte slot + " +
         std::to_string(payload_size) + "-byte payload cell) + " + bytes(f.rings) +
         " of rings and history" +
         (levels > 1 ? " (" + std::to_string(levels) + " priority levels)" : std::string());
}

/// largest_fitting(limit, payload_size): the largest capacity whose footprint is at most limit
/// (0 if none). The footprint grows with the capacity, so a binary search finds it.
std::size_t largest_fitting(std::uint64_t limit, std::size_t payload_size,
                            std::uint32_t levels) noexcept {
  std::size_t lo = 0, hi = std::size_t{1} << 29;
  while (lo < hi) {
    const std::size_t mid = lo + (hi - lo + 1) / 2;
    if (queue_footprint(mid, payload_size, levels).total <= limit) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

}  // namespace

QueueFootprint queue_footprint(std::size_t capacity, std::size_t payload_size,
                               std::uint32_t levels) noexcept {
  QueueFootprint f;
  f.per_job = add(sizeof(JobSlot), payload_size);
  f.slots = mul(capacity, f.per_job);
  // The ready rings (one per priority level), inbox_ and the free list's ring of recycled
  // indices: one cell per slot each.
  f.rings = add(mul(2 + std::uint64_t{levels}, MpmcRing<std::uint32_t>::footprint(capacity)),
                QueueStats::footprint(capacity));
  f.total = add(f.slots, f.rings);
  return f;
}

std::uint64_t physical_memory_bytes() noexcept {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return 0;
  return mul(static_cast<std::uint64_t>(pages), static_cast<std::uint64_t>(page));
}

void check_queue_footprint(std::string_view queue, std::size_t capacity, std::size_t payload_size,
                           std::uint32_t levels) {
  const QueueFootprint f = queue_footprint(capacity, payload_size, levels);
  const std::uint64_t physical = physical_memory_bytes();
  if (physical == 0 || f.total <= physical) return;  // unknown: the allocation decides
  throw Error(ErrorCode::capacity,
              what(queue, capacity, payload_size, levels, f) + ", more than this machine's " +
                  bytes(physical) +
                  " of physical memory; expected a QueueOptions.capacity of at most " +
                  std::to_string(largest_fitting(physical, payload_size, levels)) +
                  " for this payload (or a smaller payload: keep large data elsewhere and "
                  "queue a reference to it)");
}

void throw_queue_allocation_failed(std::string_view queue, std::size_t capacity,
                                   std::size_t payload_size, std::uint32_t levels) {
  throw Error(
      ErrorCode::capacity,
      what(queue, capacity, payload_size, levels, queue_footprint(capacity, payload_size, levels)) +
          ", and allocating it failed (std::bad_alloc); expected that much memory to be "
          "available to the process (see RLIMIT_AS and the cgroup's memory.max), or a "
          "smaller QueueOptions.capacity");
}

}  // namespace rail::detail
