# One line per component test; CONCURRENCY marks the ones ThreadSanitizer must run.
rail_add_test(mpmc_ring CONCURRENCY)
rail_add_test(ready_lanes CONCURRENCY)
rail_add_test(producer_lanes CONCURRENCY)
rail_add_test(worker_stash CONCURRENCY)
rail_add_test(event_count CONCURRENCY)
rail_add_test(engine)
rail_add_test(dead_letter_queue)
rail_add_test(payload_kinds)
rail_add_test(orders_scenario)
target_link_libraries(orders_scenario_test PRIVATE rail_orders_scenario)
rail_add_test(backoff)
rail_add_test(options)
rail_add_test(cron)
rail_add_test(dedup_set CONCURRENCY)
rail_add_test(dedup_tie)
rail_add_test(dedup_until_end CONCURRENCY)
rail_add_test(timing_wheel)
rail_add_test(engine_stress CONCURRENCY)
# Replaces the global operator new, which the sanitizer runtimes define themselves.
if(RAIL_SANITIZER STREQUAL "")
  rail_add_test(redrive_failure)
  rail_add_test(allocation)
  # Routes this binary's calls of mimalloc's allocation API through counting wrappers; the list
  # matches the wrappers in allocation_test.cpp.
  # It calls mimalloc's API and forwards every allocation to it: it links the library itself
  # (rail::rail no longer does; allocator_test pins that).
  target_link_libraries(allocation_test PRIVATE rail_deps::mimalloc)
  target_link_options(allocation_test PRIVATE
    "LINKER:--wrap=mi_malloc,--wrap=mi_zalloc,--wrap=mi_calloc,--wrap=mi_realloc"
    "LINKER:--wrap=mi_malloc_aligned,--wrap=mi_zalloc_aligned,--wrap=mi_realloc_aligned")
endif()
rail_add_test(engine_threaded CONCURRENCY)
# The package test installs this build, so only the plain (unsanitized) build runs it.
if(RAIL_INSTALL AND RAIL_SANITIZER STREQUAL "")
  add_test(NAME package.find_package_and_add_subdirectory
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/package/check.sh ${PROJECT_SOURCE_DIR}
                   ${PROJECT_BINARY_DIR} ${CMAKE_CURRENT_BINARY_DIR}/package-scratch)
  set_tests_properties(package.find_package_and_add_subdirectory PROPERTIES LABELS package
                       TIMEOUT 600)
endif()
rail_add_test(lease)
rail_add_test(stall_warning CONCURRENCY)
target_link_libraries(stall_warning_test PRIVATE nlohmann_json::nlohmann_json)
rail_add_test(resumed_job)
rail_add_test(resumed_job_threaded CONCURRENCY)
rail_add_test(retry_here)
rail_add_test(soak CONCURRENCY)
target_link_libraries(soak_test PRIVATE rail_soak)
rail_add_test(lifecycle CONCURRENCY)
rail_add_test(slot_table CONCURRENCY)
rail_add_test(free_slots CONCURRENCY)
rail_add_test(downstream CONCURRENCY)
rail_add_test(downstream_limits CONCURRENCY)
rail_add_test(rate_window CONCURRENCY)
rail_add_test(downstream_gate)
rail_add_test(downstream_order CONCURRENCY)
rail_add_test(asymmetric_fence CONCURRENCY)
rail_add_test(thread_index CONCURRENCY)
rail_add_test(striped_counter CONCURRENCY)
rail_add_test(dlq_journal)
rail_add_test(dlq_journal_crash LABEL crash)
# rail-dlq on the orders demo's journal (issue 12's acceptance check); built by rail_tests.
if(TARGET rail-dlq AND TARGET orders_demo)
  add_test(NAME rail_dlq.lists_the_orders_demo_journal
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/rail_dlq_check.sh $<TARGET_FILE:orders_demo>
                   $<TARGET_FILE:rail-dlq> ${CMAKE_CURRENT_BINARY_DIR}/rail_dlq_scratch)
  set_tests_properties(rail_dlq.lists_the_orders_demo_journal PROPERTIES LABELS unit TIMEOUT 120)
  set_property(GLOBAL APPEND PROPERTY RAIL_TEST_TARGETS rail-dlq orders_demo)
endif()
rail_add_test(dlq_journal_threaded CONCURRENCY)
rail_add_test(time_edges CONCURRENCY)
# A consumer's view of the allocator: links rail::rail and nothing of mimalloc.
rail_add_test(allocator)
target_link_libraries(allocator_test PRIVATE ${CMAKE_DL_LIBS})
rail_add_test(footprint)
rail_add_test(job_names)
# The job flow's cold paths raced through the public API (cold_path_races_main.cpp): one ctest per
# scenario, a few short engines each; run it by hand with more iterations to soak.
add_executable(cold_path_races cold_path_races_main.cpp)
target_link_libraries(cold_path_races PRIVATE rail::rail)
target_include_directories(cold_path_races PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
rail_set_target_options(cold_path_races)
foreach(scenario A B C D E)
  add_test(NAME cold_path_races.${scenario} COMMAND cold_path_races ${scenario} 20)
  set_tests_properties(cold_path_races.${scenario} PROPERTIES LABELS concurrency TIMEOUT 300)
endforeach()
set_property(GLOBAL APPEND PROPERTY RAIL_TEST_TARGETS cold_path_races)
rail_add_test(peer_semantics CONCURRENCY)
rail_add_test(peer_downstream)
rail_add_test(observers CONCURRENCY)
rail_add_test(queue_events CONCURRENCY)
rail_add_test(results CONCURRENCY)
rail_add_test(teardown CONCURRENCY)
rail_add_test(destroy CONCURRENCY)
# rail_add_compile_fail_test(NAME SOURCE TYPE REQUIREMENT [FLAG]): SOURCE must not compile (with
# FLAG), and one diagnostic line must name TYPE and REQUIREMENT; tests/compile_fail/check.sh also
# compiles it with RAIL_CONTROL_CODABLE, the control, which must succeed. No binary: it runs the
# compiler.
function(rail_add_compile_fail_test name source type requirement)
  add_test(NAME compile_fail.${name}
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/compile_fail/check.sh ${CMAKE_CXX_COMPILER}
                   ${PROJECT_SOURCE_DIR}/include ${CMAKE_CURRENT_SOURCE_DIR}/compile_fail/${source}
                   ${type} ${requirement} ${ARGN})
  set_tests_properties(compile_fail.${name} PROPERTIES LABELS unit TIMEOUT 120)
endfunction()
# A DLQ journal of a payload type without a rail::JournalCodec.
rail_add_compile_fail_test(queue_with_dlq_journal_without_codec_names_the_payload_type
                           queue_with_dlq_journal_without_codec.cpp PayloadWithoutCodec
                           JournalCodable)
# A coroutine handler taking rail::AsyncJob<T> by const or rvalue reference (which would dangle
# after its first co_await).
rail_add_compile_fail_test(coroutine_handler_taking_a_reference_is_told_to_take_it_by_value
                           coroutine_handler_taking_a_reference.cpp rail::AsyncJob<T> "by value")
rail_add_compile_fail_test(
  coroutine_handler_taking_an_rvalue_reference_is_told_to_take_it_by_value
  coroutine_handler_taking_a_reference.cpp rail::AsyncJob<T> "by value" "-DRAIL_REFERENCE=&&")
# An ignored AddReceipt (a full queue's add created no job) under -Werror=unused-result.
rail_add_compile_fail_test(ignored_add_result_is_an_error_under_werror_unused_result
                           ignored_add_result.cpp "an add may create no job" nodiscard
                           -Werror=unused-result)
# Outcome::pending() without Job::defer: not expressible (defer returns the pending Outcome).
rail_add_compile_fail_test(pending_outcome_without_defer_does_not_compile
                           pending_without_defer.cpp rail::Outcome pending)
rail_add_test(schedule CONCURRENCY)
rail_add_test(schedule_races CONCURRENCY)
rail_add_test(downstream_wakeup_races CONCURRENCY)
rail_add_test(worker_pool CONCURRENCY)
rail_add_test(thread_group CONCURRENCY)
rail_add_test(worker_pool_races CONCURRENCY)
rail_add_test(completion CONCURRENCY)
rail_add_test(batch CONCURRENCY)
rail_add_test(pending_jobs CONCURRENCY)
rail_add_test(completion_races CONCURRENCY)
rail_add_test(job_downstream_races CONCURRENCY)
rail_add_test(completion_stress CONCURRENCY)
rail_add_test(task CONCURRENCY)
rail_add_test(tsc_time CONCURRENCY)
# The README's C++ blocks, extracted into one program at build time (tests/readme/extract.cpp)
# and run: an example that no longer compiles or no longer does what it says fails the suite.
add_executable(readme_extract readme/extract.cpp)
rail_set_target_options(readme_extract)
add_custom_command(
  OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/readme_examples.cpp
  COMMAND readme_extract ${PROJECT_SOURCE_DIR}/README.md
          ${CMAKE_CURRENT_BINARY_DIR}/readme_examples.cpp
  DEPENDS readme_extract ${PROJECT_SOURCE_DIR}/README.md
  COMMENT "Extracting the README's examples")
add_executable(readme_examples ${CMAKE_CURRENT_BINARY_DIR}/readme_examples.cpp)
target_link_libraries(readme_examples PRIVATE rail::rail)
target_include_directories(readme_examples PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
rail_set_target_options(readme_examples)
add_test(NAME readme.examples_compile_and_run COMMAND readme_examples)
set_tests_properties(readme.examples_compile_and_run PROPERTIES LABELS unit TIMEOUT 120)
set_property(GLOBAL APPEND PROPERTY RAIL_TEST_TARGETS readme_examples)
rail_add_test(explain CONCURRENCY)
rail_add_test(fifo_groups)
rail_add_test(fifo_groups_threaded CONCURRENCY)
rail_add_test(priorities CONCURRENCY)
rail_add_test(fair_shares CONCURRENCY)
rail_add_test(timeout CONCURRENCY)
rail_add_test(expiry CONCURRENCY)
rail_add_test(job_batch CONCURRENCY)
rail_add_test(stop_cells CONCURRENCY)
rail_add_test(log_json)
target_link_libraries(log_json_test PRIVATE nlohmann_json::nlohmann_json)
rail_add_test(flow CONCURRENCY)
rail_add_test(metrics CONCURRENCY)
# The JSON exposition always (nlohmann-json is a test dependency); rail::prometheus's where
# prometheus-cpp is installed (tools/install-deps installs it for CI).
rail_add_test(metrics_exposition)
target_link_libraries(metrics_exposition_test PRIVATE rail::json)
if(TARGET rail::prometheus)
  target_link_libraries(metrics_exposition_test PRIVATE rail::prometheus)
  target_compile_definitions(metrics_exposition_test PRIVATE RAIL_TEST_PROMETHEUS)
endif()
# The example server (tools/server) in a real browser and under a real Prometheus scrape: shell
# checks that start exactly what they stop; 77 (skipped) where chromium or prometheus is absent
# (tools/install-deps installs both for CI).
if(TARGET rail_example_server)
  foreach(check page scrape)
    add_test(NAME example_server.${check}_check
             COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/server/${check}_check.sh
                     $<TARGET_FILE:rail_example_server> ${CMAKE_CURRENT_BINARY_DIR}/server_${check})
    set_tests_properties(example_server.${check}_check PROPERTIES LABELS unit TIMEOUT 300
                                                                 SKIP_RETURN_CODE 77)
  endforeach()
  set_property(GLOBAL APPEND PROPERTY RAIL_TEST_TARGETS rail_example_server)
endif()
rail_add_test(trace_context CONCURRENCY)
target_link_libraries(trace_context_test PRIVATE nlohmann_json::nlohmann_json)
# rail::amqp against a real broker (Debian's rabbitmq-server, started per test on 127.0.0.1 by
# tools/rabbitmq/local-broker; skipped where it is not installed).
# rail_add_broker_test(<component> <library>): a `broker` test linked with <library>, told where
# tools/rabbitmq/local-broker is.
function(rail_add_broker_test component library)
  rail_add_test(${component} LABEL broker)
  target_link_libraries(${component}_test PRIVATE ${library})
  target_compile_definitions(${component}_test PRIVATE RAIL_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
endfunction()
if(RAIL_HAVE_AMQP)
  rail_add_broker_test(amqp_connection rail::amqp)
  rail_add_broker_test(amqp_producer rail::amqp)
  rail_add_broker_test(amqp_consumer rail::amqp)
  rail_add_broker_test(orders_broker rail_orders_broker)
  rail_add_broker_test(amqp_counts rail::amqp)
  rail_add_broker_test(amqp_groups rail::amqp)
  rail_add_broker_test(amqp_schedules rail::amqp)
  rail_add_broker_test(amqp_soak rail_broker_soak)
endif()
