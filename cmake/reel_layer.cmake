# reel_layer(<target> <sources>...): one layer of reel as its own static library, with the
# project's include root, warnings and code-generation flags. The layers link in order
#   reel_core <- reel_kernels <- reel_autograd <- reel_nn, reel_optim <- reel_dist
# (each links only the ones below it), so a call from a layer up into a higher one cannot link:
# cmake/layering.cmake checks that at build time.
function(reel_layer target)
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
