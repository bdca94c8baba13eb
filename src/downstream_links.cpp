// DownstreamLinks and GateLink's wake-ups: see include/rail/detail/downstream_links.hpp and
// gate_link.hpp.
#include "rail/detail/downstream_links.hpp"

#include <string>
#include <utility>

#include "rail/detail/job_flow.hpp"
#include "rail/error.hpp"

namespace rail::detail {

DownstreamLinks::DownstreamLinks(FlowParts& parts, JobFlow& flow, Dispatcher& dispatch)
    : parts_(parts), flow_(flow), dispatch_(dispatch) {
  if (!parts_.options.downstream.empty()) {
    owner_.push_back(std::make_unique<GateLink>(
        parts_, flow_, dispatch_, parts_.core.downstream(parts_.options.downstream, parts_.name)));
    links_[0].store(owner_.back().get(), std::memory_order_relaxed);  // before attach()
  }
}

void DownstreamLinks::attach() {
  GateLink* own = link(0);
  if (own == nullptr) return;
  own->serve_permits();
  own->gate().attach(own);
}

std::uint8_t DownstreamLinks::link_of(const std::string& downstream) const noexcept {
  // acquire: pairs with link_to's release store of the count.
  const std::size_t n = count_.load(std::memory_order_acquire);
  for (std::size_t i = 0; i < n; ++i) {
    const GateLink* l = links_[i].load(std::memory_order_relaxed);  // published with the count
    if (l != nullptr && l->gate().name() == downstream) return static_cast<std::uint8_t>(i);
  }
  return 0;  // unreachable after link_to: the queue's own (admit made every named link)
}

void DownstreamLinks::link_to(const std::string& downstream) {
  if (downstream == parts_.options.downstream) return;  // link 0
  // Every add naming a downstream comes here: the links made already are found without the
  // lock (link_of reads the published ones), so only a link's first add takes it.
  if (link_of(downstream) != 0) return;
  const std::lock_guard lock(mu_);
  const std::size_t n = count_.load(std::memory_order_relaxed);  // written under the lock
  for (std::size_t i = 1; i < n; ++i)
    if (links_[i].load(std::memory_order_relaxed)->gate().name() == downstream) return;
  DownstreamGate* gate = parts_.core.find_downstream(downstream);
  if (gate == nullptr)
    throw Error(
        ErrorCode::unknown_downstream,
        "JobOptions.downstream names '" + downstream + "' on queue '" + parts_.name +
            "', which was never declared; expected a name given to Engine::declare_downstream()");
  if (n == GateLink::kMaxLinks)
    throw Error(ErrorCode::capacity, "queue '" + parts_.name + "' already calls " +
                                         std::to_string(GateLink::kMaxLinks - 1) +
                                         " downstreams named per job; JobOptions.downstream '" +
                                         downstream + "' would be one more");
  auto made = std::make_unique<GateLink>(parts_, flow_, dispatch_, *gate);
  owner_.reserve(owner_.size() + 1);  // no throw after the gate knows the link
  gate->attach(made.get());
  links_[n].store(made.get(), std::memory_order_relaxed);
  owner_.push_back(std::move(made));
  // release: a reader that sees the count sees the link stored before it.
  count_.store(n + 1, std::memory_order_release);
}

bool GateLink::wake_blocked(std::atomic<std::int64_t>& blocked, bool even_paused) noexcept {
  std::uint32_t idx;
  if ((!even_paused && dispatch_.paused()) || !blocked_.try_pop(idx)) return false;
  blocked.fetch_sub(1, std::memory_order_relaxed);  // relaxed: a figure (see the gate's fences)
  // The index is ours until the push, which publishes the mark (release) to its deliverer.
  slots_[idx].mark(JobSlot::kWoken, true);
  dispatch_.requeue(idx);
  return true;
}

bool GateLink::wake_above(std::uint32_t leader, std::atomic<std::int64_t>& blocked) noexcept {
  if (blocked_.levels() == 1 || dispatch_.paused()) return false;
  std::uint32_t idx;
  if (!blocked_.try_pop_above(idx, leader)) return false;
  blocked.fetch_sub(1, std::memory_order_relaxed);  // relaxed: as in wake_blocked
  dispatch_.requeue(idx);  // unmarked: the leader carries the chain (DownstreamGate::step_down)
  return true;
}

void GateLink::promote_leader(JobId id) noexcept {
  try {
    (void)flow_.retime(id, flow_.core().now_ns(), true);
  } catch (...) {  // retime allocates nothing; a failure leaves the leader due when it was
  }
}

void GateLink::serve_permits() noexcept {
  serves_permits_ = true;
  dispatch_.take_permits_from(this);
}

PermitSource::Take GateLink::take() noexcept {
  DownstreamLimits& limits = gate_.limits();
  for (;;) {
    if (!limits.limited()) return Take::unlimited;
    if (limits.try_acquire_permit()) return Take::taken;
    if (!hungry()) return Take::refused;
  }
}

void GateLink::give_back() noexcept {
  gate_.release(flow_.core().now_ns());
}

bool GateLink::may_take() noexcept {
  const DownstreamLimits& limits = gate_.limits();
  return !limits.limited() || limits.permit_free() || hungry();
}

bool GateLink::hungry() noexcept {
  // relaxed, both: the fence orders the mark before the look (see the header).
  if (!hungry_.load(std::memory_order_relaxed)) hungry_.store(true, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return gate_.limits().permit_free();
}

bool GateLink::wake_hungry() noexcept {
  // relaxed: the caller's fence orders these loads after its release (see the header).
  if (!hungry_.load(std::memory_order_relaxed) ||
      !hungry_.exchange(false, std::memory_order_relaxed))
    return false;
  dispatch_.wake_workers();
  return true;
}

std::uint64_t GateLink::waiting_for_permit() const noexcept {
  return serves_permits_ ? flow_.waiting_in_line() : 0;
}

std::uint64_t DownstreamLinks::waiting_in_line(std::uint64_t waiting) const noexcept {
  // Figures, each read on its own: the queue's waiting jobs but those at a gate (blocked, or
  // the one a gate holds on the wheel for its token).
  auto n = static_cast<std::int64_t>(waiting);
  for_each([&n](GateLink& l) {
    n -= static_cast<std::int64_t>(l.blocked().size_approx()) + (l.gate().leads_for(&l) ? 1 : 0);
  });
  return n > 0 ? static_cast<std::uint64_t>(n) : 0;
}

}  // namespace rail::detail
