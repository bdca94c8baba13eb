# Warnings and sanitizers, applied to every target rail builds (never forced on a parent project).
function(rail_set_target_options target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic)
  if(RAIL_SANITIZER STREQUAL "address")
    target_compile_options(${target} PRIVATE -fsanitize=address,undefined -fno-omit-frame-pointer
                                             -fno-sanitize-recover=undefined)
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
  elseif(RAIL_SANITIZER STREQUAL "thread")
    target_compile_options(${target} PRIVATE -fsanitize=thread -fno-omit-frame-pointer)
    target_link_options(${target} PRIVATE -fsanitize=thread)
  elseif(NOT RAIL_SANITIZER STREQUAL "")
    message(FATAL_ERROR "rail: RAIL_SANITIZER='${RAIL_SANITIZER}'; expected address, thread or empty")
  endif()
endfunction()
