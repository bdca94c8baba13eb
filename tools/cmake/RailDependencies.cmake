# Dependencies, all Debian packages. The library itself needs only Threads and Boost.CRC (headers);
# a missing one stops configuration with the package's name. A dependency of an optional part
# (tests, benchmarks, tools) that is missing skips that part with a warning naming the package,
# so a plain `cmake -S . -B build` always configures the library (issue 10).
include(GNUInstallDirs)
find_package(Threads REQUIRED)

macro(rail_require found debian_package what)
  if(NOT ${found})
    message(FATAL_ERROR "rail: ${what} not found. Install the Debian package: apt-get install -y ${debian_package}")
  endif()
endmacro()

# rail_need(<part variable> <found> <debian package> <what>): turns the part off (for this
# configure run; the cache keeps the user's choice) and says why when the dependency is missing.
macro(rail_need part found debian_package what)
  if(${part} AND NOT ${found})
    message(WARNING "rail: ${what} not found, so ${part} is off for this build "
                    "(apt-get install -y ${debian_package} to build it)")
    set(${part} OFF)
  endif()
endmacro()

# The DLQ journal (src/journal_format.cpp) checksums its records with Boost.CRC (header-only).
find_path(RAIL_BOOST_CRC_DIR boost/crc.hpp)
rail_require(RAIL_BOOST_CRC_DIR libboost-dev "Boost.CRC")

# mimalloc: rail opens libmimalloc.so.2 privately at run time (src/allocation.cpp; without it,
# operator new). Linking it is needed only for the opt-in process-wide override
# (RAIL_MIMALLOC_OVERRIDE) and by the tests and benchmarks that count or use its API.
find_package(mimalloc CONFIG QUIET)
if(RAIL_MIMALLOC_OVERRIDE)
  rail_require(mimalloc_FOUND libmimalloc-dev "mimalloc (RAIL_MIMALLOC_OVERRIDE=ON)")
endif()
if(mimalloc_FOUND AND NOT TARGET rail_deps::mimalloc)
  add_library(rail_deps::mimalloc INTERFACE IMPORTED)
  if(TARGET mimalloc)
    target_link_libraries(rail_deps::mimalloc INTERFACE mimalloc)
  else()
    target_link_libraries(rail_deps::mimalloc INTERFACE mimalloc-static)
  endif()
endif()

find_path(RAIL_CONCURRENTQUEUE_DIR concurrentqueue/concurrentqueue.h)
find_path(RAIL_BOOST_LOCKFREE_DIR boost/lockfree/queue.hpp)
if(RAIL_BUILD_TESTS OR RAIL_BUILD_BENCHMARKS)
  find_package(GTest CONFIG QUIET)
  find_package(benchmark CONFIG QUIET)
endif()
if(RAIL_BUILD_TOOLS OR RAIL_BUILD_BENCHMARKS)
  find_package(CLI11 CONFIG QUIET)
endif()
if(RAIL_BUILD_TOOLS OR RAIL_BUILD_BENCHMARKS OR RAIL_BUILD_TESTS)
  find_package(nlohmann_json CONFIG QUIET)
endif()

# Tests: GoogleTest; the ring tests compare against moodycamel and Boost.Lockfree; the
# allocation test calls mimalloc's API; the log test parses JSON with nlohmann-json.
rail_need(RAIL_BUILD_TESTS GTest_FOUND libgtest-dev "GoogleTest")
rail_need(RAIL_BUILD_TESTS RAIL_CONCURRENTQUEUE_DIR libconcurrentqueue-dev "moodycamel ConcurrentQueue")
rail_need(RAIL_BUILD_TESTS RAIL_BOOST_LOCKFREE_DIR libboost-dev "Boost.Lockfree")
rail_need(RAIL_BUILD_TESTS mimalloc_FOUND libmimalloc-dev "mimalloc")
# The JSON log lines are parsed back by a real JSON parser.
rail_need(RAIL_BUILD_TESTS nlohmann_json_FOUND nlohmann-json3-dev "nlohmann-json")
# Benchmarks: Google Benchmark, the two rings they compare against, CLI11 and nlohmann-json
# (the peers' driver), mimalloc (every contender allocates from it).
rail_need(RAIL_BUILD_BENCHMARKS benchmark_FOUND libbenchmark-dev "Google Benchmark")
rail_need(RAIL_BUILD_BENCHMARKS RAIL_CONCURRENTQUEUE_DIR libconcurrentqueue-dev "moodycamel ConcurrentQueue")
rail_need(RAIL_BUILD_BENCHMARKS RAIL_BOOST_LOCKFREE_DIR libboost-dev "Boost.Lockfree")
rail_need(RAIL_BUILD_BENCHMARKS CLI11_FOUND libcli11-dev "CLI11")
rail_need(RAIL_BUILD_BENCHMARKS nlohmann_json_FOUND nlohmann-json3-dev "nlohmann-json")
rail_need(RAIL_BUILD_BENCHMARKS mimalloc_FOUND libmimalloc-dev "mimalloc")
# Tools: the demo, soak and rail-dlq parse their command lines with CLI11; rail-dlq writes JSON.
rail_need(RAIL_BUILD_TOOLS CLI11_FOUND libcli11-dev "CLI11")
rail_need(RAIL_BUILD_TOOLS nlohmann_json_FOUND nlohmann-json3-dev "nlohmann-json")
