# Install rules and the consumer-facing package of flashgdn:
#   <prefix>/include/flashgdn/            the public headers (+ deps/dlpack when DLPack was not a package)
#   <prefix>/lib/libflashgdn.so*, libflashgdn_static.a
#   <prefix>/lib/cmake/flashgdn/          flashgdnConfig.cmake, version file, exported targets (relocatable)
#   <prefix>/lib/pkgconfig/               flashgdn.pc (shared), flashgdn_static.pc (static, `--static` for its deps)
#   <prefix>/bin/flashgdn                 the CLI (when built)
# Components: flashgdn_runtime (shared library), flashgdn_dev (the rest), flashgdn_cli; pip installs only
# "python", so none of this lands in the wheel.
include(CMakePackageConfigHelpers)

set(FLASHGDN_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/flashgdn)

install(TARGETS flashgdn flashgdn_static flashgdn_dlpack EXPORT flashgdnTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT flashgdn_runtime NAMELINK_COMPONENT flashgdn_dev
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT flashgdn_dev)
install(DIRECTORY include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT flashgdn_dev)
install(EXPORT flashgdnTargets NAMESPACE flashgdn:: DESTINATION ${FLASHGDN_CMAKE_DIR} COMPONENT flashgdn_dev)
configure_package_config_file(cmake/flashgdnConfig.cmake.in ${CMAKE_CURRENT_BINARY_DIR}/flashgdnConfig.cmake
  INSTALL_DESTINATION ${FLASHGDN_CMAKE_DIR})
# 0.x: a minor version may change the API, so a request for 0.1 accepts 0.1.* only.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/flashgdnConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/flashgdnConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/flashgdnConfigVersion.cmake
  DESTINATION ${FLASHGDN_CMAKE_DIR} COMPONENT flashgdn_dev)

# ---- pkg-config: prefix relative to the .pc file's directory, so the install can move -------------------
file(RELATIVE_PATH FLASHGDN_PC_PREFIX_FROM_PCDIR "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
string(REGEX REPLACE "/$" "" FLASHGDN_PC_PREFIX_FROM_PCDIR "${FLASHGDN_PC_PREFIX_FROM_PCDIR}")
if(FLASHGDN_CUDA)
  set(FLASHGDN_CUDA_01 1)
else()
  set(FLASHGDN_CUDA_01 0)
endif()
# What a program linking libflashgdn_static.a needs besides it: the C++ runtime (the library is C++), threads
# (the CPU backend's pool) and, in CUDA builds, the static CUDA runtime with its own dl and rt dependencies.
set(_fgdn_static_deps "-lstdc++ -lm -lpthread")
if(FLASHGDN_CUDA)
  set(_fgdn_static_deps "-L${CUDAToolkit_LIBRARY_DIR} -lcudart_static -ldl -lrt ${_fgdn_static_deps}")
endif()
foreach(kind shared static)
  if(kind STREQUAL "shared")
    set(FLASHGDN_PC_NAME flashgdn)
    set(FLASHGDN_PC_LIB flashgdn)
    set(FLASHGDN_PC_KIND "shared library")
    set(FLASHGDN_PC_LIBS_PRIVATE "")
  else()
    set(FLASHGDN_PC_NAME flashgdn_static)
    set(FLASHGDN_PC_LIB flashgdn_static)
    set(FLASHGDN_PC_KIND "static library (link with pkg-config --static)")
    set(FLASHGDN_PC_LIBS_PRIVATE "${_fgdn_static_deps}")
  endif()
  configure_file(cmake/flashgdn.pc.in ${CMAKE_CURRENT_BINARY_DIR}/pkgconfig/${FLASHGDN_PC_NAME}.pc @ONLY)
  install(FILES ${CMAKE_CURRENT_BINARY_DIR}/pkgconfig/${FLASHGDN_PC_NAME}.pc
    DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT flashgdn_dev)
endforeach()

if(FLASHGDN_BUILD_CLI)
  install(TARGETS flashgdn_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT flashgdn_cli)
endif()

# ---- tests: the shared library's exports, and a consumer project built against an installed copy ---------
if(FLASHGDN_BUILD_TESTS)
  add_test(NAME package_exports COMMAND ${CMAKE_COMMAND} -DLIB=$<TARGET_FILE:flashgdn> -DNM=${CMAKE_NM}
    -DHEADER=${CMAKE_CURRENT_SOURCE_DIR}/include/flashgdn/flashgdn.h
    -P ${CMAKE_CURRENT_SOURCE_DIR}/cmake/check_exports.cmake)
  if(FLASHGDN_BUILD_CLI)
    set(_fgdn_cli_check ON)
  else()
    set(_fgdn_cli_check OFF)
  endif()
  # The consumer finds the CUDA toolkit this build used (flashgdnConfig.cmake looks for it in CUDA builds).
  set(_fgdn_consumer_args "")
  if(FLASHGDN_CUDA)
    get_filename_component(_fgdn_cuda_root "${CUDAToolkit_BIN_DIR}" DIRECTORY)
    set(_fgdn_consumer_args "-DCUDAToolkit_ROOT=${_fgdn_cuda_root}")
  endif()
  add_test(NAME package_install_consumers COMMAND ${CMAKE_COMMAND}
    -DBUILD_DIR=${CMAKE_BINARY_DIR} -DSOURCE_DIR=${CMAKE_CURRENT_SOURCE_DIR}
    -DWORK_DIR=${CMAKE_BINARY_DIR}/install-test -DGENERATOR=${CMAKE_GENERATOR}
    -DC_COMPILER=${CMAKE_C_COMPILER} -DCXX_COMPILER=${CMAKE_CXX_COMPILER}
    -DCHECK_CLI=${_fgdn_cli_check} "-DCONSUMER_ARGS=${_fgdn_consumer_args}"
    -P ${CMAKE_CURRENT_SOURCE_DIR}/tests/install/run.cmake)
  set_tests_properties(package_install_consumers PROPERTIES TIMEOUT 900)
endif()
