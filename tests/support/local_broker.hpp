// LocalBroker: a private RabbitMQ for one test binary, started and stopped through
// tools/rabbitmq/local-broker (127.0.0.1, free ports, data under a temporary directory; `stop`
// ends exactly the processes `start` started). Tests call available() and skip when Debian's
// rabbitmq-server is not installed; kill/start/freeze/thaw drive the fault tests.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>

namespace rail::test {

class LocalBroker {
 public:
  /// available(): the broker can be started here (Debian's rabbitmq-server is installed).
  [[nodiscard]] static bool available() {
    return std::filesystem::exists("/usr/lib/rabbitmq/bin/rabbitmq-server");
  }

  LocalBroker() {
    char tmpl[] = "/tmp/rail-broker-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) throw std::runtime_error("LocalBroker: mkdtemp failed");
    dir_ = tmpl;
    url_ = run("start");
    while (!url_.empty() && (url_.back() == '\n' || url_.back() == '\r'))
      url_.pop_back();
  }
  ~LocalBroker() {
    try {
      (void)run("stop");
      std::filesystem::remove_all(dir_);
    } catch (...) {  // a failed stop is reported by the script itself; keep the dir to look at
    }
  }
  LocalBroker(const LocalBroker&) = delete;
  LocalBroker& operator=(const LocalBroker&) = delete;

  [[nodiscard]] const std::string& url() const noexcept { return url_; }
  /// kill(): SIGKILL the broker (a crash); start() boots it again on the same data and port.
  void kill() { (void)run("kill"); }
  void start() { (void)run("start"); }
  /// restart(): a clean stop, then start (the broker saves all its state on the way down).
  void restart() {
    (void)run("stop");
    (void)run("start");
  }
  /// freeze()/thaw(): SIGSTOP / SIGCONT the broker's VM (a partition: its sockets stay open).
  void freeze() { (void)run("freeze"); }
  void thaw() { (void)run("thaw"); }

 private:
  std::string run(const char* command) const {
    const std::string line =
        std::string(RAIL_SOURCE_DIR) + "/tools/rabbitmq/local-broker " + command + " " + dir_;
    FILE* p = popen(line.c_str(), "r");
    if (p == nullptr) throw std::runtime_error("LocalBroker: popen failed: " + line);
    std::string out;
    char buf[256];
    while (std::fgets(buf, sizeof buf, p) != nullptr)
      out += buf;
    if (pclose(p) != 0) throw std::runtime_error("LocalBroker: '" + line + "' failed");
    return out;
  }

  std::string dir_;
  std::string url_;
};

}  // namespace rail::test
