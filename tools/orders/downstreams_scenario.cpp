// The downstreams scenario: see downstreams_scenario.hpp.
#include "orders/downstreams_scenario.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace rail::orders {

namespace {

constexpr std::uint64_t kCharges = 60, kEmails = 20;
constexpr std::uint64_t kRate = 20;
constexpr std::uint32_t kPaymentsInFlight = 3, kEmailInFlight = 2;

/// Gate: the mail API's outage, lifted once every charge is done.
struct Outage {
  std::mutex mu;
  std::condition_variable cv;
  bool over = false;
  void lift() {
    {
      std::lock_guard lock(mu);
      over = true;
    }
    cv.notify_all();
  }
  void wait() {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return over; });
  }
};

std::uint64_t most_in_window(const std::vector<Duration>& starts, Duration window) {
  std::uint64_t most = 0;
  for (std::size_t i = 0, j = 0; i < starts.size(); ++i) {
    while (starts[i] - starts[j] >= window)
      ++j;
    most = std::max<std::uint64_t>(most, i - j + 1);
  }
  return most;
}

}  // namespace

bool DownstreamsReport::ok() const noexcept {
  return charged == kCharges && mailed == kEmails && payments_done_before_email &&
         max_in_window <= bound_in_window && max_charges_in_flight <= kPaymentsInFlight &&
         mail_active_while_stalled <= kEmailInFlight &&
         mail_waiting_while_stalled == kEmails - mail_active_while_stalled;
}

DownstreamsReport run_downstreams(Engine& engine, std::ostream* log) {
  DownstreamsReport report;
  const TimePoint t0 = engine.clock().now();  // the window starts empty when declared
  engine.declare_downstream("payments",
                            {.concurrency = kPaymentsInFlight,
                             .rate = RateLimit{.max = kRate, .per = std::chrono::seconds(1)}});
  engine.declare_downstream("email", {.concurrency = kEmailInFlight});
  QueueOptions pay_options, mail_options;
  pay_options.downstream = "payments";
  mail_options.downstream = "email";
  auto pay = engine.declare_queue<int>("charge-card", pay_options);
  auto mail = engine.declare_queue<int>("send-email", mail_options);
  auto mail_counts = [&mail] { return mail.counts(); };

  Outage outage;
  std::mutex mu;  // report.charge_starts
  std::atomic<std::uint64_t> in_flight{0}, most{0}, charged{0}, mailed{0};
  pay.process({.concurrency = 8}, [&](Job<int>& job) {
    const std::uint64_t inside = in_flight.fetch_add(1) + 1;
    std::uint64_t m = most.load();
    while (inside > m && !most.compare_exchange_weak(m, inside)) {
    }
    {
      std::lock_guard lock(mu);
      // The clock reading the downstream admitted it at: the window bounds those.
      report.charge_starts.push_back(job.started_at() - t0);
    }
    std::this_thread::yield();  // the gateway's round trip
    in_flight.fetch_sub(1);
    if (charged.fetch_add(1) + 1 == kCharges) {
      // The last charge: how email stands at this moment, then its API recovers.
      const auto m = mail_counts();
      report.mail_active_while_stalled = m.active;
      report.mail_waiting_while_stalled = m.waiting + m.delayed;
      report.payments_done_before_email = mailed.load() == 0;
      report.payments_done_at = engine.clock().now() - t0;
      outage.lift();
    }
  });
  mail.process({.concurrency = 8}, [&](Job<int>&) {
    outage.wait();  // the mail API hangs until the shop's charges are through
    mailed.fetch_add(1);
  });
  for (std::uint64_t i = 0; i < kEmails; ++i)
    (void)mail.add("confirmation", static_cast<int>(i));
  for (std::uint64_t i = 0; i < kCharges; ++i)
    (void)pay.add("charge", static_cast<int>(i));
  if (log)
    *log << "payments: " << kCharges << " charges, at most " << kRate << " in any second ("
         << kPaymentsInFlight << " in flight); email: " << kEmails
         << " sends, its API hangs until the charges are done\n";

  // Payments must finish on their own while email hangs (the last charge lifts the outage).
  (void)pay.wait_idle(std::chrono::minutes(2));
  (void)mail.wait_idle(std::chrono::minutes(2));
  if (log)
    *log << "payments done at " << std::chrono::duration<double>(report.payments_done_at).count()
         << " s; email then: " << report.mail_active_while_stalled
         << " handlers stuck in the hung API, " << report.mail_waiting_while_stalled
         << " jobs waiting without a thread, "
         << (report.payments_done_before_email ? "none sent" : "some sent (not stalled?)") << "\n";

  report.charged = charged.load();
  report.mailed = mailed.load();
  report.max_charges_in_flight = most.load();
  std::sort(report.charge_starts.begin(), report.charge_starts.end());
  report.max_in_window = most_in_window(report.charge_starts, std::chrono::seconds(1));
  report.bound_in_window = kRate;
  if (log) {
    *log << "charge starts per 250 ms:";
    std::vector<std::uint64_t> buckets;
    for (const Duration d : report.charge_starts) {
      const auto b = static_cast<std::size_t>(d / std::chrono::milliseconds(250));
      if (buckets.size() <= b) buckets.resize(b + 1);
      ++buckets[b];
    }
    for (const auto n : buckets)
      *log << ' ' << n;
    *log << "\nmost charges in any 1 s: " << report.max_in_window << " (the rate allows "
         << report.bound_in_window << "); most in flight: " << report.max_charges_in_flight
         << " (limit " << kPaymentsInFlight << "); emails sent after recovery: " << report.mailed
         << "\n--- " << (report.ok() ? "OK" : "CHECK FAILED") << " ---\n";
  }
  return report;
}

}  // namespace rail::orders
