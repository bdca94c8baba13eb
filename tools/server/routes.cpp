// The example server's routes (routes.hpp).
#include "server/routes.hpp"

#include <httplib.h>
#include <prometheus/text_serializer.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>

#include "rail/metrics_json.hpp"
#include "rail/prometheus.hpp"
#include "server/page.hpp"
#include "server/shop.hpp"

namespace rail::server {
namespace {

using nlohmann::json;

void reply(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(), "application/json");
}

void add_order(Shop& shop, const httplib::Request& req, httplib::Response& res) {
  const json order = json::parse(req.body, nullptr, false);
  if (!order.is_object() || !order.contains("customer") || !order["customer"].is_string() ||
      !order.contains("amount_cents") || !order["amount_cents"].is_number_integer() ||
      (order.contains("label") && !order["label"].is_string()))
    return reply(res, 400,
                 {{"error",
                   "expected a JSON object {\"customer\": string, \"amount_cents\": "
                   "integer, \"label\": optional string}"}});
  const std::string label = order.value("label", std::string());
  // The request's span, if the caller sent one: the job joins its trace (Job::trace(), events,
  // JSON log lines).
  std::optional<TraceScope> span;
  if (const auto parent = TraceContext::parse(req.get_header_value("traceparent")))
    span.emplace(*parent);
  const AddReceipt r = shop.add_order(order["customer"].get<std::string>(),
                                      order["amount_cents"].get<std::int64_t>(), label);
  if (!r.accepted())
    return reply(res, 503, {{"error", "not added: " + std::string(to_string(r.status))}});
  reply(res, 202, {{"job_id", r.id}, {"status", to_string(r.status)}});
}

/// dead_letters(queue): a queue's DLQ entries as JSON.
json dead_letters(Queue<Order>& queue, const std::string& name) {
  json out = json::array();
  for (const DeadLetter<Order>& e : queue.dlq().list(0, 200)) {
    json errors = json::array();
    for (const AttemptError& a : e.errors)
      errors.push_back({{"attempt", a.attempt}, {"error", a.message}});
    out.push_back({{"queue", name},
                   {"id", e.id},
                   {"name", e.name},
                   {"reason", to_string(e.reason)},
                   {"failed_attempts", e.failed_attempts},
                   {"customer", e.data.customer},
                   {"errors", std::move(errors)},
                   {"dead_at_ns", e.dead_at.time_since_epoch().count()}});
  }
  return out;
}

void job(Shop& shop, const httplib::Request& req, httplib::Response& res) {
  JobId id = 0;
  try {
    id = std::stoull(req.matches[1]);
  } catch (const std::exception&) {
    return reply(res, 400, {{"error", "expected a job id"}});
  }
  const Explanation e = shop.engine().explain(id);
  if (e.state.status == JobStatus::unknown)
    return reply(res, 404, {{"id", id}, {"status", "unknown"}, {"explanation", e.text}});
  reply(res, 200,
        {{"id", id},
         {"status", to_string(e.state.status)},
         {"failed_attempts", e.state.failed_attempts},
         {"deliveries", e.state.deliveries},
         {"holdup", to_string(e.holdup)},
         {"explanation", e.text}});
}

}  // namespace

void route(httplib::Server& server, Shop& shop, const ServeOptions& options) {
  server.set_payload_max_length(options.max_body);  // larger bodies: 413
  server.set_tcp_nodelay(true);  // small JSON answers: no 40 ms wait for a delayed ACK
  server.Post("/orders", [&shop](const httplib::Request& req, httplib::Response& res) {
    add_order(shop, req, res);
  });
  server.Get("/metrics", [&shop](const httplib::Request&, httplib::Response& res) {
    std::ostringstream text;
    ::prometheus::TextSerializer().Serialize(text, prometheus::families(shop.engine().metrics()));
    res.set_content(text.str(), "text/plain; version=0.0.4; charset=utf-8");
  });
  server.Get("/metrics.json", [&shop](const httplib::Request&, httplib::Response& res) {
    reply(res, 200, to_json(shop.engine().metrics()));
  });
  server.Get("/dlq", [&shop](const httplib::Request&, httplib::Response& res) {
    json all = dead_letters(shop.payments(), "payments");
    for (auto& e : dead_letters(shop.emails(), "emails"))
      all.push_back(std::move(e));
    reply(res, 200, all);
  });
  server.Post("/dlq/redrive", [&shop](const httplib::Request& req, httplib::Response& res) {
    const json body = json::parse(req.body, nullptr, false);
    const std::string queue = body.is_object() ? body.value("queue", std::string()) : "";
    if (queue != "payments" && queue != "emails")
      return reply(res, 400, {{"error", "expected {\"queue\": \"payments\" or \"emails\"}"}});
    auto& q = queue == "payments" ? shop.payments() : shop.emails();
    reply(res, 200, {{"queue", queue}, {"redriven", q.dlq().redrive_all()}});
  });
  server.Get(R"(/jobs/(\d+))",
             [&shop](const httplib::Request& req, httplib::Response& res) { job(shop, req, res); });
  server.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(std::string(dashboard_page()), "text/html; charset=utf-8");
  });
}

}  // namespace rail::server
