# How kernels/cuda/*.cu become part of a target in either build flavour.
#   REEL_CUDA=ON : nvcc compiles them for CMAKE_CUDA_ARCHITECTURES; cudart/cuBLAS/cuDNN and, where
#                  found, CUPTI (with kernels/cuda/cupti_log.cu, its only user) are linked.
#   REEL_CUDA=OFF: g++ compiles the same files as C++ against kernels/simt (the CPU emulator),
#                  whose runtime sources are compiled into the target too.

# SIMT_CHECK=race,uninit (kernels/simt/README.md): in the emulated build every load and store of a
# .cu file calls the checker (-fsanitize=thread's instrumentation, served by kernels/simt/
# simt_check.cpp instead of the ThreadSanitizer runtime; -g1 line tables name the source lines).
# Not with ASan or TSan, whose runtimes cannot share the process with it.
if(REEL_SANITIZE MATCHES "address|thread|memory")
  set(reel_simt_check_default OFF)
else()
  set(reel_simt_check_default ON)
endif()
option(REEL_SIMT_RACECHECK "Emulated build: instrument .cu files for SIMT_CHECK=race,uninit" ${reel_simt_check_default})
set(reel_cu_options "-xc++;-Wno-unknown-pragmas")  # g++ ignores #pragma unroll
if(REEL_SIMT_RACECHECK AND REEL_EMULATE_CUDA AND NOT REEL_CUDA)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    list(APPEND reel_cu_options -fsanitize=thread --param=tsan-instrument-func-entry-exit=0 -g1)
  else()
    list(APPEND reel_cu_options -fsanitize=thread -gline-tables-only)
  endif()
  # Reports name files relative to the source tree ("kernels/cuda/softmax.cu:88"), the same in every
  # checkout: so an object compiled in another clone and served by ccache names this one's files.
  list(APPEND reel_cu_options "-fdebug-prefix-map=${PROJECT_SOURCE_DIR}/=")
endif()

option(REEL_CUPTI "nvcc flavour: the profiler times CUDA kernels by CUPTI where libcupti is found (OFF: cudaEvent pairs)" ON)

# reel_cuda_sources(<target> <file.cu>...): add CUDA sources to a target in this flavour.
function(reel_cuda_sources target)
  target_sources(${target} PRIVATE ${ARGN})
  if(NOT REEL_CUDA)
    set_source_files_properties(${ARGN} TARGET_DIRECTORY ${target}
      PROPERTIES LANGUAGE CXX COMPILE_OPTIONS "${reel_cu_options}")
  endif()
endfunction()

# reel_link_cuda_backend(<target>): the runtime the CUDA backend needs in this flavour.
function(reel_link_cuda_backend target)
  if(REEL_CUDA)
    target_compile_definitions(${target} PUBLIC REEL_CUDA_NVCC=1)
    target_link_libraries(${target} PUBLIC CUDA::cudart CUDA::cublas CUDA::cublasLt)
    find_library(REEL_CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR})
    find_path(REEL_CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
    if(REEL_CUDNN_LIBRARY AND REEL_CUDNN_INCLUDE_DIR)
      message(STATUS "reel: cuDNN found: ${REEL_CUDNN_LIBRARY}")
      target_include_directories(${target} PUBLIC ${REEL_CUDNN_INCLUDE_DIR})
      target_link_libraries(${target} PUBLIC ${REEL_CUDNN_LIBRARY})
      target_compile_definitions(${target} PUBLIC REEL_HAVE_CUDNN=1)
    else()
      message(STATUS "reel: cuDNN not found; ops that need it raise reel::Error")
    endif()
    # CUPTI (the toolkit's lib64, or extras/CUPTI in older layouts): the profiler's kernel times
    # from activity records (kernels/cuda/cupti_log.cu). Absent, cudaEvent pairs time the kernels
    # and the profile table says so.
    if(REEL_CUPTI)
      find_library(REEL_CUPTI_LIBRARY cupti
        HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/extras/CUPTI/lib64
              ${CUDAToolkit_TARGET_DIR}/extras/CUPTI/lib64)
      find_path(REEL_CUPTI_INCLUDE_DIR cupti.h
        HINTS ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_ROOT}/extras/CUPTI/include
              ${CUDAToolkit_TARGET_DIR}/extras/CUPTI/include)
    endif()
    if(NOT REEL_CUPTI)
      message(STATUS "reel: CUPTI off (REEL_CUPTI=OFF); the profiler times CUDA kernels by cudaEvent pairs")
    elseif(REEL_CUPTI_LIBRARY AND REEL_CUPTI_INCLUDE_DIR)
      message(STATUS "reel: CUPTI found: ${REEL_CUPTI_LIBRARY}; the profiler times CUDA kernels by its activity records")
      target_sources(${target} PRIVATE ${PROJECT_SOURCE_DIR}/kernels/cuda/cupti_log.cu)
      target_include_directories(${target} PRIVATE ${REEL_CUPTI_INCLUDE_DIR})
      target_link_libraries(${target} PUBLIC ${REEL_CUPTI_LIBRARY})
      set_property(SOURCE ${PROJECT_SOURCE_DIR}/kernels/cuda/backend.cu TARGET_DIRECTORY ${target}
        APPEND PROPERTY COMPILE_DEFINITIONS REEL_CUPTI=1)
    else()
      message(STATUS "reel: CUPTI not found; the profiler times CUDA kernels by cudaEvent pairs")
    endif()
    set_target_properties(${target} PROPERTIES CUDA_SEPARABLE_COMPILATION OFF)
  else()
    file(GLOB simt_sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/kernels/simt/*.cpp)
    if(simt_sources AND REEL_EMULATE_CUDA)
      find_package(Boost 1.74 REQUIRED COMPONENTS context)
      target_sources(${target} PRIVATE ${simt_sources})
      if(REEL_SIMT_RACECHECK)  # the checker defines the instrumentation's entry points
        set_source_files_properties(${PROJECT_SOURCE_DIR}/kernels/simt/simt_check.cpp TARGET_DIRECTORY ${target}
          PROPERTIES COMPILE_DEFINITIONS SIMT_CHECK_INSTRUMENTED=1)
      endif()
      target_compile_definitions(${target} PUBLIC SIMT_EMULATE=1 REEL_CUDA_EMULATED=1)
      target_link_libraries(${target} PUBLIC Boost::context)
    endif()
  endif()
endfunction()
