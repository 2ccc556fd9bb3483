# Test helpers shared by tests/, bench/ and python/.
#
# basp_add_mpi_test(<name> <np> <command...>): registers "<name>_np<np>" under mpirun with <np> ranks,
# labelled "mpi". Oversubscription is allowed (CI machines have 2 cores) and running as root is permitted.
set(BASP_MPIEXEC_FLAGS --oversubscribe --bind-to none CACHE STRING "Extra flags for mpirun in tests")
set(BASP_MPI_TEST_ENV "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")

# basp_test_flags(<target> [WARNINGS]): a test program's flags: those of every program (basp_program_flags,
# cmake/BaspPrograms.cmake) with the compiler's default warnings (with -Wextra GCC flags the fixtures' partly
# initialised aggregates) unless WARNINGS (a test that a public header compiles cleanly), and tests/common (the
# shared checks and fixtures) on its include path.
function(basp_test_flags target)
  cmake_parse_arguments(F "WARNINGS" "" "" ${ARGN})
  if(F_WARNINGS)
    basp_program_flags(${target})
  else()
    basp_program_flags(${target} NO_WARNINGS)
  endif()
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR}/tests/common)
endfunction()

# basp_test_program(<name> [WARNINGS] SOURCES <file>... LINKS <target>...): the test program <name> with
# basp_test_flags.
function(basp_test_program name)
  cmake_parse_arguments(T "WARNINGS" "" "SOURCES;LINKS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LINKS})
  if(T_WARNINGS)
    basp_test_flags(${name} WARNINGS)
  else()
    basp_test_flags(${name})
  endif()
endfunction()

function(basp_add_mpi_test name np)
  add_test(NAME ${name}_np${np}
           COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} ${BASP_MPIEXEC_FLAGS} ${ARGN})
  set_tests_properties(${name}_np${np} PROPERTIES LABELS mpi ENVIRONMENT "${BASP_MPI_TEST_ENV}" TIMEOUT 600
                                                   PROCESSORS ${np})
endfunction()
