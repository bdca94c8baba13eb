// libFuzzer target for the DLQ journal reader (scan_journal): any bytes must give a JournalScan or
// an Error(journal), never a crash, a sanitizer report, a hang or a result that points outside
// the input. Built by the `fuzz` preset (clang); CI runs it for 20 s, by hand:
//   build/fuzz/tests/fuzz/journal_reader_fuzz -max_total_time=3600 tests/fuzz/corpus
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "rail/error.hpp"
#include "rail/journal_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    rail::JournalScan s = rail::scan_journal({reinterpret_cast<const std::byte*>(data), size});
    if (s.used_bytes > size || s.file_bytes != size) std::abort();
    for (const auto& e : s.live)
      if (e.offset + e.record_bytes > size || e.payload.size() > size) std::abort();
    for (const auto& p : s.problems)
      if (p.offset > size || p.message.empty()) std::abort();
  } catch (const rail::Error& e) {
    if (e.code() != rail::ErrorCode::journal) std::abort();
  }
  return 0;
}
