# reel_layer(<target> <sources>...): one layer of reel as its own static library, with the
# project's include root, warnings and code-generation flags. Which layer may include and link which
# is one list, cmake/layers.txt, read here into
#   REEL_LAYERS                 the layers' folders, bottom to top (core kernels autograd ...)
#   REEL_LAYER_ALLOWED_<folder> the layers that one may include and link, besides itself
# reel_layer() refuses a library that is not reel_<a folder listed there>; cmake/layering.cmake
# checks each layer's links against its line and, at build time, that no layer calls upward.
set(REEL_LAYERS_FILE ${CMAKE_CURRENT_LIST_DIR}/layers.txt)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${REEL_LAYERS_FILE})
file(STRINGS ${REEL_LAYERS_FILE} reel_layer_lines REGEX "^[a-z]")
set(REEL_LAYERS "")
foreach(line ${reel_layer_lines})
  string(REGEX REPLACE "[ \t]+" ";" fields "${line}")
  list(POP_FRONT fields folder)
  list(APPEND REEL_LAYERS ${folder})
  set(REEL_LAYER_ALLOWED_${folder} ${fields})
endforeach()

function(reel_layer target)
  string(REGEX REPLACE "^reel_" "" folder ${target})
  if(NOT folder IN_LIST REEL_LAYERS)
    message(FATAL_ERROR "reel_layer(${target}): '${folder}' is not a layer of cmake/layers.txt; add its line there")
  endif()
  add_library(${target} STATIC ${ARGN})
  add_library(reel::${target} ALIAS ${target})
  target_include_directories(${target} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/reel>)
  target_link_libraries(${target} PRIVATE $<BUILD_INTERFACE:reel_warnings>)
  if(REEL_NATIVE)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-march=native>)
  endif()
  # clang reports an `omp simd` loop it could not vectorise (-Wpass-failed) as a warning: a missed
  # optimisation hint, not a fault in the code, so it must not fail the build.
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wno-pass-failed>)
  endif()
  # GCC 12 reports false "may be used uninitialized" inside its own AVX-512 intrinsics when Eigen's
  # GEMM kernels are inlined with -march=native; the warning is about system headers, not our code.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wno-maybe-uninitialized>)
    # Where Eigen's AVX-512 exp/min inline deep enough (under sanitizers, or into a kernel's loop
    # body through kernels/cpu/parallel.h's lambdas) it goes further and reports a definite
    # "'__Y' is used uninitialized": the self-initialised variable of its _mm512_undefined_*.
    if(REEL_NATIVE)
      target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wno-uninitialized>)
    endif()
  endif()
endfunction()
