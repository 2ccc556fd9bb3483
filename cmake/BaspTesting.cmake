# Test helpers shared by tests/, bench/ and python/.
#
# basp_add_mpi_test(<name> <np> <command...>): registers "<name>_np<np>" under mpirun with <np> ranks,
# labelled "mpi". Oversubscription is allowed (CI machines have 2 cores) and running as root is permitted.
set(BASP_MPIEXEC_FLAGS --oversubscribe --bind-to none CACHE STRING "Extra flags for mpirun in tests")
set(BASP_MPI_TEST_ENV "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")

function(basp_add_mpi_test name np)
  add_test(NAME ${name}_np${np}
           COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} ${BASP_MPIEXEC_FLAGS} ${ARGN})
  set_tests_properties(${name}_np${np} PROPERTIES LABELS mpi ENVIRONMENT "${BASP_MPI_TEST_ENV}" TIMEOUT 600
                                                   PROCESSORS ${np})
endfunction()
