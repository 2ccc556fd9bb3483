# BASP_SANITIZE=address|thread (docs/reliability.md): builds everything (library, tests, tools) with
#   address: AddressSanitizer + UndefinedBehaviorSanitizer, any UB report aborting the process (so the test fails);
#   thread:  ThreadSanitizer.
# C and C++ only: nvcc takes no -fsanitize, so sanitizer builds are configured with BASP_ENABLE_CUDA=OFF
# (scripts/test.sh does). The Python tests load libbasp into an unsanitized interpreter and are not run there.
set(BASP_SANITIZE "" CACHE STRING "Sanitizer build: address (ASan+UBSan) or thread (TSan); empty for none")
set_property(CACHE BASP_SANITIZE PROPERTY STRINGS "" address thread)
# BASP_FUZZ: the libFuzzer build (clang; cmake/BaspFuzz.cmake creates it as a sub-build): ASan + UBSan plus the
# coverage instrumentation libFuzzer steers by, on every object; tests/fuzz holds the targets.
option(BASP_FUZZ "Build the libFuzzer targets (clang only)" OFF)
if(BASP_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "BASP_FUZZ=ON needs clang (CMAKE_CXX_COMPILER=clang++)")
  endif()
  if(NOT BASP_SANITIZE STREQUAL "")
    message(FATAL_ERROR "BASP_FUZZ=ON brings its own sanitizers: leave BASP_SANITIZE empty")
  endif()
  set(BASP_SANITIZE address)
  set(_basp_fuzz_flags -fsanitize=fuzzer-no-link)
endif()

if(BASP_SANITIZE STREQUAL "address")
  set(_basp_sanitize_flags -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
      ${_basp_fuzz_flags})
elseif(BASP_SANITIZE STREQUAL "thread")
  set(_basp_sanitize_flags -fsanitize=thread -fno-omit-frame-pointer)
elseif(NOT BASP_SANITIZE STREQUAL "")
  message(FATAL_ERROR "BASP_SANITIZE (${BASP_SANITIZE}) must be address, thread or empty")
endif()

if(_basp_sanitize_flags)
  if(BASP_HAVE_CUDA)
    message(FATAL_ERROR "BASP_SANITIZE=${BASP_SANITIZE} needs BASP_ENABLE_CUDA=OFF (nvcc has no sanitizers)")
  endif()
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:${_basp_sanitize_flags}>")
  add_link_options(${_basp_sanitize_flags})
  message(STATUS "libbasp: sanitizer build (${BASP_SANITIZE}): ${_basp_sanitize_flags}")
endif()
