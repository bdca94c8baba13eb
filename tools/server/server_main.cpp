// rail_example_server: a server that embeds rail as our users do (cpp-httplib on 127.0.0.1):
// POST /orders adds a charge to a rate-limited payments gateway and answers at once; /metrics,
// /metrics.json, /dlq, /jobs/{id} and a dashboard page at / (routes.hpp). It prints
// "listening on http://127.0.0.1:PORT" once it accepts requests, and stops on SIGINT or SIGTERM
// (or after --run-for seconds), shutting the engine down.
#include <httplib.h>
#include <pthread.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <random>
#include <thread>

#include "server/routes.hpp"
#include "server/shop.hpp"

namespace {

using namespace std::chrono_literals;

/// demo_orders(shop, per_second, stop): a steady stream of orders (1 in 20 declined), as a
/// busy shop's request threads would add them.
void demo_orders(rail::server::Shop& shop, double per_second, const std::atomic<bool>& stop) {
  std::mt19937_64 rng(7);
  const auto gap = std::chrono::duration<double>(1.0 / per_second);
  auto next = std::chrono::steady_clock::now();
  for (std::uint64_t n = 1; !stop.load(std::memory_order_relaxed); ++n) {
    const std::int64_t cents = n % 20 == 0 ? 1013 : 500 + static_cast<std::int64_t>(rng() % 9000);
    (void)shop.add_order("customer-" + std::to_string(rng() % 50), cents, "");
    next += std::chrono::duration_cast<std::chrono::steady_clock::duration>(gap);
    std::this_thread::sleep_until(next);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"rail's example server: orders in, a dashboard, Prometheus metrics"};
  int port = 8080;
  app.add_option("--port", port, "port on 127.0.0.1 (0: any free one, printed)")
      ->check(CLI::Range(0, 65535));
  rail::server::ShopOptions shop_options;
  double gateway_ms = 2;
  app.add_option("--gateway-ms", gateway_ms, "the payments gateway's latency per call")
      ->check(CLI::Range(0.0, 10'000.0));
  std::string work = "sleep";
  app.add_option("--work", work, "sleep (the gateway's time is waited) or spin (burnt)")
      ->check(CLI::IsMember({"sleep", "spin"}));
  app.add_option("--timeout-rate", shop_options.timeout_rate, "share of calls that time out")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--workers", shop_options.workers, "payments workers")->check(CLI::Range(1, 256));
  app.add_option("--gateway-rate", shop_options.gateway_rate, "gateway calls per second")
      ->check(CLI::Range(1, 1'000'000));
  app.add_option("--gateway-concurrency", shop_options.gateway_concurrency,
                 "gateway calls in flight at once")
      ->check(CLI::Range(1, 4096));
  app.add_option("--capacity", shop_options.capacity, "each queue's capacity")
      ->check(CLI::Range(16, 1 << 24));
  double demo_rate = 0;
  app.add_option("--demo-rate", demo_rate, "orders per second added by a background thread")
      ->check(CLI::Range(0.0, 100'000.0));
  rail::server::ServeOptions serve;
  app.add_option("--max-body", serve.max_body, "the largest request body, in bytes (else 413)")
      ->check(CLI::Range(64, 1 << 20));
  std::string log = "none";
  app.add_option("--log", log,
                 "print every job's stages: text, or json (one object per line, with the "
                 "trace ids of jobs added with a traceparent header)")
      ->check(CLI::IsMember({"none", "text", "json"}));
  double run_for = 0;
  app.add_option("--run-for", run_for, "seconds to serve (0: until SIGINT or SIGTERM)")
      ->check(CLI::Range(0.0, 86'400.0));
  CLI11_PARSE(app, argc, argv);
  shop_options.gateway_latency = std::chrono::duration_cast<rail::Duration>(
      std::chrono::duration<double, std::milli>(gateway_ms));
  shop_options.work = work == "spin" ? rail::server::Work::spin : rail::server::Work::sleep;

  // SIGINT and SIGTERM go to the waiter thread only (blocked before any thread starts).
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  try {
    rail::server::Shop shop(shop_options);
    if (log != "none")
      shop.engine().on_event(rail::make_log_observer(
          std::cout, shop.engine().clock(),
          {.verbose = true,
           .format = log == "json" ? rail::LogFormat::json : rail::LogFormat::text}));
    httplib::Server server;
    rail::server::route(server, shop, serve);
    const int bound = port == 0 ? server.bind_to_any_port("127.0.0.1")
                                : (server.bind_to_port("127.0.0.1", port) ? port : -1);
    if (bound < 0) {
      std::cerr << "rail_example_server: cannot listen on 127.0.0.1:" << port << "\n";
      return 1;
    }
    std::atomic<bool> stop{false};
    std::thread waiter([&] {
      if (run_for > 0) {
        timespec t{
            static_cast<time_t>(run_for),
            static_cast<long>((run_for - static_cast<double>(static_cast<time_t>(run_for))) * 1e9)};
        (void)sigtimedwait(&stop_signals, nullptr, &t);
      } else {
        int signal = 0;
        (void)sigwait(&stop_signals, &signal);
      }
      stop.store(true);
      server.stop();
    });
    std::thread load;
    if (demo_rate > 0) load = std::thread([&] { demo_orders(shop, demo_rate, stop); });
    std::cout << "listening on http://127.0.0.1:" << bound << std::endl;
    const bool served = server.listen_after_bind();
    stop.store(true);
    if (!served) pthread_kill(waiter.native_handle(), SIGTERM);  // the waiter still waits
    waiter.join();
    if (load.joinable()) load.join();
    return served ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "rail_example_server: " << e.what() << "\n";
    return 1;
  }
}
