// DlqJournal's file handling; the contract is in include/rail/detail/dlq_journal.hpp.
//
// Syncing: the records live in a MAP_SHARED mapping, so they are the file's page-cache pages.
// On Linux fdatasync(fd) writes back every dirty page of the file however it was dirtied (msync
// with MS_SYNC does the same for a range), which lets a sync use the descriptor alone and never
// race a remap of the mapping.
#include "rail/detail/dlq_journal.hpp"

#include <cxxabi.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "rail/detail/deadline.hpp"
#include "rail/detail/journal_format.hpp"
#include "rail/error.hpp"

namespace rail::detail {
namespace {

std::string errno_text(int err) {
  return std::strerror(err);
}

[[noreturn]] void fail_open(const std::string& path, const std::string& what) {
  throw Error(ErrorCode::journal, "journal '" + path + "': " + what);
}

std::int64_t unix_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string directory_of(const std::string& path) {
  auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// fsync of the directory makes a create or a rename in it survive a power loss.
void sync_directory(const std::string& path) {
  int dfd = ::open(directory_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return;
  ::fsync(dfd);
  ::close(dfd);
}

bool write_all(int fd, const void* data, std::size_t n, std::uint64_t at) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(at));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<std::size_t>(w);
    at += static_cast<std::uint64_t>(w);
  }
  return true;
}

std::uint64_t round_up(std::uint64_t n, std::uint64_t chunk) {
  return (n + chunk - 1) / chunk * chunk;
}

}  // namespace

std::string type_name(const std::type_info& type) {
  int status = 0;
  char* name = abi::__cxa_demangle(type.name(), nullptr, nullptr, &status);
  std::string out = status == 0 && name ? name : type.name();
  std::free(name);
  return out;
}

struct DlqJournal::Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  int release() { return std::exchange(fd, -1); }
};

DlqJournal::DlqJournal(JournalOptions options, std::string_view queue, std::string codec,
                       std::vector<StoredDeadLetter>& restored)
    : options_(std::move(options)), queue_(queue), codec_(std::move(codec)) {
  try {
    open(restored);
  } catch (...) {
    // No destructor runs for a constructor that throws: give back what open() took.
    if (map_) ::munmap(map_, map_size_);
    if (fd_ >= 0) ::close(fd_);
    throw;
  }
  if (options_.sync == JournalSync::interval)
    interval_thread_ = std::thread([this] { interval_loop(); });
}

void DlqJournal::open(std::vector<StoredDeadLetter>& restored) {
  const std::string& path = options_.path;
  if (queue_.size() > 2000 || codec_.size() > 2000)
    fail_open(path, "queue name or codec name longer than 2000 bytes; expected shorter names");

  // A compaction killed before its rename leaves its temporary; it holds nothing the journal
  // lacks. Removed only once we hold the journal's lock (below), never while another owns it.
  Fd f;
  bool created = false;
  for (int tries = 0;; ++tries) {
    f.fd = ::open(path.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (f.fd < 0 && errno == ENOENT) {
      f.fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                    static_cast<mode_t>(options_.file_mode));
      created = f.fd >= 0;
      if (f.fd < 0 && errno == EEXIST && tries < 3) continue;  // another creator won: open it
    }
    if (f.fd < 0) {
      int err = errno;
      fail_open(path,
                "cannot open: " + errno_text(err) +
                    (err == ELOOP ? " (the path is a symbolic link; rail never follows one)" : ""));
    }
    if (::flock(f.fd, LOCK_EX | LOCK_NB) != 0) {
      int err = errno;
      fail_open(path, err == EWOULDBLOCK
                          ? std::string("locked by another engine or process (flock); a journal "
                                        "belongs to one queue of one engine at a time")
                          : "cannot lock: " + errno_text(err));
    }
    // A compaction elsewhere may have renamed a new file over the path between our open and our
    // lock: then we locked a file nobody will read again. Retry on the path's current file.
    struct stat ours {
    }, now{};
    if (::fstat(f.fd, &ours) != 0) fail_open(path, "cannot stat: " + errno_text(errno));
    if (!S_ISREG(ours.st_mode)) fail_open(path, "not a regular file; expected a journal file");
    if (::lstat(path.c_str(), &now) == 0 && now.st_ino == ours.st_ino && now.st_dev == ours.st_dev)
      break;
    if (tries >= 3) fail_open(path, "replaced repeatedly while being opened");
    ::close(f.release());
  }
  refuse_foreign(f.fd);

  const std::string temp = path + ".compact";
  struct stat tst {};
  if (::lstat(temp.c_str(), &tst) == 0 && S_ISREG(tst.st_mode) && ::unlink(temp.c_str()) == 0)
    report({JournalProblem::Kind::stale_temporary, 0,
            "removed '" + temp + "', left by a compaction interrupted before its rename"});

  struct stat st {};
  ::fstat(f.fd, &st);
  if (created || st.st_size == 0) {
    // A new file, or one whose creator died before writing the header: nothing to lose.
    created_unix_ns_ = unix_now_ns();
    std::string header = journal::encode_header(queue_, codec_, created_unix_ns_);
    if (!write_all(f.fd, header.data(), header.size(), 0) || ::fdatasync(f.fd) != 0)
      fail_open(path, "cannot write the header: " + errno_text(errno));
    sync_directory(path);
    used_ = header.size();
    map_file(f.release(), used_);
  } else {
    open_existing(f, static_cast<std::uint64_t>(st.st_size), restored);
  }
}

void DlqJournal::refuse_foreign(int fd) const {
  // A file another user planted (in a shared directory) would have its entries restored and
  // redriven, and the payloads written to it read by that user.
  const std::string& path = options_.path;
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail_open(path, "cannot stat: " + errno_text(errno));
  if (st.st_uid != ::geteuid())
    fail_open(path, "owned by uid " + std::to_string(st.st_uid) +
                        ", not by this process's user (uid " + std::to_string(::geteuid()) +
                        "): another user could have planted entries in it or could read the "
                        "payloads written to it; expected a journal this user created (remove "
                        "it, or chown it to this user)");
  if ((st.st_mode & S_IWOTH) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    fail_open(path, std::string("writable by every user (mode ") + mode +
                        "): anyone could plant entries in it; expected no write permission for "
                        "others (chmod o-w)");
  }
}

void DlqJournal::open_existing(Fd& f, std::uint64_t size, std::vector<StoredDeadLetter>& restored) {
  const std::string& path = options_.path;

  // Scan through a read-only mapping: a file we refuse must stay byte for byte as it was.
  void* ro = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, f.fd, 0);
  if (ro == MAP_FAILED) fail_open(path, "cannot map: " + errno_text(errno));
  JournalScan scan;
  try {
    scan = scan_journal({static_cast<const std::byte*>(ro), size});
  } catch (const Error& e) {
    ::munmap(ro, size);
    fail_open(path, std::string(e.what()).substr(std::string("journal: ").size()) +
                        "; the file was not modified");
  }
  ::munmap(ro, size);
  if (scan.header.queue != queue_)
    fail_open(path, "belongs to queue '" + scan.header.queue + "'; expected queue '" + queue_ +
                        "' (give each queue its own journal)");
  if (scan.header.codec != codec_)
    fail_open(path, "was written with payload codec '" + scan.header.codec +
                        "'; this queue's codec is '" + codec_ + "'");
  for (const auto& p : scan.problems)
    if (p.kind != JournalProblem::Kind::torn_tail &&
        options_.on_corruption == JournalOnCorruption::refuse)
      fail_open(path, p.message +
                          "; refusing to open (JournalOnCorruption::refuse); the file was not "
                          "modified. Inspect it with rail-dlq verify, or open it with "
                          "JournalOnCorruption::skip_and_report to drop the damaged record");
  created_unix_ns_ = scan.header.created_unix_ns;
  version_ = scan.header.version;
  used_ = scan.used_bytes;
  dead_ = scan.dead_bytes;
  for (const auto& p : scan.problems) {
    if (p.kind == JournalProblem::Kind::torn_tail) {
      // Cut the partial record off so the next append starts on zeros; the growth below
      // brings the file back to a whole chunk.
      if (::ftruncate(f.fd, static_cast<off_t>(used_)) != 0)
        fail_open(path, "cannot truncate a torn tail: " + errno_text(errno));
    }
    report(p);
  }
  for (const auto& e : scan.live)
    live_[e.id] = {e.offset, e.record_bytes};
  restored = std::move(scan.live);
  map_file(f.release(), std::max(used_, size));
}

void DlqJournal::map_file(int fd, std::uint64_t size) {
  fd_ = fd;
  map_size_ = round_up(std::max<std::uint64_t>(size, 1), options_.grow_chunk);
  // posix_fallocate, not ftruncate: blocks are reserved now, so a full disk is an error here
  // rather than a SIGBUS when a worker later writes into a hole of the mapping.
  int err = ::posix_fallocate(fd_, 0, static_cast<off_t>(map_size_));
  if (err != 0)
    fail_open(options_.path,
              "cannot reserve " + std::to_string(map_size_) + " bytes: " + errno_text(err));
  void* p = ::mmap(nullptr, map_size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED) fail_open(options_.path, "cannot map: " + errno_text(errno));
  map_ = static_cast<std::byte*>(p);
}

DlqJournal::~DlqJournal() {
  if (interval_thread_.joinable()) {
    {
      std::lock_guard lock(interval_mu_);
      interval_stop_ = true;
    }
    interval_cv_.notify_all();
    interval_thread_.join();
  }
  if (options_.sync != JournalSync::none) sync();
  if (map_) ::munmap(map_, map_size_);
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

void DlqJournal::report(const JournalProblem& p) const noexcept {
  if (!options_.on_problem) return;
  try {
    options_.on_problem(p);
  } catch (...) {
    // A throwing observer must not take a worker down with it.
  }
}

void DlqJournal::fail_locked(std::string message) noexcept {
  if (!failure_.empty()) return;
  failure_ = "journal '" + options_.path + "' stopped writing: " + message +
             "; the DLQ keeps its entries in memory only";
  report({JournalProblem::Kind::write_failed, used_, failure_});
}

bool DlqJournal::grow_locked(std::uint64_t need) noexcept {
  if (need <= map_size_) return true;
  const std::uint64_t size = round_up(need, options_.grow_chunk);
  int err =
      ::posix_fallocate(fd_, static_cast<off_t>(map_size_), static_cast<off_t>(size - map_size_));
  if (err != 0) {
    fail_locked("cannot grow the file to " + std::to_string(size) + " bytes: " + errno_text(err));
    return false;
  }
  void* p = ::mremap(map_, map_size_, size, MREMAP_MAYMOVE);
  if (p == MAP_FAILED) {
    fail_locked("cannot grow the mapping: " + errno_text(errno));
    return false;
  }
  map_ = static_cast<std::byte*>(p);
  map_size_ = size;
  return true;
}

std::uint64_t DlqJournal::append_locked(std::string_view record, JobId entry_id) noexcept {
  if (!failure_.empty() || map_ == nullptr) return 0;
  if (!grow_locked(used_ + record.size())) return 0;
  // In this program order: the length and type word (it claims the record's extent), the body,
  // then the magic and CRC word that commits the record, each word one aligned 8-byte store. A
  // process killed in between leaves nothing, or an uncommitted record whose header claims its
  // extent, which recovery never searches (journal_file.hpp); one memcpy of the whole record may
  // store its end before its start. map_ is page-aligned and records start at multiples of 8.
  std::byte* const at = map_ + used_;
  const auto store_word = [&](std::size_t offset) {
    std::uint64_t word;
    std::memcpy(&word, record.data() + offset, sizeof word);
    std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(at + offset))
        .store(word, std::memory_order_relaxed);
    std::atomic_signal_fence(std::memory_order_seq_cst);  // the compiler keeps the order
  };
  store_word(8);
  std::memcpy(at + 16, record.data() + 16, record.size() - 16);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  store_word(0);
  try {
    if (entry_id != 0) {
      auto [it, fresh] = live_.try_emplace(entry_id, Place{used_, record.size()});
      if (!fresh) {  // the same id dead-lettered again (after a redrive): the old one is dead
        dead_ += it->second.size;
        it->second = {used_, record.size()};
      }
      // Under JournalSync::none nothing is ever reported durable: nothing to remember.
      if (options_.sync != JournalSync::none)
        not_durable_.emplace_back(appended_seq_ + 1, entry_id);
    }
  } catch (...) {
    fail_locked("out of memory for the journal's index");
    return 0;
  }
  used_ += record.size();
  return ++appended_seq_;
}

std::uint64_t DlqJournal::append_entry(std::string_view record, JobId id) noexcept {
  std::lock_guard lock(mu_);
  return append_locked(record, id);
}

std::uint64_t DlqJournal::append_tombstone(TombstoneCause cause,
                                           std::span<const JobId> ids) noexcept {
  std::lock_guard lock(mu_);
  if (!failure_.empty()) return 0;
  std::string rec;
  try {
    rec = journal::encode_tombstone(cause, ids);
  } catch (...) {
    fail_locked("out of memory encoding a tombstone");
    return 0;
  }
  std::uint64_t ticket = append_locked(rec, 0);
  if (ticket == 0) return 0;
  dead_ += rec.size();
  auto kill = [this](auto it) {
    dead_ += it->second.size;
    live_.erase(it);
  };
  if (cause == TombstoneCause::purged && ids.empty()) {
    for (auto it = live_.begin(); it != live_.end();)
      kill(it++);
  }
  for (JobId id : ids)
    if (auto it = live_.find(id); it != live_.end()) kill(it);
  return ticket;
}

void DlqJournal::settle(std::uint64_t ticket) noexcept {
  if (ticket == 0) return;
  switch (options_.sync) {
    case JournalSync::every_entry:
      sync_through(ticket);
      break;
    case JournalSync::every_n: {
      bool due;
      {
        std::lock_guard lock(mu_);
        due = not_durable_.size() >= options_.sync_every_n;
      }
      if (due) sync_through(ticket);
      break;
    }
    case JournalSync::interval:
    case JournalSync::none:
      break;
  }
  bool due;
  {
    std::lock_guard lock(mu_);
    due = compaction_due();
  }
  if (due) compact();
}

void DlqJournal::sync() noexcept {
  std::uint64_t ticket;
  {
    std::lock_guard lock(mu_);
    ticket = appended_seq_;
  }
  sync_through(ticket);
}

void DlqJournal::sync_through(std::uint64_t ticket) noexcept {
  std::vector<JobId> durable;
  {
    std::lock_guard sync_lock(sync_mu_);
    if (synced_seq_ >= ticket) return;  // a sync that started after our append covered it
    std::uint64_t target;
    int fd;
    {
      std::lock_guard lock(mu_);
      target = appended_seq_;
      fd = fd_;
    }
    if (::fdatasync(fd) != 0) {
      std::lock_guard lock(mu_);
      fail_locked("fdatasync failed: " + errno_text(errno));
      return;
    }
    std::lock_guard lock(mu_);
    synced_seq_ = target;
    while (!not_durable_.empty() && not_durable_.front().first <= target) {
      if (options_.on_durable) durable.push_back(not_durable_.front().second);
      not_durable_.pop_front();
    }
  }
  for (JobId id : durable) {
    try {
      options_.on_durable(id);
    } catch (...) {
      // As for on_problem: an observer's exception stays out of the worker.
    }
  }
}

void DlqJournal::interval_loop() {
  std::unique_lock lock(interval_mu_);
  while (!interval_stop_) {
    // Through the saturating helper: wait_for(Duration::max()) adds it to now() and overflows
    // into the past, which made the thread sync in a tight loop instead of never.
    interval_cv_.wait_until(lock, steady_deadline(options_.sync_interval),
                            [this] { return interval_stop_; });
    if (interval_stop_) break;
    lock.unlock();
    sync();
    lock.lock();
  }
}

bool DlqJournal::compaction_due() const {
  return failure_.empty() && dead_ >= options_.compact_min_dead_bytes &&
         static_cast<double>(dead_) >= options_.compact_dead_ratio * static_cast<double>(used_);
}

void DlqJournal::compact() noexcept {
  std::vector<JobId> durable;
  {
    std::lock_guard sync_lock(sync_mu_);
    std::lock_guard lock(mu_);
    if (!failure_.empty()) return;
    try {
      compact_locked();
    } catch (const std::exception& e) {
      // The old file is intact and still ours: report, and keep appending to it.
      report({JournalProblem::Kind::write_failed, 0,
              std::string("compaction abandoned, the journal is unchanged: ") + e.what()});
      return;
    }
    // The new file was fdatasync'ed whole: everything appended so far is durable.
    synced_seq_ = appended_seq_;
    for (auto& [seq, id] : not_durable_)
      if (options_.on_durable) durable.push_back(id);
    not_durable_.clear();
  }
  for (JobId id : durable) {
    try {
      options_.on_durable(id);
    } catch (...) {
    }
  }
}

void DlqJournal::compact_locked() {
  const std::string& path = options_.path;
  const std::string temp = path + ".compact";
  ::unlink(temp.c_str());
  Fd t;
  t.fd = ::open(temp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                static_cast<mode_t>(options_.file_mode));
  if (t.fd < 0)
    throw Error(ErrorCode::journal, "cannot create '" + temp + "': " + errno_text(errno));
  // Locked before the rename makes it the journal, so no opener can slip in between.
  if (::flock(t.fd, LOCK_EX | LOCK_NB) != 0)
    throw Error(ErrorCode::journal, "cannot lock '" + temp + "': " + errno_text(errno));

  std::vector<std::pair<JobId, Place>> order(live_.begin(), live_.end());
  std::sort(order.begin(), order.end(),
            [](const auto& a, const auto& b) { return a.second.offset < b.second.offset; });
  std::string out = journal::encode_header(queue_, codec_, created_unix_ns_);
  std::unordered_map<JobId, Place> moved;
  moved.reserve(order.size());
  std::uint64_t at = 0;
  for (const auto& [id, place] : order) {
    moved[id] = {out.size() + at, place.size};
    out.append(reinterpret_cast<const char*>(map_ + place.offset), place.size);
    if (out.size() >= (std::size_t{1} << 20)) {  // write in slices: bounded memory
      if (!write_all(t.fd, out.data(), out.size(), at))
        throw Error(ErrorCode::journal, "cannot write '" + temp + "': " + errno_text(errno));
      at += out.size();
      out.clear();
    }
  }
  if (!write_all(t.fd, out.data(), out.size(), at))
    throw Error(ErrorCode::journal, "cannot write '" + temp + "': " + errno_text(errno));
  const std::uint64_t used = at + out.size();
  if (::fdatasync(t.fd) != 0)
    throw Error(ErrorCode::journal, "cannot sync '" + temp + "': " + errno_text(errno));
  if (::rename(temp.c_str(), path.c_str()) != 0)
    throw Error(ErrorCode::journal, "cannot rename '" + temp + "': " + errno_text(errno));
  sync_directory(path);

  // From here the new file is the journal; switching to it cannot be undone, so a failure to
  // map it stops the journal rather than writing to the old, unlinked file.
  ::munmap(map_, map_size_);
  map_ = nullptr;
  ::close(fd_);
  fd_ = -1;
  used_ = used;
  dead_ = 0;
  live_ = std::move(moved);
  try {
    map_file(t.release(), used_);
  } catch (const Error& e) {
    fail_locked(e.what());
  }
}

std::string DlqJournal::failure() const {
  std::lock_guard lock(mu_);
  return failure_;
}
std::size_t DlqJournal::live_entries() const {
  std::lock_guard lock(mu_);
  return live_.size();
}
std::uint64_t DlqJournal::used_bytes() const {
  std::lock_guard lock(mu_);
  return used_;
}
std::uint64_t DlqJournal::dead_bytes() const {
  std::lock_guard lock(mu_);
  return dead_;
}

}  // namespace rail::detail
