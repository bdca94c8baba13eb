# Every dependency is a Debian package; a missing one stops configuration with the package's name.
include(GNUInstallDirs)
find_package(Threads REQUIRED)

macro(rail_require found debian_package what)
  if(NOT ${found})
    message(FATAL_ERROR "rail: ${what} not found. Install the Debian package: apt-get install -y ${debian_package}")
  endif()
endmacro()

# mimalloc: rail opens libmimalloc.so.2 privately at run time (src/allocation.cpp; without it,
# operator new). Linking it is needed only for the opt-in process-wide override
# (RAIL_MIMALLOC_OVERRIDE) and by the tests and benchmarks that count or use its API.
find_package(mimalloc CONFIG QUIET)
if(RAIL_MIMALLOC_OVERRIDE OR RAIL_BUILD_TESTS OR RAIL_BUILD_BENCHMARKS)
  rail_require(mimalloc_FOUND libmimalloc-dev "mimalloc")
endif()
if(mimalloc_FOUND AND NOT TARGET rail_deps::mimalloc)
  add_library(rail_deps::mimalloc INTERFACE IMPORTED)
  if(TARGET mimalloc)
    target_link_libraries(rail_deps::mimalloc INTERFACE mimalloc)
  else()
    target_link_libraries(rail_deps::mimalloc INTERFACE mimalloc-static)
  endif()
endif()

# The DLQ journal (src/journal_format.cpp) checksums its records with Boost.CRC (header-only).
find_path(RAIL_BOOST_CRC_DIR boost/crc.hpp)
rail_require(RAIL_BOOST_CRC_DIR libboost-dev "Boost.CRC")

# Benchmarks compare the engine's ring against these two; the engine itself does not include them.
find_path(RAIL_CONCURRENTQUEUE_DIR concurrentqueue/concurrentqueue.h)
find_path(RAIL_BOOST_LOCKFREE_DIR boost/lockfree/queue.hpp)
if(RAIL_BUILD_BENCHMARKS OR RAIL_BUILD_TESTS)
  rail_require(RAIL_CONCURRENTQUEUE_DIR libconcurrentqueue-dev "moodycamel ConcurrentQueue")
  rail_require(RAIL_BOOST_LOCKFREE_DIR libboost-dev "Boost.Lockfree")
endif()
if(RAIL_BUILD_TESTS)
  find_package(GTest CONFIG QUIET)
  rail_require(GTest_FOUND libgtest-dev "GoogleTest")
endif()
if(RAIL_BUILD_BENCHMARKS)
  find_package(benchmark CONFIG QUIET)
  rail_require(benchmark_FOUND libbenchmark-dev "Google Benchmark")
endif()
if(RAIL_BUILD_TOOLS OR RAIL_BUILD_BENCHMARKS)
  find_package(CLI11 CONFIG QUIET)
  rail_require(CLI11_FOUND libcli11-dev "CLI11")
  find_package(nlohmann_json CONFIG QUIET)
  rail_require(nlohmann_json_FOUND nlohmann-json3-dev "nlohmann-json")
endif()
