#!/usr/bin/env bash
# Pack what tests/gpu/run.sh needs for a GPU machine that cannot build weft
# (a bare CUDA image: nvcc, but no libuv, jansson, hiredis or http-parser
# headers, no Vulkan loader): the binaries built here for CUDA_ARCH, the
# shared libraries they load that such an image lacks, the Vulkan loader and
# GL dispatch packages the NVIDIA Vulkan driver needs (Debian's .debs), the
# validation layer, shared/ (models + golden) and DIR/env.sh. There, from the
# checkout's root:
#
#   . DIR/env.sh && tests/gpu/run.sh
#
# env.sh unpacks the .debs into / (ldconfig), links the paths the test
# binaries were built with (the shared/ folder and the build folders, which
# test_golden runs weft from) to DIR's copies where nothing is there, and
# sets LD_LIBRARY_PATH, VK_LAYER_PATH, VK_DRIVER_FILES (the NVIDIA ICD, where
# the driver has one), WEFT_GPU_PREBUILT=1, WEFT_GPU_BUILD and
# WEFT_SHARED_DIR. DIR is 64 MiB or so (the validation layer is a third): a
# transfer limit may want it as a .tar.xz (about 30 MiB).
#
#   tests/gpu/pack.sh [DIR]     (default .gpu; CUDA_ARCH default 90)
# Builds build-gpu and build-gpu-hip here (for the binaries it packs).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
dir=${1:-.gpu}
arch=${CUDA_ARCH:-90}
shared=${WEFT_SHARED_DIR:-$(cd "$root/../shared" && pwd)}
tests="test_backend_ops test_gpu_kernels test_gpu_recurrent test_golden test_arch_golden test_devices test_embed"
vk_tests="test_vulkan_runtime test_vulkan_matmul test_device_exact test_opencl"

build() { # DIR TARGETS CMAKE_ARGS...
    local b=$1 t=$2
    shift 2
    cmake -S "$root" -B "$b" -DCMAKE_BUILD_TYPE=Release -DWEFT_SHARED_DIR="$shared" \
        -DCMAKE_CUDA_ARCHITECTURES="$arch" "$@" >/dev/null
    # shellcheck disable=SC2086  # TARGETS is a list
    cmake --build "$b" -j"$(nproc)" --target $t
}
build build-gpu "weft weft-cuda weft-vulkan weft-opencl $tests $vk_tests" -DWEFT_CUDA=ON -DWEFT_VULKAN=ON \
    -DWEFT_OPENCL=ON -DWEFT_HIP=OFF
build build-gpu-hip "weft weft-hip $tests" -DWEFT_CUDA=OFF -DWEFT_VULKAN=OFF -DWEFT_HIP=OFF -DWEFT_HIP_NVCC=ON

rm -rf "$dir"
mkdir -p "$dir/lib" "$dir/shared"
for b in build-gpu build-gpu-hip; do
    mkdir -p "$dir/$b"
    for f in weft libweft-cuda.so libweft-vulkan.so libweft-opencl.so libweft-hip.so $tests $vk_tests; do
        [ -f "$b/$f" ] && cp "$b/$f" "$dir/$b/"
    done
    strip --strip-debug "$dir/$b"/* 2>/dev/null || true
done
# the libraries they load, less the C runtime every Linux has (and the
# driver's, which the GPU machine brings)
for f in "$dir"/build-gpu*/*; do ldd "$f" 2>/dev/null; done | awk '$3 ~ /^\// {print $3}' | sort -u |
    grep -vE '/(libc|libm|libdl|librt|libpthread|ld-linux[^/]*|libgcc_s|libstdc\+\+|libcuda)\.so' |
    while read -r l; do cp -L "$l" "$dir/lib/"; done
cp -L /usr/lib/x86_64-linux-gnu/libvulkan.so.1 "$dir/lib/"
# the Khronos validation layer (the Vulkan tests turn it on), and the GL
# dispatch libraries the NVIDIA Vulkan driver loads
if [ -f /usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json ]; then
    cp /usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json "$dir/lib/"
    cp -L /usr/lib/x86_64-linux-gnu/libVkLayer_khronos_validation.so "$dir/lib/"
fi
for l in libGLdispatch.so.0 libGLX.so.0; do
    [ -f "/usr/lib/x86_64-linux-gnu/$l" ] && cp -L "/usr/lib/x86_64-linux-gnu/$l" "$dir/lib/"
done
mkdir -p "$dir/shared/models" "$dir/debs"
cp -r "$shared/golden" "$dir/shared/"
cp "$shared"/models/*.gguf "$dir/shared/models/"
(cd "$dir/debs" && apt-get download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2 2>/dev/null) ||
    echo "pack: apt-get download failed: no GL/Vulkan loader packages (CUDA only there)" >&2
cat >"$dir/env.sh" <<EOF
# . $dir/env.sh  (from the checkout's root on the GPU machine; written by tests/gpu/pack.sh)
g=\$PWD/$dir
for f in "\$g"/debs/*.deb; do [ -f "\$f" ] && dpkg -x "\$f" /; done
ldconfig 2>/dev/null
# the paths built into the test binaries -> this folder's copies (nothing is overwritten)
for p in "$shared:\$g/shared" "$root/build-gpu:\$g/build-gpu" "$root/build-gpu-hip:\$g/build-gpu-hip"; do
    if [ -L "\${p%%:*}" ] || [ ! -e "\${p%%:*}" ]; then
        mkdir -p "\$(dirname "\${p%%:*}")" && ln -sfn "\${p#*:}" "\${p%%:*}"
    fi
done
export LD_LIBRARY_PATH=\$g/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH} VK_LAYER_PATH=\$g/lib
icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -f \$icd ] && export VK_DRIVER_FILES=\$icd
# NVIDIA's OpenCL driver, when the machine has it, for the ICD loader packed in lib/
if [ ! -d /etc/OpenCL/vendors ] && ldconfig -p 2>/dev/null | grep -q libnvidia-opencl.so.1; then
    mkdir -p "\$g/icd" && echo libnvidia-opencl.so.1 >"\$g/icd/nvidia.icd" && export OCL_ICD_VENDORS=\$g/icd
fi
export WEFT_GPU_PREBUILT=1 WEFT_GPU_BUILD=\$g/build-gpu WEFT_SHARED_DIR=\$g/shared
EOF
du -sh "$dir"
