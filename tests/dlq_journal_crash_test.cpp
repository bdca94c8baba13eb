// Crash safety of the DLQ journal: a child process dead-letters entries (and tombstones some)
// into a journal and is killed with SIGKILL at a random moment; the parent then opens the file
// and checks that every entry the child reported durable is back, every tombstone it reported
// is honoured, and the only damage is a torn tail. The journal file carries over from trial to
// trial, so each trial also recovers what the previous kill left. The compaction variant
// tombstones most entries so that compactions run all the time and kills land inside them: the
// path must then hold the old file or the new one, never neither.
//
// A variant whose payloads hold intact records checks that a torn append is never read as damage in
// the middle (the journal would be refused) nor as the records inside it (a planted id would come
// back): recovery never takes bytes inside a record's claimed extent.
//
// Trials per variant: 200, or RAIL_CRASH_TRIALS (e.g. RAIL_CRASH_TRIALS=1000 for the long mode).
// The kill moment is random (the seed is printed); the verdict never depends on timing.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <ostream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "rail/detail/dlq_journal.hpp"
#include "rail/detail/journal_format.hpp"
#include "rail/error.hpp"
#include "support/temp_dir.hpp"

namespace rail {
namespace {

struct Variant {
  const char* name;
  JournalSync sync;  // every_entry: 'E' reports come from on_durable; none: from append's return
  bool compact;      // tombstone 9 of 10 entries and compact at a few KiB of dead bytes
  std::size_t max_payload;
  bool records_in_payloads = false;  // each payload holds intact records at every alignment
  friend void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }
};

JournalOptions journal_options(const std::string& path, const Variant& v) {
  JournalOptions j{.path = path, .sync = v.sync, .grow_chunk = 4096};
  if (v.compact) {
    j.compact_min_dead_bytes = 4096;
    j.compact_dead_ratio = 0.3;
  }
  return j;
}

// A payload that holds the bytes of an intact record (an entry for `planted`, an id no trial
// uses, and a tombstone) at each of the 8 alignments, so that one of them sits at a multiple of 8
// in the file whatever the payload's place in its own record: a torn append of it must never be
// read as that record.
std::string planted_records() {
  constexpr JobId planted = 4242;
  StoredDeadLetter fake;
  fake.id = planted;
  fake.name = "planted";
  fake.payload = "run me";
  const std::string rec = detail::journal::encode_entry(fake) +
                          detail::journal::encode_tombstone(TombstoneCause::purged, {});
  std::string out;
  for (std::size_t k = 0; k < 8; ++k)
    out += std::string(k, 'x') + rec + std::string(8 - k, 'x');
  return out;
}

// The entry for an id is a function of the id, so the parent can check every field it gets back.
StoredDeadLetter entry_for(JobId id, const Variant& v) {
  StoredDeadLetter e;
  e.id = id;
  e.name = "job-" + std::to_string(id % 7);
  e.payload.assign(static_cast<std::size_t>(id * 7919 % v.max_payload),
                   static_cast<char>('a' + id % 26));
  if (v.records_in_payloads) e.payload += planted_records();
  e.reason = DeadLetterReason::attempts_exhausted;
  e.failed_attempts = e.max_attempts = static_cast<std::uint32_t>(1 + id % 4);
  e.added_at_ns = static_cast<std::int64_t>(id);
  e.dead_at_ns = static_cast<std::int64_t>(id) + 1;
  e.dead_at_unix_ns = static_cast<std::int64_t>(id) + 2;
  for (std::uint32_t a = 1; a <= e.failed_attempts; ++a)
    e.errors.push_back({a, static_cast<std::int64_t>(a), "failure " + std::to_string(a)});
  return e;
}
bool tombstoned(JobId id, const Variant& v) {
  return v.compact ? id % 10 != 0 : id % 5 == 0;
}

// A report on the pipe: 'E' entry durable, 'T' tombstone durable, then the id.
struct Report {
  char kind;
  JobId id;
};
void send(int fd, char kind, JobId id) {
  char buf[9];
  buf[0] = kind;
  std::memcpy(buf + 1, &id, 8);
  if (::write(fd, buf, sizeof buf) != static_cast<ssize_t>(sizeof buf)) ::_exit(3);
}

[[noreturn]] void child(const std::string& path, const Variant& v, JobId first, int fd) {
  JournalOptions j = journal_options(path, v);
  j.on_durable = [fd](JobId id) { send(fd, 'E', id); };
  std::vector<StoredDeadLetter> restored;
  try {
    detail::DlqJournal journal(j, "orders", "std::string", restored);
    for (JobId id = first;; ++id) {
      // Under JournalSync::none an append that returned is the promise (it survives a process
      // crash): report it then, so the kill can land inside the next record's copy.
      std::uint64_t ticket =
          journal.append_entry(detail::journal::encode_entry(entry_for(id, v)), id);
      if (v.sync == JournalSync::none) send(fd, 'E', id);
      journal.settle(ticket);
      if (tombstoned(id, v)) {
        journal.settle(journal.append_tombstone(TombstoneCause::redriven, {&id, 1}));
        send(fd, 'T', id);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "child: %s\n", e.what());
    ::_exit(2);
  }
}

int trials() {
  const char* env = std::getenv("RAIL_CRASH_TRIALS");
  return env ? std::max(1, std::atoi(env)) : 200;
}

class CrashTest : public ::testing::TestWithParam<Variant> {};

TEST_P(CrashTest, EveryEntryReportedDurableSurvivesSigkillAtARandomMoment) {
  const Variant v = GetParam();
  test::TempDir dir;
  std::string path;
  const std::uint64_t seed = std::random_device{}();
  std::mt19937_64 rng(seed);
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::set<JobId> durable, removed;
  std::size_t reported = 0;
  int stale_temporaries = 0, torn_tails = 0;
  const int n = trials();
  for (int trial = 0; trial < n; ++trial) {
    // A file carries over 10 trials (recovering what each kill left), then a fresh one starts so
    // that opening time stays flat however long the run.
    if (trial % 10 == 0) {
      path = dir.file("orders-" + std::to_string(trial / 10) + ".dlq");
      durable.clear();
      removed.clear();
    }
    int p[2];
    ASSERT_EQ(::pipe(p), 0);
    const JobId first = static_cast<JobId>(trial + 1) * 1'000'000;
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(p[0]);
      child(path, v, first, p[1]);
    }
    ::close(p[1]);
    // Let the child report a random number of entries, then kill it wherever it is.
    const std::uint64_t wait_for = rng() % 12;
    std::vector<Report> reports;
    auto read_report = [&]() {
      char buf[9];
      std::size_t got = 0;
      while (got < sizeof buf) {
        ssize_t r = ::read(p[0], buf + got, sizeof buf - got);
        if (r <= 0) return false;
        got += static_cast<std::size_t>(r);
      }
      Report rep{buf[0], 0};
      std::memcpy(&rep.id, buf + 1, 8);
      reports.push_back(rep);
      ++reported;
      return true;
    };
    while (reports.size() < wait_for && read_report()) {
    }
    for (std::uint64_t spin = rng() % 200'000; spin > 0; --spin)
      asm volatile("");
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    while (read_report()) {
    }
    ::close(p[0]);
    ASSERT_TRUE(WIFSIGNALED(status))
        << "trial " << trial << ": the child exited by itself, status " << status;
    for (const Report& r : reports)
      (r.kind == 'E' ? durable : removed).insert(r.id);

    std::vector<JournalProblem> problems;
    JournalOptions j = journal_options(path, v);
    j.on_problem = [&](const JournalProblem& pr) { problems.push_back(pr); };
    std::vector<StoredDeadLetter> restored;
    try {
      detail::DlqJournal journal(j, "orders", "std::string", restored);
    } catch (const Error& e) {
      FAIL() << "trial " << trial << ": the journal does not open: " << e.what();
    }
    for (const auto& pr : problems) {
      ASSERT_TRUE(pr.kind == JournalProblem::Kind::torn_tail ||
                  pr.kind == JournalProblem::Kind::stale_temporary)
          << "trial " << trial << ": " << pr.message;
      (pr.kind == JournalProblem::Kind::torn_tail ? torn_tails : stale_temporaries) += 1;
    }
    std::set<JobId> back;
    for (const auto& e : restored) {
      ASSERT_TRUE(back.insert(e.id).second) << "id " << e.id << " restored twice";
      ASSERT_EQ(detail::journal::encode_entry(e), detail::journal::encode_entry(entry_for(e.id, v)))
          << "trial " << trial << ": entry " << e.id << " came back with other fields";
      ASSERT_FALSE(removed.count(e.id))
          << "trial " << trial << ": tombstoned " << e.id << " is back";
    }
    // A durable entry must be back unless it was due a tombstone (which the kill may have
    // caught after its append but before its report).
    for (JobId id : durable) {
      if (!tombstoned(id, v)) {
        ASSERT_TRUE(back.count(id)) << "trial " << trial << ": durable entry " << id << " is lost";
      }
    }
  }
  std::printf(
      "[ %s ] %d trials, %zu entries and tombstones reported durable, %d torn tails truncated, %d "
      "compactions interrupted before their rename\n",
      v.name, n, reported, torn_tails, stale_temporaries);
}

INSTANTIATE_TEST_SUITE_P(
    Journal, CrashTest,
    ::testing::Values(Variant{"synced_appends", JournalSync::every_entry, false, 2500},
                      Variant{"unsynced_large_appends", JournalSync::none, false, 40'000},
                      Variant{"compaction", JournalSync::none, true, 2500},
                      Variant{"records_in_payloads", JournalSync::none, false, 2500, true}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace rail
