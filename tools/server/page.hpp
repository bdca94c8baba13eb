// The example server's dashboard page (page.html, embedded at build time): one static page with
// no framework and no CDN that polls /metrics.json and /dlq each second and shows each queue's
// depth, rates and latency histograms, and the DLQ with a redrive behind a confirmation. It puts
// every job name and error into the DOM as text (textContent), never as markup.
#pragma once

#include <string_view>

namespace rail::server {

/// dashboard_page(): the page's HTML.
[[nodiscard]] std::string_view dashboard_page() noexcept;

}  // namespace rail::server
