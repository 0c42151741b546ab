# ctest package_install_consumers: install the build into a staging prefix, move the prefix (the package must
# be relocatable), then configure, build and run the consumer project (tests/install/CMakeLists.txt) against
# it with find_package and with pkg-config, and run the installed CLI. Inputs (-D): BUILD_DIR, SOURCE_DIR,
# WORK_DIR, GENERATOR, C_COMPILER, CXX_COMPILER, CHECK_CLI, CONSUMER_ARGS (extra -D for the consumer).
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " cmd "${ARGN}")
    message(FATAL_ERROR "`${cmd}` failed (${rc}):\n${out}")
  endif()
  set(run_out "${out}" PARENT_SCOPE)
endfunction()

set(stage ${WORK_DIR}/stage)
set(prefix ${WORK_DIR}/prefix)
file(REMOVE_RECURSE ${WORK_DIR})
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${stage})
file(RENAME ${stage} ${prefix})

file(GLOB_RECURSE _pc ${prefix}/*/flashgdn.pc)
list(GET _pc 0 _pc)
get_filename_component(pcdir ${_pc} DIRECTORY)
set(expected include/flashgdn/flashgdn.h include/flashgdn/flashgdn.hpp)
if(CHECK_CLI)
  list(APPEND expected bin/flashgdn)
endif()
foreach(f IN LISTS expected)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "not installed: ${f}")
  endif()
endforeach()

foreach(mode cmake pkgconfig)
  set(bin ${WORK_DIR}/consumer-${mode})
  run(${CMAKE_COMMAND} -E env PKG_CONFIG_PATH=${pcdir}
    ${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/install -B ${bin} -G ${GENERATOR}
    -DCMAKE_C_COMPILER=${C_COMPILER} -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_BUILD_TYPE=Release
    -DFLASHGDN_CONSUME=${mode} -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF ${CONSUMER_ARGS})
  message(STATUS "${mode}: configured\n${run_out}")
  run(${CMAKE_COMMAND} --build ${bin})
  foreach(exe consumer_c_shared consumer_c_static consumer_cpp_shared consumer_cpp_static)
    run(${bin}/${exe})
    if(NOT run_out MATCHES "expected error")
      message(FATAL_ERROR "${mode}/${exe}: unexpected output:\n${run_out}")
    endif()
    message(STATUS "${mode}/${exe}: ${run_out}")
  endforeach()
endforeach()

if(CHECK_CLI)
  run(${prefix}/bin/flashgdn version)
  message(STATUS "installed CLI: ${run_out}")
endif()
