# Sanitizer and fuzzing build of the C and C++ code (CPU-only builds: nvcc takes none of these flags).
#   FLASHGDN_SANITIZE=address,undefined   every C/C++ object and link gets -fsanitize=<list>; a UBSan report
#                                         aborts the test (-fno-sanitize-recover) instead of scrolling past.
#   FLASHGDN_BUILD_FUZZERS=ON             the libFuzzer targets of tests/fuzz (clang only); the library objects
#                                         get coverage instrumentation (-fsanitize=fuzzer-no-link).
# scripts/sanitize.sh configures, builds and runs both.
set(FLASHGDN_SANITIZE "" CACHE STRING "Comma-separated -fsanitize= list for C/C++ (e.g. address,undefined)")
option(FLASHGDN_BUILD_FUZZERS "Build the libFuzzer targets of tests/fuzz (clang)" OFF)

if(FLASHGDN_SANITIZE)
  set(_fgdn_san -fsanitize=${FLASHGDN_SANITIZE} -fno-sanitize-recover=all -fno-omit-frame-pointer)
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:${_fgdn_san}>")
  add_link_options("$<$<LINK_LANGUAGE:C,CXX>:${_fgdn_san}>")
  message(STATUS "flashgdn: sanitizers ${FLASHGDN_SANITIZE}")
endif()

if(FLASHGDN_BUILD_FUZZERS AND NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "FLASHGDN_BUILD_FUZZERS needs clang (libFuzzer): configure with CXX=clang++ CC=clang")
endif()
