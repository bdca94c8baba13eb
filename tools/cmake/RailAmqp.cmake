# rail::amqp: the RabbitMQ bridge (include/rail/detail/amqp_connection.hpp, src/amqp_*.cpp), built
# when Debian's librabbitmq-dev (rabbitmq-c) is present. The engine never links it: a program
# that does not bridge to a broker builds and runs without librabbitmq.
option(RAIL_BUILD_AMQP "Build rail::amqp where rabbitmq-c (librabbitmq-dev) is installed" ON)
set(RAIL_HAVE_AMQP OFF)
if(RAIL_BUILD_AMQP)
  find_package(PkgConfig QUIET)
  if(PkgConfig_FOUND)
    # 0.11 or later: its zero read timeout still checks the broker's heartbeats (the relay
    # polls with one); Debian 12 ships 0.11.0.
    pkg_check_modules(RABBITMQ_C QUIET IMPORTED_TARGET librabbitmq>=0.11)
  endif()
  if(RABBITMQ_C_FOUND)
    add_library(rail_amqp STATIC src/amqp_connection.cpp src/amqp_headers.cpp src/amqp_leader.cpp
                                 src/amqp_topology.cpp
                                 src/amqp_publisher.cpp src/amqp_relay.cpp
                                 src/amqp_dead_letters.cpp src/amqp_counts.cpp)
    add_library(rail::amqp ALIAS rail_amqp)
    target_link_libraries(rail_amqp PUBLIC rail::rail PRIVATE PkgConfig::RABBITMQ_C)
    set_target_properties(rail_amqp PROPERTIES POSITION_INDEPENDENT_CODE ON)
    rail_set_target_options(rail_amqp)
    set(RAIL_HAVE_AMQP ON)
  else()
    message(STATUS "rail: rail::amqp is not built (needs rabbitmq-c 0.11 or later: "
                   "apt-get install -y librabbitmq-dev)")
  endif()
endif()
