include(CMakePackageConfigHelpers)
install(TARGETS rail EXPORT railTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY include/rail DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT railTargets NAMESPACE rail:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/rail)
configure_package_config_file(tools/cmake/railConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/railConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/rail)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/railConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/railConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/railConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/rail)
# The DLQ journal inspector, when the tools are built (RAIL_BUILD_TOOLS).
if(TARGET rail-dlq)
  install(TARGETS rail-dlq RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
