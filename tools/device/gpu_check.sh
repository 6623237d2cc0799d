#!/usr/bin/env bash
# tools/device/gpu_check.sh — run the op suites, the model references and the benchmarks on a real
# GPU machine that has a driver but no package registry (the workplace's lent GPU machine).
#
#   tools/device/gpu_check.sh prepare   # here: build with both GPU backends into build-gpu/ and
#                                       # bundle the shared libraries and model fixtures into .gpu/
#   tools/device/gpu_check.sh run OUT   # there: find the vendor's OpenCL/Vulkan drivers, run tests and
#                                       # benchmarks, write logs and JSON into OUT
# The two folders build-gpu/ and .gpu/ are ignored by git and travel with the working tree.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)"
cd "$root" || exit 1

prepare() {
  set -e
  if [ -d build-gpu ]; then meson setup build-gpu --reconfigure >/dev/null; else meson setup build-gpu -Dopencl=enabled -Dvulkan=enabled -Dbuildtype=release >/dev/null; fi
  ninja -C build-gpu
  rm -rf .gpu && mkdir -p .gpu/lib .gpu/models
  # every non-libc shared library the binaries need (the GPU machine has only the driver)
  for exe in build-gpu/tools/kvsieve build-gpu/tests/test_ops build-gpu/tests/test_generate; do
    ldd "$exe" | awk '/=> \// {print $3}'
  done | sort -u | grep -Ev '/(libc|libm|libpthread|libdl|librt|libstdc\+\+|libgcc_s|libkvsieve|ld-linux[^/]*)\.so' | while read -r lib; do
    cp -L "$lib" .gpu/lib/
  done
  models="${KVSIEVE_MODELS:-$root/../shared/models}"
  cp "$models"/stories260K-f32.v3.gguf "$models"/stories260K-f32.v1.gguf "$models"/stories260K.bin \
     "$models"/tok512.bin "$models"/stories260K-llada-f32.gguf "$models"/*.json .gpu/models/
  cp -r "$models"/stories260K-hf .gpu/models/
  du -sh build-gpu .gpu
}

run() {
  local out="$1"
  mkdir -p "$out"
  export LD_LIBRARY_PATH="$root/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export KVSIEVE_MODELS="$root/.gpu/models"
  # OpenCL: point the ICD loader at the vendor library (no /etc/OpenCL/vendors entry there)
  local ocl
  ocl=$(find /usr/local/nvidia /usr/lib /usr/lib64 -name 'libnvidia-opencl.so.1' 2>/dev/null | head -1)
  mkdir -p /tmp/kvs-icd && echo "${ocl:-libnvidia-opencl.so.1}" > /tmp/kvs-icd/nvidia.icd
  export OCL_ICD_VENDORS=/tmp/kvs-icd
  local vk
  vk=$(find /usr/local/nvidia /usr/share/vulkan /etc/vulkan -name 'nvidia_icd*.json' 2>/dev/null | head -1)
  [ -n "$vk" ] && export VK_DRIVER_FILES="$vk"
  export KVS_VULKAN_VALIDATION=0 CK_DEFAULT_TIMEOUT=300 OMP_WAIT_POLICY=passive
  echo "opencl icd: ${ocl:-none}  vulkan icd: ${vk:-none}"
  nvidia-smi -L 2>&1 | head -2
  build-gpu/tools/kvsieve devices 2>&1 | tee "$out/devices.txt"
  local b s rc summary=""
  for b in opencl vulkan; do
    for s in tensor matmul elementwise embedding rope attention dwt topk rows; do
      timeout 120 build-gpu/tests/test_ops --backend "$b" --suite "$s" > "$out/ops-$s-$b.log" 2>&1
      rc=$?; summary+="ops-$s-$b=$rc "
    done
    timeout 180 build-gpu/tests/test_generate --backend "$b" > "$out/generate-$b.log" 2>&1
    rc=$?; summary+="generate-$b=$rc "
  done
  echo "$summary" | tee "$out/summary.txt"
  for b in opencl vulkan cpu; do
    timeout 150 build-gpu/tools/kvsieve bench ops --backend "$b" > "$out/bench-$b.txt" 2>&1
    tail -n 25 "$out/bench-$b.txt"
  done
  grep -h -E "^[0-9]+%|Checks|FAIL|Error" "$out"/*.log | head -40
}

case "${1:-}" in
  prepare) prepare ;;
  run) run "${2:-/tmp/kvs-gpu-out}" ;;
  *) echo "usage: $0 prepare | run OUT" >&2; exit 2 ;;
esac
