# The component include roots (src/CMakeLists.txt) hold only if no #include walks around them: a path with a ".."
# segment ("transport/../runtime/comm.h" resolves through the links into src/) or an absolute path. Any such
# include under a folder is a configuration error naming the file and the include.
#
# As a module: basp_check_includes(<folder>). As a script (tests/lint/test_layering.sh):
#   cmake -DBASP_CHECK_INCLUDES_DIR=<folder> -P cmake/BaspCheckIncludes.cmake
function(basp_check_includes dir)
  file(GLOB_RECURSE sources ${dir}/*.h ${dir}/*.hpp ${dir}/*.cpp ${dir}/*.cu ${dir}/*.cuh ${dir}/*.c)
  foreach(f IN LISTS sources)
    file(STRINGS ${f} bad REGEX "^[ \t]*#[ \t]*include[ \t]*[\"<]([^\">]*/)?\\.\\.[/\">]|^[ \t]*#[ \t]*include[ \t]*[\"<]/")
    if(bad)
      message(FATAL_ERROR "${f}: an #include with '..' or an absolute path (${bad}) bypasses the component include "
                          "roots (src/CMakeLists.txt): include by component path instead")
    endif()
  endforeach()
endfunction()

if(CMAKE_SCRIPT_MODE_FILE AND DEFINED BASP_CHECK_INCLUDES_DIR)
  basp_check_includes(${BASP_CHECK_INCLUDES_DIR})
endif()
