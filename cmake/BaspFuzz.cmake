# Fuzz tests in the ordinary build (docs/reliability.md). libFuzzer needs clang, while the build may use GCC, so
# the fuzzers live in a sub-build of this same source tree, configured with clang and BASP_FUZZ=ON under
# <build>/fuzz and built with the main build. CTest then runs a short campaign of each target (label fuzz) after
# replaying its regression corpus (tests/fuzz/regressions/<target>/: every crash ever found).
#
# Registered only when clang links -fsanitize=fuzzer here (Debian: clang + libclang-rt-14-dev); otherwise a
# configure message says so and no fuzz test exists (none is reported as passed).
set(BASP_FUZZ_CLANG "" CACHE FILEPATH "clang++ for the fuzz targets (default: clang++ on PATH)")
set(BASP_FUZZ_RUNS 20000 CACHE STRING "Executions per fuzz target in the CTest run")

function(basp_add_fuzz_tests)
  if(BASP_FUZZ OR BASP_SANITIZE OR BASP_GPU_CHECKS_ONLY)
    return()  # already a fuzz or sanitizer build: no nested one
  endif()
  set(clangxx "${BASP_FUZZ_CLANG}")
  if(NOT clangxx)
    find_program(BASP_FUZZ_CLANGXX NAMES clang++ clang++-16 clang++-15 clang++-14)
    set(clangxx "${BASP_FUZZ_CLANGXX}")
  endif()
  if(NOT clangxx)
    message(STATUS "Fuzz tests: not registered (no clang++; apt-get install clang libclang-rt-14-dev)")
    return()
  endif()
  get_filename_component(clang_dir "${clangxx}" DIRECTORY)
  get_filename_component(clang_name "${clangxx}" NAME)
  string(REPLACE "clang++" "clang" clang_c_name "${clang_name}")
  set(clangc "${clang_dir}/${clang_c_name}")
  set(probe_dir "${PROJECT_BINARY_DIR}/fuzz-probe")
  file(MAKE_DIRECTORY "${probe_dir}")
  file(WRITE "${probe_dir}/probe.cpp"
       "#include <cstddef>\n#include <cstdint>\nextern \"C\" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n")
  execute_process(COMMAND "${clangxx}" -fsanitize=fuzzer,address,undefined probe.cpp -o probe
                  WORKING_DIRECTORY "${probe_dir}" RESULT_VARIABLE probe_rc OUTPUT_QUIET ERROR_QUIET)
  if(NOT probe_rc EQUAL 0)
    message(STATUS "Fuzz tests: not registered (${clangxx} cannot link -fsanitize=fuzzer; apt-get install libclang-rt-14-dev)")
    return()
  endif()
  message(STATUS "Fuzz tests: ${clangxx}, ${BASP_FUZZ_RUNS} runs per target (label fuzz)")

  include(ExternalProject)
  set(fuzz_dir "${PROJECT_BINARY_DIR}/fuzz")
  set(generator_args)
  if(CMAKE_GENERATOR MATCHES "Ninja")
    set(generator_args -G Ninja)
  endif()
  ExternalProject_Add(basp_fuzz_build
    SOURCE_DIR "${PROJECT_SOURCE_DIR}"
    BINARY_DIR "${fuzz_dir}"
    CMAKE_ARGS ${generator_args} -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=${clangxx}
               -DCMAKE_C_COMPILER=${clangc} -DBASP_FUZZ=ON -DBASP_ENABLE_CUDA=OFF -DBASP_BUILD_TESTS=OFF
               -DBASP_BUILD_BENCH=OFF -DBASP_BUILD_EXAMPLES=OFF
    BUILD_COMMAND ${CMAKE_COMMAND} --build "${fuzz_dir}" --target basp_fuzzers
    INSTALL_COMMAND ""
    BUILD_ALWAYS ON
    USES_TERMINAL_BUILD ON)

  set(targets fuzz_topo_import fuzz_perf_args fuzz_cost_model)
  if(BASP_HAVE_MPI)
    list(APPEND targets fuzz_capi_structs)
  endif()
  foreach(target ${targets})
    add_test(NAME ${target}
             COMMAND ${PROJECT_SOURCE_DIR}/tests/fuzz/run_fuzz.sh "${fuzz_dir}/tests/fuzz/${target}"
                     ${PROJECT_SOURCE_DIR}/tests/fuzz ${BASP_FUZZ_RUNS})
    set_tests_properties(${target} PROPERTIES LABELS fuzz TIMEOUT 600
                         ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
  endforeach()
endfunction()
