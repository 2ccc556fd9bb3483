# Finds NCCL (header + library) for the NCCL backend and defines the imported target basp::nccl.
#
# Looked for, in order: NCCL_ROOT (CMake or environment variable; header and library must both be there, else
# a warning and NCCL_ROOT is ignored), the CUDA toolkit's directories (where the distribution packages and the
# CUDA containers put it), then the system paths. PyTorch's pip wheel ships NCCL as
# site-packages/nvidia/nccl/{include,lib} with only libnccl.so.2 (no libnccl.so link): pass that folder as
# NCCL_ROOT (scripts/device-check.sh and scripts/test.sh do); a wheel build (pip install .) finds it by itself.
#
# Sets BASP_HAVE_NCCL to 1 when both were found; NCCL is optional under BASP_ENABLE_CUDA=AUTO.
set(BASP_HAVE_NCCL 0)
set(_basp_nccl_hints "")
if(CUDAToolkit_FOUND)
  list(APPEND _basp_nccl_hints ${CUDAToolkit_LIBRARY_ROOT} ${CUDAToolkit_TARGET_DIR})
endif()

# A given NCCL_ROOT is searched alone first, so that its header and its library are used together even when
# another NCCL (e.g. the CUDA toolkit's) is installed; NAMES_PER_DIR makes a folder's libnccl.so.2 win over a
# libnccl.so found further down the list.
set(_basp_nccl_root ${NCCL_ROOT} $ENV{NCCL_ROOT})
# A wheel build (scikit-build-core passes the target environment's Python) in an environment with PyTorch's
# nvidia-nccl wheel: that NCCL, the one PyTorch loads, unless NCCL_ROOT says otherwise.
if(NOT _basp_nccl_root AND DEFINED SKBUILD AND Python_EXECUTABLE)
  execute_process(COMMAND ${Python_EXECUTABLE} -c
                          "import importlib.util as u; s = u.find_spec('nvidia.nccl'); print(list(s.submodule_search_locations)[0])"
                  OUTPUT_VARIABLE _basp_wheel_nccl OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _basp_rc ERROR_QUIET)
  if(_basp_rc EQUAL 0 AND EXISTS "${_basp_wheel_nccl}/include/nccl.h")
    message(STATUS "NCCL: PyTorch's nvidia-nccl wheel in ${_basp_wheel_nccl}")
    set(_basp_nccl_root ${_basp_wheel_nccl})
  endif()
endif()
# Found paths are cached: a build folder configured again with another NCCL_ROOT searches again.
if(DEFINED BASP_NCCL_ROOT_SEARCHED AND NOT "${BASP_NCCL_ROOT_SEARCHED}" STREQUAL "${_basp_nccl_root}")
  unset(NCCL_INCLUDE_DIR CACHE)
  unset(NCCL_LIBRARY CACHE)
endif()
set(BASP_NCCL_ROOT_SEARCHED "${_basp_nccl_root}" CACHE INTERNAL "the NCCL_ROOT that NCCL_INCLUDE_DIR/NCCL_LIBRARY come from")
if(_basp_nccl_root)
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_basp_nccl_root} PATH_SUFFIXES include NO_DEFAULT_PATH)
  find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR HINTS ${_basp_nccl_root}
               PATH_SUFFIXES lib lib64 NO_DEFAULT_PATH)
  if(NOT NCCL_INCLUDE_DIR OR NOT NCCL_LIBRARY)
    # Never half from NCCL_ROOT and half from elsewhere: both are searched again, together, without NCCL_ROOT.
    message(WARNING "NCCL_ROOT (${_basp_nccl_root}) lacks include/nccl.h or lib/libnccl.so*: looking for NCCL "
                    "in the CUDA toolkit and the system instead")
    unset(NCCL_INCLUDE_DIR CACHE)
    unset(NCCL_LIBRARY CACHE)
  endif()
endif()
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_basp_nccl_hints} ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR HINTS ${_basp_nccl_hints} ${CUDAToolkit_LIBRARY_DIR}
             PATH_SUFFIXES lib lib64)

if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
  file(STRINGS ${NCCL_INCLUDE_DIR}/nccl.h _basp_nccl_version REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) ")
  string(REGEX REPLACE "[^0-9;]" "" _basp_nccl_version "${_basp_nccl_version}")
  string(REPLACE ";" "." _basp_nccl_version "${_basp_nccl_version}")
  message(STATUS "NCCL ${_basp_nccl_version}: ${NCCL_LIBRARY} (headers ${NCCL_INCLUDE_DIR})")
  if(NOT TARGET basp::nccl)
    add_library(basp::nccl UNKNOWN IMPORTED)
    set_target_properties(basp::nccl PROPERTIES IMPORTED_LOCATION ${NCCL_LIBRARY}
                                                INTERFACE_INCLUDE_DIRECTORIES ${NCCL_INCLUDE_DIR})
  endif()
  set(BASP_HAVE_NCCL 1)
else()
  message(STATUS "NCCL not found (set NCCL_ROOT): the NCCL backend is not built")
endif()
unset(_basp_nccl_hints)
unset(_basp_nccl_root)
