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
  for exe in build-gpu/tools/kvsieve build-gpu/tests/test_*; do
    [ -x "$exe" ] && [ -f "$exe" ] || continue
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
  if [ -z "$vk" ]; then # no manifest shipped: write one for the driver's Vulkan library
    local vklib
    vklib=$(find /usr/local/nvidia /usr/lib /usr/lib64 -name 'libGLX_nvidia.so.0' 2>/dev/null | head -1)
    if [ -n "$vklib" ]; then
      vk=/tmp/kvs-icd/nvidia_icd.json
      printf '{"file_format_version":"1.0.0","ICD":{"library_path":"%s","api_version":"1.3.0"}}\n' "$vklib" > "$vk"
    fi
  fi
  [ -n "$vk" ] && export VK_DRIVER_FILES="$vk" VK_ICD_FILENAMES="$vk"
  export KVS_VULKAN_VALIDATION=0 CK_DEFAULT_TIMEOUT=300 OMP_WAIT_POLICY=passive
  echo "opencl icd: ${ocl:-none}  vulkan icd: ${vk:-none}"
  nvidia-smi -L 2>&1 | head -2
  build-gpu/tools/kvsieve devices 2>&1 | tee "$out/devices.txt"
  # one time budget for everything (the lent machine's time is scarce): essentials first
  local budget="${KVS_GPU_BUDGET:-420}" b s rc summary=""
  left() { echo $(( budget - SECONDS )); }
  step() { # step NAME LIMIT CMD... : run if time is left, record the exit status
    local name="$1" lim="$2"; shift 2
    if [ "$(left)" -lt 20 ]; then summary+="$name=skipped "; return; fi
    [ "$lim" -gt "$(left)" ] && lim=$(left)
    timeout "$lim" "$@" > "$out/$name.log" 2>&1; rc=$?
    summary+="$name=$rc "; echo "$name=$rc ($SECONDS s)"
  }
  for b in ${KVS_GPU_BACKENDS:-opencl vulkan}; do
    for s in tensor matmul elementwise embedding rope attention dwt topk rows; do
      step "ops-$s-$b" 90 build-gpu/tests/test_ops --backend "$b" --suite "$s"
    done
    step "generate-$b" 120 build-gpu/tests/test_generate --backend "$b"
  done
  for b in ${KVS_GPU_BACKENDS:-opencl vulkan}; do step "bench-$b" 100 build-gpu/tools/kvsieve bench ops --backend "$b"; done
  for b in ${KVS_GPU_BACKENDS:-opencl vulkan}; do
    for t in dlm_cache eviction learned_latent policy; do
      step "${t}-$b" 150 build-gpu/tests/test_$t --backend "$b"
    done
  done
  echo "$summary" | tee "$out/summary.txt"
  for b in ${KVS_GPU_BACKENDS:-opencl vulkan}; do [ -f "$out/bench-$b.log" ] && tail -n 25 "$out/bench-$b.log"; done
  grep -h -E "^[0-9]+%|Checks|FAIL|Error" "$out"/*.log | head -40
  # one archive: the lent machine's result transfer takes few files
  (cd "$out" && tar czf logs.tgz ./*.log ./*.txt && rm -f ./*.log)
}

case "${1:-}" in
  prepare) prepare ;;
  run) run "${2:-/tmp/kvs-gpu-out}" ;;
  *) echo "usage: $0 prepare | run OUT" >&2; exit 2 ;;
esac
