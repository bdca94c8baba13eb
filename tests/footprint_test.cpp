// Queue footprint (detail/footprint.hpp): a queue whose preallocation the machine cannot hold is
// refused at declaration with the bytes it would need, before anything is allocated (so the
// sanitizer builds, whose allocators intercept huge requests, see the same error), and an
// allocation that fails below that bound becomes the same Error instead of a crash.
#include "rail/detail/footprint.hpp"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "rail/detail/allocation.hpp"
#include "rail/detail/job_slot.hpp"
#include "rail/rail.hpp"
#include "support/sanitized.hpp"

namespace rail {
namespace {

struct Big {
  std::array<char, 65536> bytes;
};

/// declaration_error(engine, capacity): the Error declaring a queue<Big> of `capacity` throws.
template <class T>
Error declaration_error(Engine& engine, std::uint32_t capacity) {
  try {
    (void)engine.declare_queue<T>("big", QueueOptions{.capacity = capacity});
  } catch (const Error& e) {
    return e;
  }
  throw std::runtime_error("declaring the queue did not throw rail::Error");
}

TEST(QueueFootprint, ASlotCostsA128ByteHeaderPlusThePayload) {
  static_assert(sizeof(detail::JobSlot) == 128);  // the README's per-slot figure
  EXPECT_EQ(detail::queue_footprint(65'536, sizeof(int)).per_job, 128u + sizeof(int));
  EXPECT_EQ(detail::queue_footprint(65'536, sizeof(Big)).slots,
            std::uint64_t{65'536} * (128 + 65'536));
}

TEST(QueueFootprint, CapacityTheMachineCannotHoldIsRefusedWithTheBytesItNeeds) {
  Engine engine({.mode = Mode::inlined});
  constexpr std::size_t kCapacity = std::size_t{1} << 29;  // the largest valid capacity
  const auto needed = detail::queue_footprint(kCapacity, sizeof(Big));
  const std::uint64_t physical = detail::physical_memory_bytes();
  ASSERT_GT(needed.total, physical) << "a machine with 32 TiB of memory holds this queue";
  const std::uint64_t allocations = detail::allocation_stats().allocations;

  const Error e = declaration_error<Big>(engine, kCapacity);
  EXPECT_EQ(e.code(), ErrorCode::capacity);
  const std::string msg = e.what();
  EXPECT_NE(msg.find("queue 'big' with capacity 536870912 and a 65536-byte payload needs " +
                     std::to_string(needed.total) + " bytes"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("536870912 x (128-byte slot + 65536-byte payload cell)"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("more than this machine's " + std::to_string(physical) + " bytes"),
            std::string::npos)
      << msg;
  EXPECT_EQ(detail::allocation_stats().allocations, allocations);  // refused before allocating

  // The capacity it suggests is the largest that fits, and the engine takes it.
  const std::string at_most = "capacity of at most ";
  const auto pos = msg.find(at_most);
  ASSERT_NE(pos, std::string::npos) << msg;
  const std::size_t fits = std::stoull(msg.substr(pos + at_most.size()));
  EXPECT_LE(detail::queue_footprint(fits, sizeof(Big)).total, physical);
  EXPECT_GT(detail::queue_footprint(fits + 1, sizeof(Big)).total, physical);
  auto small =
      engine.declare_queue<Big>("big", QueueOptions{.capacity = 16});  // nothing was registered
  EXPECT_EQ(small.capacity(), 16u);
}

/// declare_under_address_limit<T>(capacity): in a death-test child, bounds the address space
/// to 512 MiB, declares a queue<T> of `capacity`, prints its Error and exits 0 if the code is
/// `capacity` (2: no limit set, 3: another code, 4: no error).
template <class T>
[[noreturn]] void declare_under_address_limit(std::uint32_t capacity) {
  const rlim_t bytes = rlim_t{512} << 20;
  const rlimit limit{bytes, bytes};
  if (::setrlimit(RLIMIT_AS, &limit) != 0) std::_Exit(2);
  Engine engine({.mode = Mode::inlined});
  try {
    (void)engine.declare_queue<T>("big", QueueOptions{.capacity = capacity});
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    std::_Exit(e.code() == ErrorCode::capacity ? 0 : 3);
  }
  std::_Exit(4);
}

TEST(QueueFootprint, AllocationFailureBelowTheBoundIsTheSameErrorNotACrash) {
#ifdef RAIL_SANITIZED
  GTEST_SKIP() << "the sanitizer runtimes reserve terabytes of address space: RLIMIT_AS cannot "
                  "bound them";
#endif
  // 262,144 x (128 + 4096) bytes: about 1.1 GB, under any test machine's physical memory and
  // far over the address-space limit the child sets.
  constexpr std::size_t kCapacity = std::size_t{1} << 18;
  using Page = std::array<char, 4096>;
  const auto needed = detail::queue_footprint(kCapacity, sizeof(Page));
  if (needed.total > detail::physical_memory_bytes())
    GTEST_SKIP() << "this machine has less memory than the footprint under the bound";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(declare_under_address_limit<Page>(kCapacity), ::testing::ExitedWithCode(0),
              "capacity: queue 'big' with capacity 262144 and a 4096-byte payload needs [0-9]+ "
              "bytes .* allocating it failed \\(std::bad_alloc\\)");
}

}  // namespace
}  // namespace rail
