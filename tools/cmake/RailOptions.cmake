# Warnings and sanitizers, applied to every target rail builds (never forced on a parent project).
# Sanitizer builds keep line tables only (-gline-tables-only, after the preset's -g): their
# reports still name file and line, and CI compiles about 10% faster (issue 14's tests had taken
# CI to 28 of its 30 minutes).
function(rail_set_target_options target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic)
  if(NOT RAIL_SANITIZER STREQUAL "" AND CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    target_compile_options(${target} PRIVATE -gline-tables-only)
  endif()
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
