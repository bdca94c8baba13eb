// QueueFront: the typed Queue's calls, each handed to the QueueImpl the front belongs to; the
// contract is in include/rail/detail/queue_front.hpp.
#include "rail/detail/queue_front.hpp"

#include <utility>

#include "rail/detail/queue_impl.hpp"
#include "rail/error.hpp"

namespace rail::detail {

namespace {
// Every QueueFront is the front of a QueueImpl (QueueImpl::of); most calls go on to its job flow.
QueueImpl& impl(QueueFront& front) noexcept {
  return QueueImpl::of(front);
}
const QueueImpl& impl(const QueueFront& front) noexcept {
  return QueueImpl::of(front);
}
JobFlow& flow(QueueFront& front) noexcept {
  return impl(front);
}
const JobFlow& flow(const QueueFront& front) noexcept {
  return impl(front);
}
}  // namespace

const std::string& QueueFront::name() const noexcept {
  return flow(*this).name();
}
const QueueOptions& QueueFront::options() const noexcept {
  return flow(*this).options();
}
const PayloadOps& QueueFront::ops() const noexcept {
  return impl(*this).payload_ops();
}
EngineCore& QueueFront::core() const noexcept {
  return flow(*this).core();
}

AddReceipt QueueFront::add(std::string_view job_name, void* data, const JobOptions& o) {
  return impl(*this).add_one(job_name, data, o);
}
AddReceipt QueueFront::resume(std::string_view job_name, void* data, const JobOptions& o,
                              const Resumed& r) {
  return impl(*this).resume_one(job_name, data, o, r);
}
QueueFront::TrackedAdd QueueFront::add_tracked(std::string_view job_name, void* data,
                                               const JobOptions& o) {
  return impl(*this).add_tracked(job_name, data, o);
}
BulkAddReceipt QueueFront::add_bulk(std::string_view job_name, void* items, std::size_t n,
                                    const JobOptions& o) {
  return impl(*this).add_bulk(job_name, items, n, o);
}

ScheduleInfo QueueFront::schedule(std::string_view id, const Schedule& when,
                                  std::string_view job_name, void* data, const ScheduleOptions& o) {
  return impl(*this).schedule(id, when, job_name, data, o);
}
bool QueueFront::unschedule(std::string_view id) {
  return flow(*this).schedules().remove(id);
}
std::optional<ScheduleInfo> QueueFront::schedule_info(std::string_view id) const {
  const auto* t = flow(*this).schedules_if_any();
  return t ? t->info(id) : std::nullopt;
}
std::vector<ScheduleInfo> QueueFront::schedules() const {
  const auto* t = flow(*this).schedules_if_any();
  return t ? t->list() : std::vector<ScheduleInfo>{};
}

void QueueFront::check_processor(const WorkerOptions& w) const {
  impl(*this).check_processor(w);
}
void QueueFront::set_handler(RunHandler run, HandlerBox handler, const WorkerOptions& w) {
  impl(*this).set_handler(run, std::move(handler), w);
}

void QueueFront::pause() noexcept {
  flow(*this).pause();
}
void QueueFront::resume() noexcept {
  flow(*this).resume();
}
bool QueueFront::paused() const noexcept {
  return flow(*this).paused();
}
bool QueueFront::pause_and_wait(Duration timeout) {
  return flow(*this).pause_and_wait(timeout);
}
bool QueueFront::wait_idle(Duration timeout) {
  return flow(*this).wait_idle(timeout);
}
bool QueueFront::cancel(JobId id) {
  return flow(*this).cancel(id);
}
JobState QueueFront::state(JobId id) const {
  return flow(*this).state(id);
}
Explanation QueueFront::explain(JobId id) const {
  return flow(*this).explain(id);
}
bool QueueFront::promote(JobId id) {
  return flow(*this).retime(id, 0);
}
bool QueueFront::change_delay(JobId id, Duration d) {
  if (d.count() < 0)
    throw Error(ErrorCode::invalid_option,
                "change_delay: the delay is negative; expected a duration >= 0");
  return flow(*this).retime(id, saturating_add(core().now_ns(), d));
}
std::vector<JobInfo> QueueFront::jobs(JobStatus status, std::size_t limit) const {
  return flow(*this).jobs(status, limit);
}
QueueCounts QueueFront::counts() const noexcept {
  return flow(*this).counts();
}
QueueMetrics QueueFront::metrics() {
  return impl(*this).metrics();
}
std::vector<Duration> QueueFront::oldest_waits() const {
  return flow(*this).oldest_waits();
}
void QueueFront::take_leftovers(FunctionRef<void(LeftoverJob&&, bool, void*)> take) {
  impl(*this).take_leftovers(take);
}
void QueueFront::set_batch_handler(BatchRun run, HandlerBox handler, const WorkerOptions& w,
                                   const BatchOptions& b) {
  impl(*this).set_batch_handler(run, std::move(handler), w, b);
}
DeadLetterStore& QueueFront::dlq() noexcept {
  return impl(*this).bridge().store();
}

std::shared_ptr<EndWaiter> QueueFront::watch(JobId id) {
  return flow(*this).end_tracker().watch(id, false);
}
std::optional<JobEnd<void>> QueueFront::retained(JobId id) const {
  return const_cast<JobFlow&>(flow(*this)).end_tracker().retained(id);
}

}  // namespace rail::detail
