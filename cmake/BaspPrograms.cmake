# The flags of the programs built beside the library (tests, benchmarks, examples, tools), set here once:
#
# basp_program_flags(<target> [NO_WARNINGS]): the warnings every program is compiled with (-Wall -Wextra -Wpedantic;
# NO_WARNINGS: the compiler's defaults) and, where MPI is on, the MPI C API only (the deprecated C++ bindings left
# out). The kinds of program add theirs on top: basp_bench_flags (bench/), basp_test_flags and basp_test_program
# (cmake/BaspTesting.cmake); the library's own objects have basp_component (src/).
function(basp_program_flags target)
  cmake_parse_arguments(F "NO_WARNINGS" "" "" ${ARGN})
  if(NOT F_NO_WARNINGS)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic>)
  endif()
  if(BASP_HAVE_MPI)
    target_compile_definitions(${target} PRIVATE OMPI_SKIP_MPICXX MPICH_SKIP_MPICXX)
  endif()
endfunction()
