// RAIL_SANITIZED: defined when the test is built with AddressSanitizer or ThreadSanitizer, whose
// runtimes replace the allocator and map shadow memory: allocation counts and resident-memory
// figures then measure the sanitizer, not rail, and those tests skip themselves.
#pragma once

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define RAIL_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define RAIL_SANITIZED 1
#endif
#endif
