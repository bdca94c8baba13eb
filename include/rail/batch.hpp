// Batch<T>: the jobs a batch handler gets at once (Queue::process_batch): BullMQ Pro's batches,
// SQS's ReceiveMessage of up to ten, pg-boss's batchSize. Each job keeps everything a single
// delivery has: its own lease (renewed with extend_lease), its own downstream permit, its own
// outcome (retries with backoff, the DLQ), and cancel() or a lapsed lease fences it alone.
//
// Outcomes: every job of a batch is done unless the handler says otherwise with set(i, outcome)
// (retry, retry_in, fail, discard, pushback). A handler that throws fails every job it gave no
// outcome, with the exception's message, as a single handler's throw does (an
// UnrecoverableError dead-letters them).
// How a batch forms: a worker takes the jobs that are ready, one delivery at a time, until it
// holds BatchOptions::max or finds none ready; then it waits up to BatchOptions::linger, counted
// from the batch's first job, for more, and calls the handler with what it holds. Only a worker
// of the queue's own pool lingers (a shared-pool worker runs what it holds when its turn on the
// queue ends), and never past half the shortest lease of the jobs it holds, nor while one of
// them holds a downstream permit (the permits would keep the next jobs out). Shutdown and pause
// run a partial batch at once (pause_and_wait returns only after it ran).
// A view: valid during the handler call only; copy out what you need to keep.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <new>
#include <string>

#include "rail/clock.hpp"
#include "rail/error.hpp"
#include "rail/job.hpp"
#include "rail/outcome.hpp"

namespace rail {

/// BatchOptions: how Queue::process_batch forms a batch.
struct BatchOptions {
  /// The largest batch process_batch accepts.
  static constexpr std::uint32_t kMaxJobs = 4096;
  /// The most jobs one handler call gets, 1 .. kMaxJobs. A worker keeps up to max deliveries
  /// open, each with its own lease record (64 bytes, max of them for each worker that may run
  /// the queue: every worker of a shared pool), which the lease sweep scans: max x the workers
  /// that may hold a batch at once is at most WorkerOptions::kMaxPending.
  std::uint32_t max = 16;
  /// How long a worker holding fewer than `max` jobs waits for more, from the batch's first job
  /// (real time); 0: it runs what is ready now. Duration::max(): until the batch is full, or
  /// shutdown or a pause runs it.
  Duration linger = Duration::zero();
};

template <class T, class R>
class Queue;

namespace detail {
class GateLink;
/// OpenDelivery: a delivery between its start and its outcome: the job's view and what its end
/// gives back (its lease record, a downstream permit). JobFlow::deliver opens and closes one per
/// job; a batch queue's worker keeps them open until its batch handler returned.
struct OpenDelivery {
  JobFields job;
  GateLink* gate = nullptr;  // the job's downstream, if it names one
  bool permit = false;       // it holds a permit of `gate`
  bool own_gate = false;     // `gate` is the queue's own downstream (QueueOptions::downstream)
  bool leased = false;       // job.record_ holds its lease
};
/// BatchEntry: one job of a batch as the engine holds it: its open delivery (which pins the
/// slot) and its payload in that slot.
struct BatchEntry {
  OpenDelivery open;
  const void* payload = nullptr;
};
}  // namespace detail

/// BatchJob<T>: one job of a batch: the facts a Job<T> shows, its payload and its delivery's
/// controls.
template <class T>
class BatchJob : public detail::JobFacts {
 public:
  /// data() is the payload (read-only, as Job<T>::data()).
  [[nodiscard]] const T& data() const noexcept { return *data_; }
  /// cancelled(): this job's delivery no longer counts (cancel(), a lapsed lease).
  [[nodiscard]] bool cancelled() const noexcept { return detail::fenced(*fields_); }
  /// extend_lease(d): renews this job's lease to end d from now (Job::extend_lease).
  bool extend_lease(Duration d) noexcept { return detail::extend_lease(*fields_, d); }

 private:
  template <class>
  friend class Batch;
  explicit BatchJob(detail::BatchEntry& e) noexcept
      : detail::JobFacts(e.open.job),
        data_(std::launder(static_cast<const T*>(e.payload))),
        fields_(&e.open.job) {}
  const T* data_;
  detail::JobFields* fields_;
};

template <class T>
class Batch {
 public:
  /// size(): the jobs in this batch, 1 .. BatchOptions::max.
  [[nodiscard]] std::size_t size() const noexcept { return n_; }
  /// operator[](i): job i, in the order the worker took them.
  [[nodiscard]] BatchJob<T> operator[](std::size_t i) const noexcept {
    return BatchJob<T>(entries_[i]);
  }
  /// set(i, outcome): job i's outcome (done unless set); Error(invalid_option) for i >= size().
  void set(std::size_t i, Outcome outcome) {
    if (i >= n_)
      throw Error(ErrorCode::invalid_option, "Batch::set(" + std::to_string(i) +
                                                 "): the batch holds " + std::to_string(n_) +
                                                 " jobs; expected an index below that");
    outcomes_[i] = std::move(outcome);
    set_[i] = 1;
  }

  /// Iteration, in the order of operator[].
  class iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = BatchJob<T>;
    using difference_type = std::ptrdiff_t;
    using pointer = void;
    using reference = BatchJob<T>;
    BatchJob<T> operator*() const noexcept { return BatchJob<T>(*e_); }
    iterator& operator++() noexcept {
      ++e_;
      return *this;
    }
    iterator operator++(int) noexcept {
      iterator old = *this;
      ++e_;
      return old;
    }
    bool operator==(const iterator&) const noexcept = default;

   private:
    friend class Batch;
    explicit iterator(detail::BatchEntry* e) noexcept : e_(e) {}
    detail::BatchEntry* e_ = nullptr;
  };
  [[nodiscard]] iterator begin() const noexcept { return iterator(entries_); }
  [[nodiscard]] iterator end() const noexcept { return iterator(entries_ + n_); }

  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;

 private:
  template <class, class>
  friend class Queue;
  Batch(detail::BatchEntry* entries, std::size_t n, Outcome* outcomes, std::uint8_t* set) noexcept
      : entries_(entries), n_(n), outcomes_(outcomes), set_(set) {}
  detail::BatchEntry* entries_;
  std::size_t n_;
  Outcome* outcomes_;
  std::uint8_t* set_;
};

}  // namespace rail
