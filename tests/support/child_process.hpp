// ChildProcess: a forked child for the tests that kill a process (kill -9 of a consumer, of a
// schedules leader). The child runs `body(signal)`, which must not return (it holds its work
// until killed; a return exits 0); `signal()` tells the parent something happened, a byte down
// a pipe the parent reads with wait_signals(n). The forking process must run no other thread.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <stdexcept>

namespace rail::test {

class ChildProcess {
 public:
  /// Signal: the child's side: signal() sends one byte to the parent.
  struct Signal {
    int fd;
    void operator()() const {
      if (::write(fd, "s", 1) != 1) _exit(3);
    }
  };

  template <class Body>
  explicit ChildProcess(Body body) {
    int fds[2];
    if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      ::close(fds[0]);
      body(Signal{fds[1]});
      _exit(0);
    }
    ::close(fds[1]);
    read_ = fds[0];
  }
  ~ChildProcess() {
    kill();
    ::close(read_);
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  /// wait_signals(n): true once the child signalled n times; false if it ended first.
  bool wait_signals(std::size_t n) {
    char buf[64];
    while (n > 0) {
      const ssize_t got = ::read(read_, buf, n < sizeof buf ? n : sizeof buf);
      if (got <= 0) return false;
      n -= static_cast<std::size_t>(got);
    }
    return true;
  }
  /// kill(): SIGKILL, and waits for the child to be gone (once).
  void kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    (void)::waitpid(pid_, &status, 0);
    pid_ = 0;
  }

 private:
  pid_t pid_ = 0;
  int read_ = -1;
};

}  // namespace rail::test
