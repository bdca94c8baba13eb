// The DLQ journal: round trips, restore and redrive across engines, tombstones, compaction,
// recovery from torn tails and damage, refusals that leave the file untouched, and a corruption
// sweep over the reader. Inline engines on a ManualClock: no threads, no sleeps decide anything.
#include "rail/detail/dlq_journal.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "rail/detail/journal_format.hpp"
#include "rail/journal_file.hpp"
#include "rail/rail.hpp"
#include "support/temp_dir.hpp"

/// Fragile: a payload whose journal codec throws when its text says so.
struct Fragile {
  std::string text;
};
template <>
struct rail::JournalCodec<Fragile> {
  static std::string name() { return "test.fragile"; }
  static void encode(const Fragile& f, std::string& out) {
    if (f.text == "unencodable") throw std::runtime_error("no bytes for this one");
    out += f.text;
  }
  static Fragile decode(std::span<const std::byte> bytes) {
    return Fragile{std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size())};
  }
};

namespace rail {
namespace {

using namespace std::chrono_literals;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}
void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}
std::span<const std::byte> as_bytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

// One engine generation: an inline engine on a manual clock, a queue of strings whose DLQ has a
// journal, and a handler that fails every job `attempts` times with "error <n>".
/// header_of_version(v): a valid file header claiming format version v (its CRC recomputed, so
/// only the version differs from what this build writes).
std::string header_of_version(std::uint32_t v) {
  std::string h = detail::journal::encode_header("orders", "std::string", 0);
  std::memcpy(h.data() + 8, &v, 4);
  std::memset(h.data() + 16, 0, 4);
  std::uint32_t crc = detail::journal::crc32c(as_bytes(h));
  std::memcpy(h.data() + 16, &crc, 4);
  return h;
}

struct Generation {
  ManualClock clock;
  Engine engine{EngineOptions{.clock = &clock, .mode = Mode::inlined}};
  std::vector<Event> events;
  Queue<std::string> q;

  explicit Generation(const QueueOptions& o) : q(declare(o)) {
    q.process({}, [](Job<std::string>& j) {
      return Outcome::retry("error " + std::to_string(j.attempt()) + " of " + j.data());
    });
  }
  Queue<std::string> declare(const QueueOptions& o) {
    engine.on_event([this](const Event& e) {
      Event copy = e;
      copy.queue = copy.job_name = copy.error = copy.dedup_id = {};
      events.push_back(copy);
    });
    return engine.declare_queue<std::string>("orders", o);
  }
  /// fail(payload, attempts): adds a job that dead-letters after `attempts` failures.
  JobId fail(const std::string& payload, std::uint32_t attempts = 3) {
    return fail_with(payload, {.max_attempts = attempts});
  }
  JobId fail_with(const std::string& payload, const JobOptions& o) {
    JobId id = q.add("charge-card", payload, o).id;
    engine.run_until_idle();
    while (auto next = engine.next_timer_in()) {
      clock.advance(*next);
      engine.run_until_idle();
    }
    return id;
  }
};

struct JournalTest : ::testing::Test {
  test::TempDir dir;
  std::string path = dir.file("orders.dlq");
  std::vector<JournalProblem> problems;
  std::vector<JobId> durable;

  QueueOptions options(JournalOptions j = {}) {
    QueueOptions o;
    if (j.path.empty()) j.path = path;
    j.on_problem = [this](const JournalProblem& p) { problems.push_back(p); };
    j.on_durable = [this](JobId id) { durable.push_back(id); };
    o.dlq.journal = std::move(j);
    return o;
  }
  /// open_journal(): opens the journal as a queue declaration would, without an engine (the
  /// refusals are the journal's; see the ASan note at the codec test for why not via a queue).
  void open_journal() {
    std::vector<StoredDeadLetter> restored;
    detail::DlqJournal j(JournalOptions{.path = path}, "orders", "std::string", restored);
  }
  std::vector<JobId> live_ids() {
    std::vector<JobId> ids;
    for (const auto& e : read_journal(path).live)
      ids.push_back(e.id);
    return ids;
  }
};

TEST_F(JournalTest, EveryFieldOfAnEntryRoundTripsThroughTheFile) {
  JobId id;
  DeadLetter<std::string> before;
  {
    Generation g(options());
    id = g.fail("order-3 {\"amount\": 42}");
    before = *g.q.dlq().get(id);
  }
  JournalScan scan = read_journal(path);
  EXPECT_TRUE(scan.healthy());
  EXPECT_EQ(scan.header.queue, "orders");
  EXPECT_EQ(scan.header.codec, "std::string");
  EXPECT_EQ(scan.header.version, detail::journal::kVersion);
  ASSERT_EQ(scan.live.size(), 1u);
  const StoredDeadLetter& s = scan.live[0];
  EXPECT_EQ(s.id, id);
  EXPECT_EQ(s.name, "charge-card");
  EXPECT_EQ(s.payload, "order-3 {\"amount\": 42}");
  EXPECT_EQ(s.reason, DeadLetterReason::attempts_exhausted);
  EXPECT_EQ(s.failed_attempts, 3u);
  EXPECT_EQ(s.max_attempts, 3u);
  EXPECT_EQ(s.added_at_ns, before.added_at.time_since_epoch().count());
  EXPECT_EQ(s.dead_at_ns, before.dead_at.time_since_epoch().count());
  ASSERT_EQ(s.errors.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(s.errors[i].attempt, before.errors[i].attempt);
    EXPECT_EQ(s.errors[i].at_ns, before.errors[i].at.time_since_epoch().count());
    EXPECT_EQ(s.errors[i].message, before.errors[i].message);
  }
  EXPECT_EQ(s.errors[2].message, "error 3 of order-3 {\"amount\": 42}");
  EXPECT_EQ(s.deliveries, 3u);
  EXPECT_EQ(s.stalls, 0u);
}

TEST_F(JournalTest, TheJobsOwnOptionsAndCountsSurviveARestartAndItsRedriveUsesThem) {
  JobOptions o{.max_attempts = 2, .backoff = Backoff::exponential(5s)};
  o.backoff.jitter = Jitter::full;
  o.backoff.cap = 1min;
  o.visibility_timeout = 90s;
  o.dedup.id = "order-3";
  o.downstream = "gateway";
  JobId id;
  {
    Generation g(options());
    g.engine.declare_downstream("gateway", {.concurrency = 4});
    id = g.fail_with("order-3", o);
  }
  Generation g2(options());
  auto gateway = g2.engine.declare_downstream("gateway", {.concurrency = 4});
  auto e = g2.q.dlq().get(id);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->deliveries, 2u);
  EXPECT_EQ(e->stalls, 0u);
  EXPECT_EQ(e->backoff.kind, BackoffKind::exponential);
  EXPECT_EQ(e->backoff.delay, 5s);
  EXPECT_EQ(e->backoff.jitter, Jitter::full);
  EXPECT_EQ(e->backoff.cap, 1min);
  EXPECT_EQ(e->visibility_timeout, std::optional<Duration>(90s));
  EXPECT_EQ(e->dedup_id, "order-3");
  EXPECT_EQ(e->downstream, "gateway");
  ASSERT_EQ(g2.q.dlq().redrive(id), RedriveStatus::redriven);
  std::uint32_t inside = 0;
  g2.engine.on_event([&](const Event& ev) {
    if (ev.kind == EventKind::started && ev.job_id == id) inside = gateway.stats().in_flight;
  });
  g2.engine.run_until_idle();
  EXPECT_EQ(inside, 1u) << "the redriven job called the downstream it named";
  EXPECT_EQ(g2.q.add("charge-card", "again", {.dedup = {.id = "order-3"}}).status,
            AddStatus::duplicate)
      << "the restored job holds its dedup id again";
}

TEST_F(JournalTest, AVersion1JournalStillOpensAndKeepsItsFormat) {
  // A journal written before version 2: its entries restore with the defaults for what version
  // 1 did not hold, and this build appends version-1 records to it, so an older build can
  // still read it.
  const std::string h = header_of_version(1);
  StoredDeadLetter old;
  old.id = 7;
  old.name = "charge-card";
  old.payload = "order-7";
  old.reason = DeadLetterReason::attempts_exhausted;
  old.failed_attempts = 1;
  old.max_attempts = 1;
  write_file(path, h + detail::journal::encode_entry(old, /*version=*/1));
  {
    Generation g(options());
    auto restored = g.q.dlq().get(7);
    ASSERT_TRUE(restored);
    EXPECT_EQ(restored->data, "order-7");
    EXPECT_EQ(restored->deliveries, 0u);
    EXPECT_EQ(restored->dedup_id, "");
    (void)g.fail("order-8", 1);
  }
  JournalScan scan = read_journal(path);
  EXPECT_TRUE(scan.healthy()) << scan.problems.front().message;
  EXPECT_EQ(scan.header.version, 1u);
  EXPECT_EQ(scan.live.size(), 2u);
}

TEST_F(JournalTest, ChecksumValidEntriesWithExtremeTimesRestoreWithSaturatedTimes) {
  // A record may hold any time at all: restore rebases each onto this engine's clock without
  // overflowing (UBSan aborts on an overflow in CI's sanitizer run), every entry is restored,
  // none dead in this engine's future, and each can still be listed and redriven.
  constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  const std::int64_t times[] = {kMin, kMin + 1, -1, 0, 1, kMax - 1, kMax};
  std::string bytes = header_of_version(detail::journal::kVersion);
  JobId id = 0;
  for (const std::int64_t engine_time : times) {
    for (const std::int64_t unix_time : {kMin, std::int64_t{0}, kMax}) {
      StoredDeadLetter e;
      e.id = ++id;
      e.name = "charge-card";
      e.payload = "order-" + std::to_string(id);
      e.reason = DeadLetterReason::attempts_exhausted;
      e.failed_attempts = 1;
      e.max_attempts = 1;
      e.added_at_ns = engine_time;
      e.dead_at_ns = engine_time;
      e.dead_at_unix_ns = unix_time;
      e.errors.push_back(StoredError{1, engine_time == kMax ? kMin : kMax, "boom"});
      bytes += detail::journal::encode_entry(e);
    }
  }
  write_file(path, bytes);
  Generation g(options());
  const auto entries = g.q.dlq().list();
  ASSERT_EQ(entries.size(), id);
  for (const auto& e : entries)
    EXPECT_LE(e.dead_at, g.clock.now()) << "job " << e.id << " died in the engine's future";
  EXPECT_EQ(g.q.dlq().redrive(1), RedriveStatus::redriven);
}

// A record of a type newer than its file's format: type 3 (details) in a version-1 file, type 4
// (details and downstream) in a version-2 one.
TEST_F(JournalTest, ARecordNewerThanItsFilesFormatIsReportedNotTrusted) {
  for (const std::uint32_t file : {1u, 2u}) {
    StoredDeadLetter e;
    e.id = 7;
    e.payload = "order-7";
    e.downstream = "gateway";
    write_file(path, header_of_version(file) + detail::journal::encode_entry(e, file + 1));
    JournalScan scan = read_journal(path);
    ASSERT_EQ(scan.problems.size(), 1u) << "version " << file;
    EXPECT_EQ(scan.problems[0].kind, JournalProblem::Kind::undecodable);
    EXPECT_TRUE(scan.live.empty());
  }
}

TEST_F(JournalTest, ANewEngineRestoresEntriesWithTheirIdsErrorsAndPayloads) {
  JobId a, b;
  {
    Generation g(options());
    a = g.fail("first");
    b = g.fail("second", 2);
  }
  Generation g2(options());
  auto list = g2.q.dlq().list();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].id, a);
  EXPECT_EQ(list[0].data, "first");
  ASSERT_EQ(list[0].errors.size(), 3u);
  EXPECT_EQ(list[0].errors[1].message, "error 2 of first");
  EXPECT_EQ(list[1].id, b);
  EXPECT_EQ(list[1].data, "second");
  EXPECT_EQ(list[1].failed_attempts, 2u);
  EXPECT_EQ(g2.q.state(a).status, JobStatus::dead_lettered);
  EXPECT_TRUE(problems.empty());
}

TEST_F(JournalTest, RestoredEntriesRedriveAndTheirTombstoneSurvivesTheNextRestart) {
  JobId a;
  {
    Generation g(options());
    a = g.fail("redrive-me");
    (void)g.fail("stay");
  }
  {
    ManualClock clock;
    Engine engine{EngineOptions{.clock = &clock, .mode = Mode::inlined}};
    auto q = engine.declare_queue<std::string>("orders", options());
    std::vector<std::string> ran;
    q.process({}, [&](Job<std::string>& j) { ran.push_back(j.data()); });
    ASSERT_EQ(q.dlq().redrive(a), RedriveStatus::redriven);
    engine.run_until_idle();
    EXPECT_EQ(ran, std::vector<std::string>{"redrive-me"});
    EXPECT_EQ(q.state(a).status, JobStatus::completed);
  }
  Generation g3(options());
  ASSERT_EQ(g3.q.dlq().size(), 1u);
  EXPECT_EQ(g3.q.dlq().list()[0].data, "stay");
}

TEST_F(JournalTest, NewJobsNeverReuseARestoredId) {
  JobId last;
  {
    Generation g(options());
    for (int i = 0; i < 5; ++i)
      last = g.fail(std::to_string(i) + "x");
  }
  Generation g2(options());
  JobId fresh = g2.q.add("charge-card", "new").id;
  EXPECT_GT(fresh, last);
}

// A thread takes ids in blocks (EngineCore::kIdBlock): one that added before the journal was
// restored holds a block from below the restored ids, which the restore must retire.
TEST_F(JournalTest, IdsAThreadReservedBeforeARestoreAreNotHandedOutAfterIt) {
  JobId last;
  {
    Generation g(options());
    for (int i = 0; i < 5; ++i)
      last = g.fail(std::to_string(i) + "x");
  }
  ManualClock clock;
  Engine engine{EngineOptions{.clock = &clock, .mode = Mode::inlined}};
  auto other = engine.declare_queue<std::string>("other", QueueOptions{});
  const JobId before = other.add("noop", "before").id;  // this thread's block starts at 1
  ASSERT_LT(before, last);
  auto orders = engine.declare_queue<std::string>("orders", options());
  ASSERT_EQ(orders.dlq().size(), 5U);
  const JobId after = other.add("noop", "after").id;
  EXPECT_GT(after, last) << "an id of the block reserved before the restore was handed out";
  EXPECT_GT(orders.add("charge-card", "new").id, last);
}

TEST_F(JournalTest, RemovePurgeAndEvictionAreRecordedAsTombstones) {
  QueueOptions o = options();
  o.dlq.max_entries = 3;
  std::vector<JobId> ids;
  {
    Generation g(o);
    for (int i = 0; i < 5; ++i)
      ids.push_back(g.fail(std::string("p").append(std::to_string(i))));
    // The bound evicted ids[0], ids[1]; remove ids[3].
    ASSERT_TRUE(g.q.dlq().remove(ids[3]));
  }
  EXPECT_EQ(live_ids(), (std::vector<JobId>{ids[2], ids[4]}));
  {
    Generation g(o);
    EXPECT_EQ(g.q.dlq().size(), 2u);
    EXPECT_EQ(g.q.dlq().purge(), 2u);
  }
  EXPECT_TRUE(live_ids().empty());
  Generation g(o);
  EXPECT_EQ(g.q.dlq().size(), 0u);
}

TEST_F(JournalTest, RetentionEvictionIsTombstoned) {
  QueueOptions o = options();
  o.dlq.retention = 1h;
  {
    Generation g(o);
    (void)g.fail("old");
    g.clock.advance(2h);
    EXPECT_EQ(g.q.dlq().size(), 0u);
  }
  EXPECT_TRUE(live_ids().empty());
}

TEST_F(JournalTest, HealthyJobsNeverTouchTheJournal) {
  {
    ManualClock clock;
    Engine engine{EngineOptions{.clock = &clock, .mode = Mode::inlined}};
    auto q = engine.declare_queue<std::string>("orders", options());
    q.process({}, [](Job<std::string>&) {});
    for (int i = 0; i < 1000; ++i)
      (void)q.add("ok", "fine");
    engine.run_until_idle();
    EXPECT_EQ(q.counts().completed, 1000u);
  }
  JournalScan scan = read_journal(path);
  EXPECT_EQ(scan.entry_records + scan.tombstone_records, 0u);
  EXPECT_EQ(scan.used_bytes, scan.header.header_bytes);
  EXPECT_TRUE(durable.empty());
}

TEST_F(JournalTest, EveryEntrySyncReportsEachEntryDurableBeforeDeadLetteringReturns) {
  Generation g(options());
  JobId a = g.fail("a");
  EXPECT_EQ(durable, std::vector<JobId>{a});
  JobId b = g.fail("b");
  EXPECT_EQ(durable, (std::vector<JobId>{a, b}));
}

TEST_F(JournalTest, EveryNSyncReportsDurableInBatchesOfN) {
  Generation g(options({.sync = JournalSync::every_n, .sync_every_n = 3}));
  std::vector<JobId> ids;
  ids.push_back(g.fail("a"));
  ids.push_back(g.fail("b"));
  EXPECT_TRUE(durable.empty());
  ids.push_back(g.fail("c"));
  EXPECT_EQ(durable, ids);
}

TEST_F(JournalTest, NoneSyncNeverReportsButTheEntriesAreInTheFile) {
  {
    Generation g(options({.sync = JournalSync::none}));
    (void)g.fail("a");
    (void)g.fail("b");
  }
  EXPECT_TRUE(durable.empty());
  EXPECT_EQ(live_ids().size(), 2u);
}

TEST_F(JournalTest, IntervalSyncReportsFromItsThread) {
  std::atomic<int> reported{0};
  JournalOptions j{.sync = JournalSync::interval, .sync_interval = 1ms};
  QueueOptions o = options(j);
  o.dlq.journal.on_durable = [&](JobId) { reported.fetch_add(1); };
  Generation g(o);
  (void)g.fail("a");
  // A deadline, not a sleep, decides: the report must come well within it.
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (reported.load() == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms);
  EXPECT_EQ(reported.load(), 1);
}

// sync_interval at its edges (issue 10): 0 is refused; 1 ns syncs at once; an interval past the
// clock's range never syncs on its own. It did: wait_for(max) overflowed into the past and the
// interval thread synced in a tight loop, reporting the entry within microseconds. The absence
// is checked for 200 ms, three orders of magnitude past that.
TEST_F(JournalTest, SyncIntervalAtItsEdgesSyncsAtOnceOrNeverOnItsOwn) {
  for (const Duration d : {0ns, 1ns, Duration::max() - 1ns, Duration::max()}) {
    std::atomic<int> reported{0};
    QueueOptions o = options(JournalOptions{.sync = JournalSync::interval, .sync_interval = d});
    o.dlq.journal.on_durable = [&](JobId) { reported.fetch_add(1); };
    if (d == 0ns) {
      EXPECT_THROW({ Generation g(o); }, Error);
      continue;
    }
    Generation g(o);
    (void)g.fail("a");
    const auto deadline = std::chrono::steady_clock::now() + (d == 1ns ? Duration(10s) : 200ms);
    while (reported.load() == 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(1ms);
    EXPECT_EQ(reported.load() > 0, d == 1ns) << d.count() << " ns";
  }
}

TEST_F(JournalTest, CompactionKeepsLiveEntriesAndDropsDeadBytes) {
  JournalOptions j{.grow_chunk = 4096, .compact_min_dead_bytes = 2048, .compact_dead_ratio = 0.5};
  std::vector<JobId> kept;
  {
    Generation g(options(j));
    for (int i = 0; i < 60; ++i) {
      JobId id = g.fail(std::string(100, static_cast<char>('a' + i % 26)));
      if (i % 4 == 0)
        kept.push_back(id);
      else
        ASSERT_TRUE(g.q.dlq().remove(id));
    }
  }
  JournalScan scan = read_journal(path);
  EXPECT_TRUE(scan.healthy());
  std::vector<JobId> ids;
  for (const auto& e : scan.live)
    ids.push_back(e.id);
  EXPECT_EQ(ids, kept);
  // 60 records of one size were written; compaction left about the 15 live ones and keeps the
  // dead bytes under the threshold.
  const std::uint64_t record = scan.live[0].record_bytes;
  EXPECT_LT(scan.used_bytes, 60 * record / 2);
  EXPECT_LE(scan.dead_bytes, std::max<std::uint64_t>(2048, scan.used_bytes / 2) + record);
  Generation g(options(j));
  EXPECT_EQ(g.q.dlq().size(), kept.size());
}

TEST_F(JournalTest, UnderSyncNoneOnDurableIsNeverCalledNotEvenByACompaction) {
  // A compaction fdatasyncs its new file, but JournalSync::none promises no on_durable at all
  // (and so keeps no list of entries waiting for one).
  JournalOptions j{.sync = JournalSync::none,
                   .grow_chunk = 4096,
                   .compact_min_dead_bytes = 2048,
                   .compact_dead_ratio = 0.5};
  {
    Generation g(options(j));
    for (int i = 0; i < 60; ++i) {
      const JobId id = g.fail(std::string(100, 'x'));
      if (i % 4 != 0) {
        ASSERT_TRUE(g.q.dlq().remove(id));
      }
    }
  }
  EXPECT_LT(read_journal(path).used_bytes, 60 * 200) << "compactions ran";
  EXPECT_TRUE(durable.empty()) << durable.size() << " on_durable calls";
}

TEST_F(JournalTest, ASecondOpenerGetsAnErrorAndTheFileStaysIntact) {
  std::vector<StoredDeadLetter> restored;
  JournalOptions j{.path = path};
  detail::DlqJournal first(j, "orders", "std::string", restored);
  try {
    detail::DlqJournal second(j, "orders", "std::string", restored);
    FAIL() << "a second opener was let in";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::journal);
    EXPECT_NE(std::string(e.what()).find("locked by another"), std::string::npos) << e.what();
  }
}

TEST_F(JournalTest, AFileThatIsNotAJournalIsRefusedAndLeftUnmodified) {
  const std::string text = "id,name\n1,not a journal at all, just a csv file\n";
  write_file(path, text);
  std::vector<StoredDeadLetter> restored;
  try {
    detail::DlqJournal j(JournalOptions{.path = path}, "orders", "std::string", restored);
    FAIL() << "a csv file was opened as a journal";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::journal);
    EXPECT_NE(std::string(e.what()).find("magic"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("not modified"), std::string::npos) << e.what();
  }
  EXPECT_EQ(read_file(path), text);
}

TEST_F(JournalTest, ANewerFormatVersionIsRefusedAndLeftUnmodified) {
  const std::string h = header_of_version(detail::journal::kVersion + 1);
  write_file(path, h);
  std::vector<StoredDeadLetter> restored;
  try {
    detail::DlqJournal j(JournalOptions{.path = path}, "orders", "std::string", restored);
    FAIL() << "a file of a newer version was opened";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("newer"), std::string::npos) << e.what();
  }
  EXPECT_EQ(read_file(path), h);
}

TEST_F(JournalTest, AnotherQueuesJournalOrAnotherCodecIsRefused) {
  { Generation g(options()); }
  std::vector<StoredDeadLetter> restored;
  EXPECT_THROW(
      detail::DlqJournal(JournalOptions{.path = path}, "payments", "std::string", restored), Error);
  EXPECT_THROW(detail::DlqJournal(JournalOptions{.path = path}, "orders", "bytes", restored),
               Error);
}

TEST_F(JournalTest, ATornTailIsTruncatedReportedAndAppendsResume) {
  std::vector<JobId> ids;
  {
    Generation g(options());
    for (int i = 0; i < 3; ++i)
      ids.push_back(g.fail("entry-" + std::to_string(i)));
  }
  JournalScan scan = read_journal(path);
  ASSERT_EQ(scan.live.size(), 3u);
  // A crash halfway through copying the last record: its second half never reached the file.
  std::string bytes = read_file(path);
  const std::uint64_t last = scan.live[2].offset;
  const std::uint64_t half = last + scan.live[2].record_bytes / 2;
  std::fill(bytes.begin() + static_cast<long>(half), bytes.end(), '\0');
  write_file(path, bytes);
  EXPECT_FALSE(read_journal(path).healthy());
  {
    Generation g(options());
    ASSERT_EQ(problems.size(), 1u);
    EXPECT_EQ(problems[0].kind, JournalProblem::Kind::torn_tail);
    EXPECT_EQ(problems[0].offset, last);
    EXPECT_EQ(g.q.dlq().size(), 2u);
    ids[2] = g.fail("after-recovery");
  }
  scan = read_journal(path);
  EXPECT_TRUE(scan.healthy());
  ASSERT_EQ(scan.live.size(), 3u);
  EXPECT_EQ(scan.live[2].payload, "after-recovery");
}

TEST_F(JournalTest, MidFileDamageIsRefusedWithItsOffsetByDefault) {
  {
    Generation g(options());
    for (int i = 0; i < 3; ++i)
      (void)g.fail("entry-" + std::to_string(i));
  }
  JournalScan scan = read_journal(path);
  std::string bytes = read_file(path);
  const std::uint64_t first = scan.live[0].offset;
  bytes[first + 40] ^= 0x10;  // one bit in the first record's body
  write_file(path, bytes);
  try {
    open_journal();
    FAIL() << "a damaged journal was opened under JournalOnCorruption::refuse";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::journal);
    EXPECT_NE(std::string(e.what()).find("offset " + std::to_string(first)), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("CRC32C"), std::string::npos) << e.what();
  }
  EXPECT_EQ(read_file(path), bytes);
}

TEST_F(JournalTest, MidFileDamageIsSkippedAndReportedWhenTheOptionSaysSo) {
  {
    Generation g(options());
    for (int i = 0; i < 3; ++i)
      (void)g.fail("entry-" + std::to_string(i));
  }
  JournalScan scan = read_journal(path);
  std::string bytes = read_file(path);
  const std::uint64_t second = scan.live[1].offset;
  bytes[second + 20] ^= 0x01;
  write_file(path, bytes);
  Generation g(options({.on_corruption = JournalOnCorruption::skip_and_report}));
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].kind, JournalProblem::Kind::corrupt_record);
  EXPECT_EQ(problems[0].offset, second);
  auto list = g.q.dlq().list();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].data, "entry-0");
  EXPECT_EQ(list[1].data, "entry-2");
}

TEST_F(JournalTest, AJournalWritableByOthersIsRefusedWithItsMode) {
  { Generation g(options()); }
  ASSERT_EQ(::chmod(path.c_str(), 0666), 0);  // as a file planted in a shared directory
  const std::string before = read_file(path);
  try {
    open_journal();
    FAIL() << "a journal anyone can write was opened";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::journal);
    EXPECT_NE(std::string(e.what()).find("writable by every user (mode 0666)"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(read_file(path), before) << "nothing written to it";
  // An empty one too: it would be adopted and given this user's payloads.
  write_file(path, "");
  EXPECT_THROW(open_journal(), Error);
}

TEST_F(JournalTest, AJournalOwnedByAnotherUserIsRefusedWithItsOwner) {
  { Generation g(options()); }
  if (::geteuid() != 0) GTEST_SKIP() << "giving a file away takes root";
  ASSERT_EQ(::chown(path.c_str(), 65534, 65534), 0);  // nobody's
  try {
    open_journal();
    FAIL() << "another user's journal was opened";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("owned by uid 65534"), std::string::npos) << e.what();
  }
}

TEST_F(JournalTest, ADamagedTombstoneWithholdsTheEntriesBeforeItRatherThanResurrectThem) {
  JobId first, removed, third, after;
  {
    Generation g(options());
    first = g.fail("entry-1");
    removed = g.fail("entry-2");
    third = g.fail("entry-3");
    ASSERT_TRUE(g.q.dlq().remove(removed));  // its tombstone follows entry-3
    after = g.fail("entry-4");
  }
  const JournalScan scan = read_journal(path);
  ASSERT_EQ(scan.live.size(), 3u);
  const std::uint64_t tombstone = scan.live[1].offset + scan.live[1].record_bytes;
  std::string bytes = read_file(path);
  bytes[tombstone + 4] ^= 0x01;  // its CRC: which ids it removed is no longer known
  write_file(path, bytes);
  Generation g(options({.on_corruption = JournalOnCorruption::skip_and_report}));
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_EQ(problems[0].kind, JournalProblem::Kind::corrupt_record);
  EXPECT_EQ(problems[1].kind, JournalProblem::Kind::withheld);
  EXPECT_EQ(problems[1].offset, tombstone);
  const std::string ids =
      std::to_string(first) + ", " + std::to_string(removed) + ", " + std::to_string(third);
  EXPECT_NE(problems[1].message.find("ids " + ids), std::string::npos) << problems[1].message;
  auto list = g.q.dlq().list();
  ASSERT_EQ(list.size(), 1u) << "the removed entry is not back, nor any it may have removed";
  EXPECT_EQ(list[0].id, after);
  EXPECT_EQ(read_journal(path).withheld.size(), 3u);
}

TEST_F(JournalTest, ASymbolicLinkAtThePathIsNotFollowed) {
  const std::string target = dir.file("elsewhere");
  write_file(target, "precious");
  ASSERT_EQ(::symlink(target.c_str(), path.c_str()), 0);
  try {
    open_journal();
    FAIL() << "the symlink was followed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("symbolic link"), std::string::npos) << e.what();
  }
  EXPECT_EQ(read_file(target), "precious");
}

TEST_F(JournalTest, ANewFileIsCreatedReadableByItsOwnerOnly) {
  { Generation g(options()); }
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

struct NoCodec {
  std::string text;
};

TEST_F(JournalTest, APayloadTypeWithoutACodecIsRefusedAtDeclarationNamingTheType) {
  static_assert(!JournalCodable<NoCodec>);
  static_assert(JournalCodable<std::string> && JournalCodable<std::vector<std::byte>> &&
                JournalCodable<int>);
  ManualClock clock;
  Engine engine{EngineOptions{.clock = &clock, .mode = Mode::inlined}};
  try {
    (void)engine.declare_queue<NoCodec>("orders", options());
    FAIL() << "declared";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_option);
    EXPECT_NE(std::string(e.what()).find("NoCodec"), std::string::npos) << e.what();
  }
}

// declare_journaled_queue, the compile-time opt-in: a payload type without a codec does not
// compile (the compile_fail ctest checks the diagnostic names the type); the concept below pins
// the constraint from inside the suite, and the tests the run-time side.
template <class T>
concept DeclarableWithDlqJournal = requires(Engine& engine, QueueOptions options) {
  engine.declare_journaled_queue<T>("orders", options);
};
static_assert(DeclarableWithDlqJournal<std::string> && DeclarableWithDlqJournal<Fragile>);
static_assert(!DeclarableWithDlqJournal<NoCodec>);

TEST_F(JournalTest, QueueWithDlqJournalRestoresAUserTypesEntryInTheNextEngine) {
  JobId id;
  {
    ManualClock clock;
    Engine engine{EngineOptions{.clock = &clock, .mode = Mode::inlined}};
    auto q = engine.declare_journaled_queue<Fragile>("orders", options());
    q.process({}, [](Job<Fragile>&) { return Outcome::fail("card declined"); });
    id = q.add("charge-card", Fragile{"order-3"}).id;
    engine.run_until_idle();
    ASSERT_EQ(q.dlq().size(), 1u);
  }
  EXPECT_EQ(read_journal(path).header.codec, "test.fragile");
  ManualClock clock;
  Engine engine{EngineOptions{.clock = &clock, .mode = Mode::inlined}};
  auto q = engine.declare_journaled_queue<Fragile>("orders", options());
  auto list = q.dlq().list();
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].id, id);
  EXPECT_EQ(list[0].name, "charge-card");
  EXPECT_EQ(list[0].data.text, "order-3");
  ASSERT_EQ(list[0].errors.size(), 1u);
  EXPECT_EQ(list[0].errors[0].message, "card declined");
  EXPECT_TRUE(problems.empty());
}

TEST_F(JournalTest, QueueWithDlqJournalRefusesOptionsWithoutAJournalPathNamingTheQueue) {
  ManualClock clock;
  Engine engine{EngineOptions{.clock = &clock, .mode = Mode::inlined}};
  try {
    (void)engine.declare_journaled_queue<std::string>("orders", QueueOptions{});
    FAIL() << "declared a queue with a DLQ journal but no journal path";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_option);
    EXPECT_NE(std::string(e.what()).find("QueueOptions('orders').dlq.journal.path is empty"),
              std::string::npos)
        << e.what();
  }
  // The refusal declared nothing: the name is still free.
  EXPECT_NO_THROW((void)engine.declare_queue<std::string>("orders", QueueOptions{}));
}

TEST_F(JournalTest, AQueueWithoutAJournalCreatesNoFile) {
  ManualClock clock;
  Engine engine{EngineOptions{.clock = &clock, .mode = Mode::inlined}};
  auto q = engine.declare_queue<NoCodec>("orders", {});
  q.process({}, [](Job<NoCodec>&) { return Outcome::fail("no"); });
  (void)q.add("x", NoCodec{"y"});
  engine.run_until_idle();
  EXPECT_EQ(q.dlq().size(), 1u);
  EXPECT_EQ(q.dlq().journal_failure(), "");
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST_F(JournalTest, TriviallyCopyableAndBytePayloadsRoundTrip) {
  struct Point {
    int x, y;
  };
  {
    ManualClock clock;
    Engine engine{EngineOptions{.clock = &clock, .mode = Mode::inlined}};
    auto q = engine.declare_queue<Point>("points", options());
    q.process({}, [](Job<Point>&) { return Outcome::fail("no"); });
    (void)q.add("p", Point{3, -4});
    engine.run_until_idle();
    auto b = engine.declare_queue<std::vector<std::byte>>("bytes", options({.path = path + ".b"}));
    b.process({}, [](Job<std::vector<std::byte>>&) { return Outcome::fail("no"); });
    (void)b.add("b", std::vector<std::byte>{std::byte{0}, std::byte{0xFF}});
    engine.run_until_idle();
  }
  ManualClock clock;
  Engine engine{EngineOptions{.clock = &clock, .mode = Mode::inlined}};
  auto q = engine.declare_queue<Point>("points", options());
  ASSERT_EQ(q.dlq().size(), 1u);
  EXPECT_EQ(q.dlq().list()[0].data.x, 3);
  EXPECT_EQ(q.dlq().list()[0].data.y, -4);
  auto b = engine.declare_queue<std::vector<std::byte>>("bytes", options({.path = path + ".b"}));
  ASSERT_EQ(b.dlq().size(), 1u);
  EXPECT_EQ(b.dlq().list()[0].data, (std::vector<std::byte>{std::byte{0}, std::byte{0xFF}}));
}

// --- the reader against damage: never a crash, always a verdict -------------------------------

std::string sample_image() {
  std::string img = detail::journal::encode_header("orders", "std::string", 1);
  for (JobId id = 1; id <= 6; ++id) {
    StoredDeadLetter e;
    e.id = id;
    e.name = "charge-card";
    e.payload = std::string(id * 7, 'p');
    e.reason = DeadLetterReason::attempts_exhausted;
    e.failed_attempts = 3;
    e.max_attempts = 3;
    for (std::uint32_t a = 1; a <= 3; ++a)
      e.errors.push_back({a, a * 1000, "card declined"});
    img += detail::journal::encode_entry(e);
    if (id % 3 == 0) {
      JobId dead = id - 1;
      img += detail::journal::encode_tombstone(TombstoneCause::redriven, {&dead, 1});
    }
  }
  return img;
}

// Scans `img`; returns false if the scan threw anything but rail::Error(journal).
bool verdict(const std::string& img) {
  try {
    JournalScan s = scan_journal(as_bytes(img));
    if (s.used_bytes > img.size()) return false;
    for (const auto& e : s.live)
      if (e.offset + e.record_bytes > img.size()) return false;
    for (const auto& p : s.problems)
      if (p.message.empty() || p.offset > img.size()) return false;
    return s.live.size() <= 6;
  } catch (const Error& e) {
    return e.code() == ErrorCode::journal && std::strlen(e.what()) > 0;
  } catch (...) {
    return false;
  }
}

TEST(JournalReader, TheSampleImageIsHealthy) {
  JournalScan s = scan_journal(as_bytes(sample_image()));
  EXPECT_TRUE(s.healthy());
  EXPECT_EQ(s.live.size(), 4u);
  EXPECT_EQ(s.tombstone_records, 2u);
}

TEST(JournalReader, BitFlipsTruncationsZeroRegionsAndHugeLengthsAlwaysGetAVerdict) {
  const std::string base = sample_image();
  std::mt19937_64 rng(12);
  int damaged = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    std::string img = base;
    switch (trial % 4) {
      case 0:  // bit flips
        for (int k = 0; k < 1 + trial % 3; ++k)
          img[rng() % img.size()] ^= char(1 << (rng() % 8));
        break;
      case 1:  // truncation
        img.resize(rng() % img.size());
        break;
      case 2: {  // a zero-filled region
        std::size_t at = rng() % img.size(), n = 1 + rng() % 64;
        std::fill(img.begin() + long(at), img.begin() + long(std::min(img.size(), at + n)), '\0');
        break;
      }
      case 3: {  // a huge or off-by-some length field at a record boundary
        std::size_t at = 48 + 8 * (rng() % ((img.size() - 56) / 8)) + 8;
        std::uint32_t len = (rng() % 2) ? 0xFFFFFFF0u : std::uint32_t(rng() % 4096);
        std::memcpy(img.data() + at, &len, 4);
        break;
      }
    }
    ASSERT_TRUE(verdict(img)) << "trial " << trial;
    try {
      if (!scan_journal(as_bytes(img)).healthy()) ++damaged;
    } catch (const Error&) {
      ++damaged;
    }
  }
  EXPECT_GT(damaged, 2000);  // the sweep did damage something most of the time
}

// An entry whose payload holds an intact record (a planted entry and a purge tombstone) at each
// of the 8 alignments, so one of them sits at a multiple of 8 in the file.
std::string entry_with_planted_records(JobId id) {
  StoredDeadLetter fake;
  fake.id = 4242;
  fake.name = "planted";
  const std::string rec = detail::journal::encode_entry(fake) +
                          detail::journal::encode_tombstone(TombstoneCause::purged, {});
  StoredDeadLetter e;
  e.id = id;
  e.name = "carrier";
  for (std::size_t k = 0; k < 8; ++k)
    e.payload += std::string(k, 'x') + rec + std::string(8 - k, 'x');
  return detail::journal::encode_entry(e);
}

TEST(JournalReader, AnUnfinishedAppendWhosePayloadHoldsRecordsIsATornTailNeverThoseRecords) {
  const std::string base = sample_image();
  const std::string carrier = entry_with_planted_records(99);
  // Every moment of the writer's order: the length word, then the body (any prefix of it, or
  // any stores of one memcpy), never the commit word.
  for (std::size_t written = 16; written <= carrier.size(); written += 8) {
    std::string img = base;
    std::string torn(carrier.size(), '\0');
    std::memcpy(torn.data() + 8, carrier.data() + 8, 8);  // length and type
    std::memcpy(torn.data() + 16, carrier.data() + 16, written - 16);
    img += torn + std::string(4096, '\0');
    const JournalScan s = scan_journal(as_bytes(img));
    ASSERT_EQ(s.problems.size(), 1u) << "written " << written;
    EXPECT_EQ(s.problems[0].kind, JournalProblem::Kind::torn_tail) << s.problems[0].message;
    EXPECT_EQ(s.problems[0].offset, base.size());
    EXPECT_EQ(s.used_bytes, base.size());
    ASSERT_EQ(s.live.size(), 4u) << "no entry planted, none purged";
    for (const auto& e : s.live)
      EXPECT_NE(e.id, 4242u);
  }
}

TEST(JournalReader, ADamagedRecordWhosePayloadHoldsRecordsIsSteppedOverWhole) {
  std::string img = sample_image();
  const std::uint64_t at = img.size();
  img += entry_with_planted_records(99);
  StoredDeadLetter after;
  after.id = 100;
  img += detail::journal::encode_entry(after);
  img[at + 4] ^= 0x01;  // the carrier's CRC: its body is intact, its extent claimed
  const JournalScan s = scan_journal(as_bytes(img));
  ASSERT_EQ(s.problems.size(), 1u);
  EXPECT_EQ(s.problems[0].kind, JournalProblem::Kind::corrupt_record);
  EXPECT_EQ(s.problems[0].offset, at);
  std::set<JobId> ids;
  for (const auto& e : s.live)
    ids.insert(e.id);
  EXPECT_EQ(ids, (std::set<JobId>{1, 3, 4, 6, 100})) << "the record after it, nothing inside it";
}

TEST(JournalReader, RecoveryIsLinearInTheFileSizeWhateverTheDamage) {
  // Crafted against the search: every 16 bytes a header with the magic, a known type, a length
  // that claims the rest of the file and a wrong CRC, after 16 bytes of junk that start a search:
  // a search that checksummed each one and moved on by 8 bytes would checksum the file once per
  // header (quadratic).
  for (const std::size_t kib : {16u, 128u, 1024u}) {
    std::string img = detail::journal::encode_header("q", "c", 0);
    const std::size_t start = img.size();
    const std::size_t n = kib * 1024 / 16;
    img.resize(start + n * 16, '\0');
    std::memset(img.data() + start, 'j', 16);  // junk first: its extent is unknown, so a search
    for (std::size_t i = 1; i < n; ++i) {      // magic, bad CRC, a length to the end, type 1
      const std::size_t at = start + i * 16;
      const std::uint32_t magic = detail::journal::kRecordMagic, crc = 1;
      const auto len = static_cast<std::uint32_t>(img.size() - at - 16);
      std::memcpy(img.data() + at, &magic, 4);
      std::memcpy(img.data() + at + 4, &crc, 4);
      std::memcpy(img.data() + at + 8, &len, 4);
      img[at + 12] = 1;
    }
    const JournalScan s = scan_journal(as_bytes(img));
    EXPECT_FALSE(s.healthy());
    EXPECT_LE(s.bytes_checked, 2 * img.size()) << kib << " KiB";
  }
}

TEST(JournalReader, WrongMagicIsNamedInTheError) {
  std::string img = sample_image();
  img[0] = 'X';
  try {
    (void)scan_journal(as_bytes(img));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("magic"), std::string::npos);
  }
}

TEST(JournalReader, AHugeErrorCountIsRejectedBeforeAnyAllocation) {
  std::string img = detail::journal::encode_header("q", "c", 0);
  StoredDeadLetter e;
  e.id = 1;
  std::string rec = detail::journal::encode_entry(e);
  // Error count sits after id(8) reason(1) attempts(4+4) times(3*8) name(4+0): body offset 45.
  std::uint32_t huge = 0xFFFFFFFFu;
  std::memcpy(rec.data() + 16 + 45, &huge, 4);
  // Recompute the frame's CRC over [8, 16 + L): the damage is a lie, not a checksum failure.
  std::uint32_t len;
  std::memcpy(&len, rec.data() + 8, 4);
  std::uint32_t crc = detail::journal::crc32c(as_bytes(rec.substr(8, 8 + len)));
  std::memcpy(rec.data() + 4, &crc, 4);
  img += rec;
  JournalScan s = scan_journal(as_bytes(img));
  ASSERT_EQ(s.problems.size(), 1u);
  EXPECT_EQ(s.problems[0].kind, JournalProblem::Kind::undecodable);
  EXPECT_TRUE(s.live.empty());
}

TEST_F(JournalTest, ACodecThatThrowsKeepsTheEntryInMemoryAndReportsIt) {
  ManualClock clock;
  Engine engine{EngineOptions{.clock = &clock, .mode = Mode::inlined}};
  auto q = engine.declare_queue<Fragile>("orders", options());
  q.process({}, [](Job<Fragile>&) { return Outcome::fail("declined"); });
  const JobId bad = q.add("charge-card", Fragile{"unencodable"}).id;
  const JobId good = q.add("charge-card", Fragile{"order-1"}).id;
  engine.run_until_idle();  // both dead-letter; the first one's codec throws on the worker
  EXPECT_EQ(q.counts().dead_lettered, 2u);
  ASSERT_TRUE(q.dlq().get(bad).has_value()) << "the entry stays in the in-memory DLQ";
  EXPECT_TRUE(q.dlq().get(good).has_value());
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].kind, JournalProblem::Kind::unencodable);
  EXPECT_NE(problems[0].message.find("entry " + std::to_string(bad)), std::string::npos);
  EXPECT_NE(problems[0].message.find("no bytes for this one"), std::string::npos);
  EXPECT_EQ(live_ids(), std::vector<JobId>{good}) << "only the encodable entry is in the file";
}

}  // namespace
}  // namespace rail
