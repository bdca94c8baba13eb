// Job names past the engine's interned table: no fixed limit, nothing kept after the job.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "rail/detail/name_table.hpp"
#include "rail/rail.hpp"
#include "support/inline_engine.hpp"

namespace rail {
namespace {

using namespace std::chrono_literals;
using detail::NameTable;

constexpr std::size_t kBeyond = NameTable::kMaxNames + 300;

std::string name_of(std::size_t i) {
  return "order-" + std::to_string(i);
}

/// Names: records every event's job name as a string (the view dies after the call).
struct Names : test::InlineEngine {
  std::map<std::pair<EventKind, JobId>, std::string> names;
  void SetUp() override {
    test::InlineEngine::SetUp();
    engine.on_event([this](const Event& e) {
      names[{e.kind, e.job_id}] = std::string(e.job_name);
    });
  }
};

TEST(NameTableTest, AnswersOwnNameOnceFullAndKeepsEveryInternedIndex) {
  NameTable table;
  std::vector<std::uint16_t> first;
  for (std::size_t i = 0; i < NameTable::kMaxNames; ++i)
    first.push_back(table.intern(name_of(i)));
  EXPECT_EQ(table.intern(name_of(NameTable::kMaxNames)), NameTable::kOwnName);
  EXPECT_EQ(table.intern("never-seen"), NameTable::kOwnName);
  for (std::size_t i = 0; i < NameTable::kMaxNames; i += 97) {
    EXPECT_EQ(table.intern(name_of(i)), first[i]) << "an interned name keeps its index";
    EXPECT_EQ(table.name(first[i]), name_of(i));
  }
}

// Each thread remembers its last answer: it must answer for its own table and text only, also
// for a table built where a destroyed one lived, and for a buffer the caller rewrote.
TEST(NameTableTest, AThreadsLastNameAnswersOnlyForItsOwnTableAndText) {
  std::optional<NameTable> a(std::in_place);
  (void)a->intern("filler");
  const std::uint16_t in_a = a->intern("charge");
  NameTable b;
  EXPECT_NE(b.intern("charge"), in_a) << "b's first name is its index 0, a's 'charge' is 1";
  EXPECT_EQ(a->intern("charge"), in_a);
  std::string buffer = "charge";
  EXPECT_EQ(a->intern(buffer), in_a);
  buffer = "refund";  // the same storage, other text
  const std::uint16_t refund = a->intern(buffer);
  EXPECT_NE(refund, in_a);
  EXPECT_EQ(a->name(refund), "refund");
  a.reset();
  a.emplace();  // the same storage, a fresh table
  EXPECT_EQ(a->intern("refund"), 0u) << "a fresh table's first name";
  EXPECT_EQ(a->intern("charge"), 1u);
  std::thread other([&] { EXPECT_EQ(a->intern("charge"), 1u); });
  other.join();
  EXPECT_EQ(a->intern("refund"), 0u);
}

TEST_F(Names, JobsWithMoreDistinctNamesThanTheTableRunUnderTheirOwnNames) {
  auto q = engine.declare_queue<std::size_t>("orders", QueueOptions{.capacity = kBeyond});
  std::vector<JobId> ids;
  for (std::size_t i = 0; i < kBeyond; ++i) {
    auto r = q.add(name_of(i), std::size_t{i});
    ASSERT_EQ(r.status, AddStatus::added) << "add number " << i << " refused";
    ids.push_back(r.id);
  }
  std::size_t mismatched = 0;
  q.process({}, [&](Job<std::size_t>& j) {
    if (j.name() != name_of(j.data())) ++mismatched;
  });
  engine.run_until_idle();
  EXPECT_EQ(mismatched, 0u);
  EXPECT_EQ(q.counts().completed, kBeyond);
  for (std::size_t i = 0; i < kBeyond; i += 211) {
    EXPECT_EQ((names[{EventKind::added, ids[i]}]), name_of(i));
    EXPECT_EQ((names[{EventKind::completed, ids[i]}]), name_of(i));
  }
  EXPECT_EQ((names[{EventKind::completed, ids.back()}]), name_of(kBeyond - 1));
}

TEST_F(Names, AnOwnNameSurvivesARetryOnTheWheelTheDlqAndARedrive) {
  auto q = engine.declare_queue<int>("q", QueueOptions{.capacity = 16});
  auto filler = engine.declare_queue<int>("filler", QueueOptions{.capacity = NameTable::kMaxNames});
  for (std::size_t i = 0; i < NameTable::kMaxNames; ++i)
    (void)filler.add(name_of(i), 0);  // fills the table with names this test never reads
  bool fail = true;
  q.process({}, [&](Job<int>&) { return fail ? Outcome::retry("down") : Outcome::done(); });
  JobOptions o;
  o.max_attempts = 2;
  o.backoff = Backoff::fixed(1s);
  const JobId id = q.add("charge-card:order-77", 7, o).id;
  replay();  // fails, retries from the wheel (its retry_due event is deferred), fails again
  EXPECT_EQ((names[{EventKind::retry_due, id}]), "charge-card:order-77");
  EXPECT_EQ((names[{EventKind::dead_lettered, id}]), "charge-card:order-77");
  // Slots get reused meanwhile: the DLQ entry owns its copy.
  for (int i = 0; i < 40; ++i)
    (void)q.add("other-" + std::to_string(i), i);
  fail = false;
  engine.run_until_idle();
  auto entry = q.dlq().get(id);
  ASSERT_TRUE(entry.has_value());
  EXPECT_EQ(entry->name, "charge-card:order-77");
  EXPECT_EQ(q.dlq().redrive(id), RedriveStatus::redriven);
  engine.run_until_idle();
  EXPECT_EQ((names[{EventKind::completed, id}]), "charge-card:order-77");
}

}  // namespace
}  // namespace rail
