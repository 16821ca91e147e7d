# Cross-building weft for 64-bit ARM Linux (AArch64) on a Debian x86-64 host:
#   scripts/install-arm-deps.sh (the cross compilers, qemu-user-static and the arm64
#   libraries through Debian's multiarch), then
#   cmake -S . -B build-arm64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
# or scripts/test-arm.sh, which builds and runs the ARM tests.
# The GPU backends are off (none is cross-built); tests run under qemu-aarch64-static
# (CMAKE_CROSSCOMPILING_EMULATOR, so ctest runs them as on the machine itself).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu /usr/lib/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
set(ENV{PKG_CONFIG_SYSROOT_DIR} "")
# qemu finds the arm64 loader and libraries through QEMU_LD_PREFIX=/ in the environment
# (scripts/test-arm.sh sets it): the multiarch libc6:arm64's loader and libc, which belong
# together. Not /usr/aarch64-linux-gnu: that loader (libc6-arm64-cross) falls back to the
# multiarch libc.so.6, a different glibc build whose internal layout differs, and
# pthread_create then loops forever (every run with a worker thread hung). One word, so that
# a test that runs the built weft itself can put it in front (tests/weft_exec.h)
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64-static)
set(WEFT_VULKAN OFF CACHE STRING "" FORCE)
set(WEFT_OPENCL OFF CACHE STRING "" FORCE)
set(WEFT_CUDA OFF CACHE STRING "" FORCE)
set(WEFT_HIP OFF CACHE STRING "" FORCE)
set(WEFT_HIP_NVCC OFF CACHE STRING "" FORCE)
# Debian's libhttp-parser-dev is not multi-arch (its arm64 package would replace the host's):
# the arm64 runtime library, with the host's header (the same file on every architecture)
if(NOT EXISTS /usr/lib/aarch64-linux-gnu/libhttp_parser.so AND EXISTS /usr/lib/aarch64-linux-gnu/libhttp_parser.so.2.9)
  set(HTTP_PARSER_LIB /usr/lib/aarch64-linux-gnu/libhttp_parser.so.2.9 CACHE FILEPATH "")
endif()
