// Compiled by compile_fail_check.sh, twice: as it is, declaring a queue with a DLQ journal whose
// payload type has no rail::JournalCodec, which must NOT compile and whose diagnostic must name
// the payload type and the requirement it misses; and with RAIL_CONTROL_CODABLE, which gives the
// type a codec and must compile, so that the first compile fails for the codec and nothing else.
#include "rail/rail.hpp"

struct PayloadWithoutCodec {
  std::string text;
};

#ifdef RAIL_CONTROL_CODABLE
template <>
struct rail::JournalCodec<PayloadWithoutCodec> {
  static std::string name() { return "control/v1"; }
  static void encode(const PayloadWithoutCodec& p, std::string& out) { out += p.text; }
  static PayloadWithoutCodec decode(std::span<const std::byte> bytes) {
    return {std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size())};
  }
};
#endif

int main() {
  rail::Engine engine;
  rail::QueueOptions options;
  options.dlq.journal.path = "orders.dlq";
  auto q = engine.declare_journaled_queue<PayloadWithoutCodec>("orders", options);
  (void)q;
}
