// The example server's HTTP surface (cpp-httplib), on 127.0.0.1 only:
//   POST /orders          {"customer": "...", "amount_cents": 1234, "label": "..."}: adds a
//                         charge and answers at once, 202 {"job_id": N} (400: not such an
//                         object; 413: a body past ServeOptions::max_body; 503: queue full);
//                         a W3C `traceparent` header puts the job in the caller's trace
//   GET  /metrics         the Prometheus exposition (rail::prometheus, text format 0.0.4)
//   GET  /metrics.json    the same snapshot as JSON (rail/metrics_json.hpp)
//   GET  /dlq             every queue's dead letters as JSON, oldest first
//   POST /dlq/redrive     {"queue": "payments"}: redrives that DLQ; 200 {"redriven": N}
//   GET  /jobs/{id}       the job's state and, while it waits, why (Engine::explain)
//   GET  /                the dashboard page (page.html: no framework, no CDN)
// Every string a response carries is JSON-escaped by nlohmann-json; the page writes them into
// the DOM as text, never as markup.
#pragma once

#include <cstddef>

namespace httplib {
class Server;
}

namespace rail::server {

class Shop;

struct ServeOptions {
  std::size_t max_body = 16 * 1024;  // bytes a request body may have
};

/// route(server, shop, options): registers the routes above on `server`, which must not outlive
/// `shop`.
void route(httplib::Server& server, Shop& shop, const ServeOptions& options);

}  // namespace rail::server
