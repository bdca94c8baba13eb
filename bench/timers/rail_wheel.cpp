// bench_timers contender: rail::detail::TimingWheel<> (4 levels x 256 slots, 1 ms tick), the
// engine's retry and lease timer, with the TimerNode embedded in an array of records the way the
// engine embeds it in job slots.
//
// Like-for-like: schedule links the id's node (O(1), no allocation); cancel unlinks it (O(1)), so
// cancelled timers cost nothing at expiry; advance() fires through the same callback as the heap.
// The node array (32 bytes per timer) is allocated once; reset() rebuilds the wheel in place and
// clears the nodes, untimed.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "rail/detail/timing_wheel.hpp"
#include "timers/timers_harness.hpp"

namespace rail_bench::timers {
namespace {

class RailWheel {
 public:
  explicit RailWheel(std::size_t timers) : nodes_(timers) {}

  void reset() {
    wheel_.emplace(kTickNs, 0);  // the old wheel's links into nodes_ die with it
    for (rail::detail::TimerNode& node : nodes_)
      node = rail::detail::TimerNode{};
  }

  void schedule(std::uint32_t id, std::int64_t deadline_ns) noexcept {
    rail::detail::TimerNode& node = nodes_[id];
    node.tag = id;
    wheel_->schedule(node, deadline_ns);
  }

  void cancel(std::uint32_t id) noexcept { wheel_->cancel(nodes_[id]); }

  void advance(std::int64_t now_ns, Fired& fired) noexcept {
    wheel_->advance(now_ns,
                    [&fired](rail::detail::TimerNode& node) noexcept { fired.add(node.tag); });
  }

 private:
  std::vector<rail::detail::TimerNode> nodes_;
  std::optional<rail::detail::TimingWheel<>> wheel_;
};

}  // namespace

void register_rail_wheel() {
  register_contender<RailWheel>("rail_wheel");
}

}  // namespace rail_bench::timers
