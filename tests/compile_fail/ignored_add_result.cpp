// An add whose result is ignored does not compile under -Werror=unused-result: a full queue
// (AddStatus::full) creates no job, and nothing would say so. The control keeps the result.
#include "rail/rail.hpp"

void add_one(rail::Queue<int>& q) {
#ifdef RAIL_CONTROL_CODABLE
  const rail::AddReceipt r = q.add("job", 1);
  (void)r;
#else
  q.add("job", 1);
#endif
}
