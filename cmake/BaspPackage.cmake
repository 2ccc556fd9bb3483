# Installation: the shared library, the public headers, a CMake package (find_package(basp) -> basp::basp)
# and a pkg-config file.
include(CMakePackageConfigHelpers)

set(BASP_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/basp CACHE STRING "Where the CMake package files go")

install(TARGETS basp EXPORT baspTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES include/basp/basp.h include/basp/basp.hpp ${PROJECT_BINARY_DIR}/include/basp/config.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/basp)
install(EXPORT baspTargets NAMESPACE basp:: DESTINATION ${BASP_INSTALL_CMAKEDIR})

configure_package_config_file(cmake/baspConfig.cmake.in ${PROJECT_BINARY_DIR}/baspConfig.cmake
                              INSTALL_DESTINATION ${BASP_INSTALL_CMAKEDIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/baspConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/baspConfig.cmake ${PROJECT_BINARY_DIR}/baspConfigVersion.cmake
        DESTINATION ${BASP_INSTALL_CMAKEDIR})

# pkg-config: relocatable, the prefix is found from where the .pc file lies (cmake --install --prefix works).
file(RELATIVE_PATH BASP_PC_TO_PREFIX "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
string(REGEX REPLACE "/$" "" BASP_PC_TO_PREFIX "${BASP_PC_TO_PREFIX}")
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(BASP_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
else()
  set(BASP_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(BASP_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
else()
  set(BASP_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
configure_file(cmake/basp.pc.in ${PROJECT_BINARY_DIR}/basp.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/basp.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
