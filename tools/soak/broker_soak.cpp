// The distributed soak: see broker_soak.hpp.
#include "soak/broker_soak.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "rail/amqp.hpp"
#include "rail/detail/amqp_connection.hpp"
#include "rail/detail/amqp_topology.hpp"
#include "rail/rail.hpp"

namespace rail::soak {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

enum class Plan { done, fail_once, fail_twice, always_fail, permanent, overrun_once };
Plan plan_of(std::uint32_t key) {
  return static_cast<Plan>(key % 6);
}
/// planned_attempt(p): the attempt a job of plan p completes on (0: it never completes).
std::uint32_t planned_attempt(Plan p) {
  switch (p) {
    case Plan::done:
    case Plan::overrun_once:
      return 1;
    case Plan::fail_once:
      return 2;
    case Plan::fail_twice:
      return 3;
    default:
      return 0;
  }
}
constexpr std::uint32_t kMaxAttempts = 3;
constexpr Duration kLease = 1s;
constexpr Duration kOverrun = 1500ms;

amqp::BrokerOptions broker_options(const BrokerSoakOptions& o) {
  return amqp::BrokerOptions{.url = o.url,
                             .heartbeat = std::chrono::seconds(10),
                             .confirm_timeout = std::chrono::seconds(30),
                             .name = "rail broker soak"};
}

/// Log: a worker's log, a line per write(2) to an O_APPEND file, so that a SIGKILL loses no line
/// written before it.
class Log {
 public:
  explicit Log(const std::string& path)
      : fd_(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)) {
    if (fd_ < 0) throw std::runtime_error("cannot open the worker log " + path);
  }
  ~Log() { ::close(fd_); }
  Log(const Log&) = delete;
  Log& operator=(const Log&) = delete;
  void line(std::string s) {
    s += '\n';
    if (::write(fd_, s.data(), s.size()) != static_cast<ssize_t>(s.size())) std::abort();
  }

 private:
  int fd_;
};

/// worker(o, path): a consumer process, until SIGTERM (a clean stop: the consumer settles what
/// ended, then the process exits 0). Log lines: "S key attempt deliveries stalls" as a handler
/// starts; "C key attempt", "F key next_attempt", "D key reason" as the job ends here.
[[noreturn]] void worker(const BrokerSoakOptions& o, const std::string& path) {
  // Blocked before any thread starts, so every thread inherits the mask and sigwait takes it.
  sigset_t term;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &term, nullptr);
  int status = 0;
  try {
    Log log(path);
    std::mutex mu;
    std::unordered_map<JobId, std::string> key_of;  // a running local job's key
    Engine engine;
    QueueOptions q;
    q.visibility_timeout = kLease;
    q.max_stalls = 1;
    auto local = engine.declare_queue<std::string>(o.queue, q);
    engine.on_event([&](const Event& e) {
      if (e.queue != o.queue) return;
      std::string tail;
      char tag = 0;
      switch (e.kind) {
        case EventKind::completed:
          tag = 'C';
          tail = std::to_string(e.attempt);
          break;
        case EventKind::forwarded:
          tag = 'F';
          tail = std::to_string(e.attempt);
          break;
        case EventKind::dead_lettered:
          tag = 'D';
          tail = std::string(to_string(e.reason));
          break;
        default:
          return;
      }
      std::string key;
      {
        const std::lock_guard lock(mu);
        const auto it = key_of.find(e.job_id);
        if (it == key_of.end()) return;
        key = std::move(it->second);
        key_of.erase(it);
      }
      log.line(std::string(1, tag) + " " + key + " " + tail);
    });
    local.process({.concurrency = o.concurrency}, [&](Job<std::string>& j) -> Outcome {
      {
        const std::lock_guard lock(mu);
        key_of[j.id()] = j.data();
      }
      log.line("S " + j.data() + " " + std::to_string(j.attempt()) + " " +
               std::to_string(j.deliveries()) + " " + std::to_string(j.stalls()));
      const std::string failure = "failed attempt " + std::to_string(j.attempt());
      switch (plan_of(static_cast<std::uint32_t>(std::stoul(j.data())))) {
        case Plan::fail_once:
          return j.attempt() < 2 ? Outcome::retry(failure) : Outcome::done();
        case Plan::fail_twice:
          return j.attempt() < 3 ? Outcome::retry(failure) : Outcome::done();
        case Plan::always_fail:
          return Outcome::retry(failure);
        case Plan::permanent:
          return Outcome::fail("refused for good");
        case Plan::overrun_once:
          if (j.stalls() == 0) std::this_thread::sleep_for(kOverrun);  // past its lease: fenced
          return Outcome::done();
        case Plan::done:
          break;
      }
      return Outcome::done();
    });
    amqp::Consumer<std::string> consumer(broker_options(o), engine, local, {}, {.prefetch = 8});
    int signal = 0;
    sigwait(&term, &signal);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "broker soak worker %d: %s\n", static_cast<int>(getpid()), e.what());
    status = 1;
  }
  std::fflush(stderr);
  _exit(status);
}

/// What the logs say of one job.
struct Fate {
  std::vector<std::uint32_t> completed;  // the attempt of each completion
  std::uint32_t starts = 0, forwards = 0, after_lapse = 0;
  bool started_in_killed = false;
};

struct Worker {
  pid_t pid = 0;
  std::string path;
  bool killed = false;
};

/// read_logs(workers, fates, bytes): every worker's lines into fates; bytes: the logs' total size.
void read_logs(const std::vector<Worker>& workers, std::map<std::uint32_t, Fate>& fates,
               std::size_t& bytes) {
  fates.clear();
  bytes = 0;
  for (const Worker& w : workers) {
    std::ifstream in(w.path);
    std::string line;
    while (std::getline(in, line)) {
      bytes += line.size() + 1;
      std::istringstream fields(line);
      char tag = 0;
      std::uint32_t key = 0, attempt = 0, deliveries = 0, stalls = 0;
      if (!(fields >> tag >> key)) continue;  // a line cut by the kill
      Fate& f = fates[key];
      if (tag == 'S') {
        ++f.starts;
        if (fields >> attempt >> deliveries >> stalls && stalls > 0) ++f.after_lapse;
        if (w.killed) f.started_in_killed = true;
      } else if (tag == 'C' && fields >> attempt) {
        f.completed.push_back(attempt);
      } else if (tag == 'F') {
        ++f.forwards;
      }
    }
  }
}

std::uint32_t queue_depth(const BrokerSoakOptions& o) {
  rail::detail::amqp::Connection c(rail::detail::amqp::parse_url(o.url), std::chrono::seconds(10),
                                   "rail broker soak reader");
  return c.queue_depth(rail::detail::amqp::jobs_queue(o.queue));
}

}  // namespace

BrokerSoakReport run_broker_soak(const BrokerSoakOptions& o, std::ostream* log) {
  BrokerSoakReport r;
  std::string dir = o.dir;
  if (dir.empty()) {
    char name[] = "/tmp/rail-broker-soak-XXXXXX";
    if (mkdtemp(name) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir = name;
  }
  const amqp::BrokerOptions broker = broker_options(o);
  amqp::Producer<std::string> producer(broker, o.queue);  // declares the queue
  amqp::DeadLetters dlq(broker, o.queue);
  if (const std::uint32_t waiting = queue_depth(o) + dlq.depth(); waiting != 0) {
    r.violations.push_back("broker queue '" + o.queue + "' holds " + std::to_string(waiting) +
                           " messages before the soak; expected it and its DLQ empty");
    return r;
  }
  std::vector<Worker> workers;
  const auto spawn = [&] {
    Worker w;
    w.path = dir + "/worker-" + std::to_string(workers.size()) + ".log";
    w.pid = fork();  // this process runs no other thread (see the header)
    if (w.pid < 0) throw std::runtime_error("fork failed");
    if (w.pid == 0) worker(o, w.path);
    workers.push_back(w);
  };
  for (std::uint32_t i = 0; i < o.workers; ++i)
    spawn();

  JobOptions jo;
  jo.max_attempts = kMaxAttempts;
  jo.backoff = Backoff::fixed(100ms);
  std::set<std::uint32_t> confirmed;
  for (std::uint32_t key = 0; key < o.jobs; ++key) {
    try {
      if (producer.add("task", std::to_string(key), jo).status == AddStatus::added)
        confirmed.insert(key);
    } catch (const Error& e) {  // not confirmed: it may run or not
      if (log) *log << "add " << key << ": " << e.what() << "\n";
    }
  }
  r.confirmed = confirmed.size();

  // Run until every confirmed job ended, killing one worker on the way, then until the logs
  // stand still for longer than a lease (a redelivery after the kill may still run).
  std::map<std::uint32_t, Fate> fates;
  std::size_t bytes = 0, last_bytes = 0;
  auto quiet_since = Clock::now();
  bool ended = false;
  std::uint64_t polls = 0;
  const auto deadline = Clock::now() + o.deadline;
  for (;;) {
    std::this_thread::sleep_for(200ms);
    read_logs(workers, fates, bytes);
    std::size_t completed = 0;
    for (const auto& [key, f] : fates)
      completed += confirmed.count(key) != 0 && !f.completed.empty() ? 1 : 0;
    if (o.kill_one && !workers[0].killed && completed * 3 >= confirmed.size()) {
      ::kill(workers[0].pid, SIGKILL);
      (void)waitpid(workers[0].pid, nullptr, 0);
      workers[0].killed = true;
      if (log)
        *log << "killed worker 0 (pid " << workers[0].pid << ") at " << completed
             << " completed; starting another\n";
      spawn();
    }
    if (!ended) ended = completed + dlq.depth() >= confirmed.size();
    if (bytes != last_bytes) {
      last_bytes = bytes;
      quiet_since = Clock::now();
    }
    if (ended && Clock::now() - quiet_since > 3s) break;
    if (Clock::now() > deadline) {
      r.violations.push_back("the jobs did not all end within " +
                             std::to_string(o.deadline.count()) + " s");
      break;
    }
    if (log && ++polls % 10 == 0)
      *log << "  " << completed << " completed, " << dlq.depth() << " dead-lettered\n";
  }
  for (Worker& w : workers) {
    if (w.killed) continue;
    ::kill(w.pid, SIGTERM);
    int status = 0;
    (void)waitpid(w.pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      r.violations.push_back("worker pid " + std::to_string(w.pid) + " did not stop cleanly");
  }
  read_logs(workers, fates, bytes);

  std::map<std::uint32_t, std::vector<amqp::BrokerDeadLetter>> dead;
  for (amqp::BrokerDeadLetter& e : dlq.list(o.jobs * 2 + 16))
    dead[static_cast<std::uint32_t>(std::stoul(e.body))].push_back(std::move(e));
  const auto bad = [&](std::uint32_t key, const std::string& what) {
    r.violations.push_back("job " + std::to_string(key) + ": " + what);
  };
  for (const std::uint32_t key : confirmed) {
    const Fate& f = fates[key];
    const auto& letters = dead[key];
    const Plan plan = plan_of(key);
    r.forwarded += f.forwards;
    r.lapses += f.after_lapse;
    if (f.started_in_killed) ++r.held_by_killed;
    if (f.completed.empty() && letters.empty()) bad(key, "never ended");
    if (!f.completed.empty() && !letters.empty()) bad(key, "completed and dead-lettered");
    const std::size_t ends = f.completed.size() + letters.size();
    if (ends > 1) {
      r.duplicates += ends - 1;
      if (!f.started_in_killed)
        bad(key, "ended " + std::to_string(ends) + " times without a fault");
    }
    if (!f.completed.empty()) ++r.completed;
    if (!letters.empty()) ++r.dead_lettered;
    for (const std::uint32_t attempt : f.completed)
      if (attempt != planned_attempt(plan))
        bad(key, "completed on attempt " + std::to_string(attempt) + "; planned " +
                     std::to_string(planned_attempt(plan)));
    if (plan == Plan::overrun_once && !f.completed.empty() && f.after_lapse == 0)
      bad(key, "completed without the lapse of its overrun being counted");
    for (const amqp::BrokerDeadLetter& e : letters) {
      const bool exhausted = plan == Plan::always_fail && e.reason == "attempts_exhausted" &&
                             e.failed_attempts == kMaxAttempts && e.errors.size() == kMaxAttempts;
      const bool permanent = plan == Plan::permanent && e.reason == "permanent_failure" &&
                             e.failed_attempts == 1 && e.errors.size() == 1;
      if (!exhausted && !permanent)
        bad(key, "dead-lettered " + e.reason + " after " + std::to_string(e.failed_attempts) +
                     " attempts with " + std::to_string(e.errors.size()) + " errors");
    }
  }
  if (const std::uint32_t left = queue_depth(o); left != 0)
    r.violations.push_back(std::to_string(left) + " messages were left in the broker queue");
  return r;
}

void print(const BrokerSoakReport& r, std::ostream& out) {
  out << "broker soak: " << r.confirmed << " confirmed adds; " << r.completed << " completed, "
      << r.dead_lettered << " dead-lettered on the broker; " << r.forwarded
      << " retries and lapses handed back to the broker (" << r.lapses
      << " deliveries after a lapse); the killed worker had started " << r.held_by_killed
      << " jobs, " << r.duplicates << " ran again to an end\n";
  for (const std::string& v : r.violations)
    out << "VIOLATION: " << v << "\n";
}

}  // namespace rail::soak
