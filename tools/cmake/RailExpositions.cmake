# The optional expositions of Engine::metrics(), each built when its Debian package is present
# (the engine itself depends on neither):
#   rail::json        include/rail/metrics_json.hpp (header-only), with nlohmann-json3-dev
#   rail::prometheus  include/rail/prometheus.hpp + src/prometheus_collector.cpp, with
#                     prometheus-cpp-dev (its core library)
find_package(nlohmann_json CONFIG QUIET)
if(nlohmann_json_FOUND)
  add_library(rail_json INTERFACE)
  add_library(rail::json ALIAS rail_json)
  target_link_libraries(rail_json INTERFACE rail::rail nlohmann_json::nlohmann_json)
else()
  message(STATUS "rail: rail::json is not built (apt-get install -y nlohmann-json3-dev)")
endif()

option(RAIL_BUILD_PROMETHEUS "Build rail::prometheus where prometheus-cpp is installed" ON)
if(RAIL_BUILD_PROMETHEUS)
  find_package(prometheus-cpp CONFIG QUIET)
  if(prometheus-cpp_FOUND)
    add_library(rail_prometheus STATIC src/prometheus_collector.cpp)
    add_library(rail::prometheus ALIAS rail_prometheus)
    target_link_libraries(rail_prometheus PUBLIC rail::rail prometheus-cpp::core)
    set_target_properties(rail_prometheus PROPERTIES POSITION_INDEPENDENT_CODE ON)
    rail_set_target_options(rail_prometheus)
  else()
    message(STATUS "rail: rail::prometheus is not built (apt-get install -y prometheus-cpp-dev)")
  endif()
endif()
