# What the CUDA and HIP modules' CMakeLists share (included by both).

# The host code both backends are built over (not part of weft_core).
set(WEFT_GPU_HOST_SRC ${CMAKE_SOURCE_DIR}/backends/gpu/gpu_common.c ${CMAKE_SOURCE_DIR}/backends/gpu/gpu_encode.c)

# weft_enable_cuda(OPTION LABEL DEFAULT_ARCHS): nvcc for a module built with
# it. Looks on PATH and in /usr/local/cuda/bin; without nvcc, a fatal error
# when ${OPTION} is ON, else a status line and a return from the calling
# file. CMAKE_CUDA_ARCHITECTURES defaults to DEFAULT_ARCHS (set before any
# CUDA target). A macro: enable_language and return() act in the calling
# directory's scope.
macro(weft_enable_cuda option label default_archs)
  include(CheckLanguage)
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(ENV{CUDACXX} /usr/local/cuda/bin/nvcc)   # the usual place when it is not on PATH
  endif()
  check_language(CUDA)
  if(NOT CMAKE_CUDA_COMPILER)
    if(${option} STREQUAL "ON")
      message(FATAL_ERROR "${option}=ON but no CUDA compiler (nvcc) was found; set CUDACXX")
    endif()
    message(STATUS "${label}: skipped (no nvcc found; ${option}=AUTO)")
    return()
  endif()
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES OR CMAKE_CUDA_ARCHITECTURES STREQUAL "")
    set(CMAKE_CUDA_ARCHITECTURES "${default_archs}" CACHE STRING "CUDA architectures to build for" FORCE)
  endif()
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
endmacro()

# weft_cuda_module(TARGET): what every nvcc-built module takes: C++17,
# cudart linked statically (the module needs only the driver at run time),
# hidden symbols, and no fma contraction (dequantization must round exactly
# as base/quant.c; kernels spell out each fused multiply-add they want, as
# the CPU backend does).
function(weft_cuda_module target)
  set_target_properties(${target} PROPERTIES CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON
                        CUDA_RUNTIME_LIBRARY Static)
  target_compile_options(${target} PRIVATE
    "$<$<COMPILE_LANGUAGE:CUDA>:--fmad=false;-O3;-Xcompiler=-fvisibility=hidden>")
  target_link_libraries(${target} PRIVATE CUDA::cudart_static m)
endfunction()
