// FlowParts: see include/rail/detail/flow_parts.hpp.
#include "rail/detail/flow_parts.hpp"

#include <new>
#include <utility>

#include "rail/detail/allocation.hpp"
#include "rail/detail/blank.hpp"
#include "rail/detail/resumed.hpp"

namespace rail::detail {

FlowParts::FlowParts(EngineCore& engine, std::string queue, QueueOptions opts)
    : core(engine),
      name(std::move(queue)),
      options(std::move(opts)),
      stats(options.capacity, options.histograms),
      capacity(options.capacity),
      slots(std::make_unique<JobSlot[]>(capacity)),
      stops(capacity),
      traces(capacity) {}

FlowParts::~FlowParts() {
  for (std::size_t i = 0; i < capacity; ++i) {
    if (SlotExtra* x = slots[i].extra) {
      x->~SlotExtra();
      free_aligned(x, sizeof(SlotExtra), alignof(SlotExtra));
    }
  }
}

SlotExtra& FlowParts::extra(JobSlot& s) {
  if (!s.extra) s.extra = ::new (alloc_aligned(sizeof(SlotExtra), alignof(SlotExtra))) SlotExtra();
  return *s.extra;
}

SlotRare& FlowParts::rare(JobSlot& s) {
  auto& r = extra(s).rare;
  if (!r) r = std::make_unique<SlotRare>();
  return *r;
}

void FlowParts::drop_retry_here(JobSlot& s) noexcept {
  SlotRare* r = s.extra ? s.extra->rare.get() : nullptr;
  if (r == nullptr || !r->retry_here) return;
  if (r->holds_retry_place) r->retry_here->give_back();
  r->holds_retry_place = false;
  r->retry_here.reset();
}

Event FlowParts::event(EventKind kind, const JobSlot& s, std::int64_t now) const noexcept {
  Event e = blank<Event>();
  e.kind = kind;
  e.at = TimePoint{Duration{now}};
  e.queue = name;
  e.job_id = s.id.load(std::memory_order_relaxed);
  e.job_name = job_name(s);
  e.attempt = s.attempts() + 1u;
  e.max_attempts = s.max_attempts;
  e.deliveries = s.delivered();
  if (traces.any()) [[unlikely]]
    e.trace = traces.of(index_of(s));
  return e;
}

void FlowParts::ask_to_stop(std::uint32_t idx, std::uint32_t delivery) noexcept {
  // Taken now (the next delivery must not inherit it), stopped on this thread, after the wheel
  // is released if it holds it: stop_callbacks are user code.
  std::stop_source source = stops.take(idx, delivery);
  if (!source.stop_possible()) return;  // its handler took no token: it will find the fence
  if (core.owns_wheel()) {
    try {
      core.after_wheel([source]() mutable { source.request_stop(); });
      return;
    } catch (...) {  // no memory to keep the call: now, under the wheel
    }
  }
  source.request_stop();
}

}  // namespace rail::detail
