# DLPack, the one dependency of the public C header (<dlpack/dlpack.h>). Defines the interface target
# flashgdn_dlpack (exported as flashgdn::flashgdn_dlpack) that both libraries link publicly, so that the build
# tree, the installed CMake package and the pkg-config file all see the header the library was built against:
#   * a DLPack CMake package (Debian's libdlpack-dev ships dlpack::dlpack): a declared dependency, found again by
#     flashgdnConfig.cmake;
#   * else a dlpack/dlpack.h on the include path, or the copy PyTorch ships as ATen/dlpack.h: that header is
#     installed with flashgdn's (include/flashgdn/deps/dlpack/dlpack.h), so the install stands alone.
# Sets FLASHGDN_DLPACK_PACKAGE (ON when the package was used) and FLASHGDN_DLPACK_PC_CFLAGS (extra pkg-config
# Cflags, relative to ${includedir}).

include(GNUInstallDirs)
add_library(flashgdn_dlpack INTERFACE)
set(FLASHGDN_DLPACK_PACKAGE OFF)
set(FLASHGDN_DLPACK_PC_CFLAGS "")

find_package(dlpack CONFIG QUIET)
if(dlpack_FOUND AND TARGET dlpack::dlpack)
  set(FLASHGDN_DLPACK_PACKAGE ON)
  target_link_libraries(flashgdn_dlpack INTERFACE dlpack::dlpack)
  get_target_property(_fgdn_dlpack_inc dlpack::dlpack INTERFACE_INCLUDE_DIRECTORIES)
  foreach(_d IN LISTS _fgdn_dlpack_inc)
    if(NOT _d IN_LIST CMAKE_C_IMPLICIT_INCLUDE_DIRECTORIES)
      string(APPEND FLASHGDN_DLPACK_PC_CFLAGS " -I${_d}")
    endif()
  endforeach()
  message(STATUS "flashgdn: DLPack from the dlpack CMake package (${dlpack_DIR})")
else()
  find_path(DLPACK_INCLUDE_DIR dlpack/dlpack.h)
  set(_fgdn_dlpack_header "")
  if(DLPACK_INCLUDE_DIR)
    set(_fgdn_dlpack_header "${DLPACK_INCLUDE_DIR}/dlpack/dlpack.h")
    set(_fgdn_dlpack_build_inc "${DLPACK_INCLUDE_DIR}")
  else()
    find_package(Python3 COMPONENTS Interpreter QUIET)
    if(Python3_Interpreter_FOUND)
      execute_process(COMMAND ${Python3_EXECUTABLE} -c
        "import importlib.util,os; s=importlib.util.find_spec('torch'); print(os.path.join(os.path.dirname(s.origin),'include') if s else '')"
        OUTPUT_VARIABLE _torch_inc OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
      if(_torch_inc AND EXISTS "${_torch_inc}/ATen/dlpack.h")
        # PyTorch ships the header as ATen/dlpack.h: copy it under the canonical name.
        set(_fgdn_dlpack_header "${_torch_inc}/ATen/dlpack.h")
        set(_fgdn_dlpack_build_inc "${CMAKE_BINARY_DIR}/dlpack_include")
        configure_file("${_fgdn_dlpack_header}" "${_fgdn_dlpack_build_inc}/dlpack/dlpack.h" COPYONLY)
      endif()
    endif()
  endif()
  if(NOT _fgdn_dlpack_header)
    message(FATAL_ERROR "dlpack/dlpack.h not found: install libdlpack-dev (apt) or set DLPACK_INCLUDE_DIR")
  endif()
  target_include_directories(flashgdn_dlpack INTERFACE $<BUILD_INTERFACE:${_fgdn_dlpack_build_inc}>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/flashgdn/deps>)
  install(FILES "${_fgdn_dlpack_header}" DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/flashgdn/deps/dlpack
    RENAME dlpack.h COMPONENT flashgdn_dev)
  set(FLASHGDN_DLPACK_PC_CFLAGS " -I\${includedir}/flashgdn/deps")
  message(STATUS "flashgdn: DLPack header ${_fgdn_dlpack_header} (installed with flashgdn's headers)")
endif()
