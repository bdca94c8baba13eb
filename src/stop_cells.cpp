// StopCells: see include/rail/detail/stop_cells.hpp.
#include "rail/detail/stop_cells.hpp"

namespace rail::detail {

std::stop_token StopCells::stopped() {
  // Made once, stopped for good and never freed (see the header); tokens share its state.
  static const std::stop_source* const source = [] {
    auto* s = new std::stop_source();
    s->request_stop();
    return s;
  }();
  return source->get_token();
}

}  // namespace rail::detail
