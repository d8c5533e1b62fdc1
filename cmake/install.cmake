# install.cmake — `cmake --install build --prefix P` gives a package that
# find_package(ringgrad) finds: lib/libringgrad.a, include/ringgrad/…, and
# lib/cmake/ringgrad/ringgradConfig.cmake with the target ringgrad::ringgrad.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS ringgrad EXPORT ringgradTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
foreach(dir ${RINGGRAD_MODULE_DIRS})
  # Backend internals (cpu/, cuda/, mpi/ include CUDA or MPI headers) stay out.
  install(DIRECTORY ${CMAKE_SOURCE_DIR}/${dir}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ringgrad/${dir}
          FILES_MATCHING PATTERN "*.h" PATTERN "cpu" EXCLUDE PATTERN "cuda" EXCLUDE
          PATTERN "mpi" EXCLUDE)
endforeach()
install(FILES ${CMAKE_SOURCE_DIR}/ringgrad.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ringgrad)

set(RINGGRAD_CONFIG_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/ringgrad)
install(EXPORT ringgradTargets NAMESPACE ringgrad:: DESTINATION ${RINGGRAD_CONFIG_DIR})
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/ringgradConfig.cmake.in
  ${CMAKE_BINARY_DIR}/ringgradConfig.cmake INSTALL_DESTINATION ${RINGGRAD_CONFIG_DIR})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/ringgradConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/ringgradConfig.cmake ${CMAKE_BINARY_DIR}/ringgradConfigVersion.cmake
        DESTINATION ${RINGGRAD_CONFIG_DIR})
