#!/usr/bin/env bash
# tools/test.sh — installs what is missing (as root; otherwise prints the apt-get command),
# configures and builds kvsieve, then runs every test suite. Exits non-zero on any failure.
# Extra arguments go to `meson test`, e.g. `tools/test.sh --suite cpu` or a test name.
#
# Sanitizer lane: after a full run (no arguments) it also builds a CPU-only
# -Db_sanitize=address,undefined configuration in build-san/ (KVSIEVE_SAN_BUILD_DIR) and runs the
# CPU suites plus the fuzz corpus replay there (LeakSanitizer on, UBSan fatal). KVSIEVE_SANITIZE=0
# skips it; KVSIEVE_SANITIZE=1 runs it also when arguments select tests (with those arguments).
#
# aarch64 lane: after a full run it also cross-builds the CPU backend for aarch64 in build-arm64/
# (KVSIEVE_ARM_BUILD_DIR; tools/cross/aarch64-linux-gnu.ini) and runs the CPU op suites, the model
# reference tests (generate-cpu, quant-model), backend-table and quant-blocks under qemu-user
# (correctness only: timing under emulation means nothing); every NEON variant is swept there.
# Missing cross tools are installed as root (as the other packages), else the lane is skipped with
# the command to run. KVSIEVE_AARCH64=0 skips it; KVSIEVE_AARCH64=1
# runs it also when arguments select tests (with those arguments).
if [ -z "${BASH_VERSION:-}" ]; then exec bash "$0" "$@"; fi
set -euo pipefail

# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
kvs_setup

kvs_log "models: $(kvs_model_dirs | paste -sd " " -)"
rc=0
t_main=$SECONDS
meson test -C "$KVSIEVE_BUILD_DIR" --print-errorlogs "$@" || rc=$?
kvs_log "main lane: $((SECONDS - t_main)) s"

lane="${KVSIEVE_SANITIZE:-}"
if [[ -z "$lane" ]]; then
  if (($# == 0)); then lane=1; else lane=0; fi
fi
if [[ "$lane" == 1 ]]; then
  san="${KVSIEVE_SAN_BUILD_DIR:-$KVSIEVE_ROOT/build-san}"
  t0=$SECONDS
  kvs_log "sanitizer lane: ASan + UBSan + LSan, CPU backend, in $san"
  # shellcheck disable=SC2054  # the commas belong to the meson option values
  san_args=(-Db_sanitize=address,undefined -Db_lundef=false -Dopencl=disabled -Dvulkan=disabled -Dfuzz=replay
    -Dbuildtype=debugoptimized -Dc_args=-fno-sanitize-recover=all)
  if [[ -f "$san/meson-private/coredata.dat" ]]; then
    meson setup --reconfigure "${san_args[@]}" "$san" "$KVSIEVE_ROOT" >/dev/null || kvs_die "meson setup $san failed"
  else
    meson setup "${san_args[@]}" "$san" "$KVSIEVE_ROOT" >/dev/null || kvs_die "meson setup $san failed"
  fi
  ninja -C "$san" >/dev/null || kvs_die "sanitizer build failed"
  san_sel=("$@")
  # python: ctypes loads the instrumented library into an uninstrumented interpreter (ASan must come first);
  # qemu: the emulated-CPU runs (where qemu-user is installed) check kernel choice per ISA, which the
  # normal lane covers; under ASan they would only add emulation time
  if ((${#san_sel[@]} == 0)); then san_sel=(--suite cpu --suite fuzz --no-suite python --no-suite qemu); fi
  # detect_leaks: LeakSanitizer at every process exit; halt_on_error: any UBSan report fails the test
  # attention-kvq (49 K/V type pairs x 7 CPU variants) sweeps natively; under ASan the automatic variant
  # only (KVS_TEST_SWEEP_SKIP, test_ops.c), which keeps the lane's cost where it was before that suite
  ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}" \
    UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}" \
    KVS_TEST_SWEEP_SKIP="${KVS_TEST_SWEEP_SKIP-attention-kvq}" \
    meson test -C "$san" --print-errorlogs "${san_sel[@]}" || rc=1
  kvs_log "sanitizer lane: $((SECONDS - t0)) s"
fi

arm="${KVSIEVE_AARCH64:-}"
if [[ -z "$arm" ]]; then
  if (($# == 0)); then arm=1; else arm=0; fi
fi
if [[ "$arm" == 1 ]]; then
  t0=$SECONDS
  arm_dir="${KVSIEVE_ARM_BUILD_DIR:-$KVSIEVE_ROOT/build-arm64}"
  # the cross compiler, qemu-user, and the arm64 multiarch libraries the build links (libc6:arm64
  # comes with them; its loader is what the cross file's exe_wrapper runs)
  arm_pkgs=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user check:arm64 libopenblas-dev:arm64
    libjson-c-dev:arm64 libgomp1:arm64)
  mapfile -t arm_missing < <(command -v dpkg-query >/dev/null 2>&1 && kvs_missing_packages "${arm_pkgs[@]}")
  if ((${#arm_missing[@]} > 0)) && [[ "$(id -u)" == 0 && "${KVSIEVE_NO_INSTALL:-0}" != 1 ]]; then
    kvs_log "aarch64 lane: installing ${arm_missing[*]}"
    { dpkg --add-architecture arm64 && apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y \
        --no-install-recommends "${arm_missing[@]}"; } </dev/null >&2 || kvs_log "aarch64 lane: installing failed"
    mapfile -t arm_missing < <(kvs_missing_packages "${arm_pkgs[@]}")
  fi
  if ! command -v dpkg-query >/dev/null 2>&1 || ((${#arm_missing[@]} > 0)) ||
    ! command -v aarch64-linux-gnu-gcc >/dev/null || ! command -v qemu-aarch64 >/dev/null; then
    kvs_log "aarch64 lane: SKIPPED: cross tools missing (${arm_missing[*]:-not a Debian system}); install with:"
    kvs_log "  sudo dpkg --add-architecture arm64 && sudo apt-get update && sudo apt-get install ${arm_pkgs[*]}"
    kvs_log "  (KVSIEVE_AARCH64=0 turns the lane off)"
  else
    kvs_log "aarch64 lane: cross build (CPU backend) in $arm_dir, tests under qemu-user"
    arm_args=(--cross-file "$KVSIEVE_ROOT/tools/cross/aarch64-linux-gnu.ini" -Dopencl=disabled -Dvulkan=disabled
      -Dfuzz=disabled)
    if [[ -f "$arm_dir/meson-private/coredata.dat" ]]; then
      meson setup --reconfigure "${arm_args[@]}" "$arm_dir" "$KVSIEVE_ROOT" >/dev/null || kvs_die "meson setup $arm_dir failed"
    else
      meson setup "${arm_args[@]}" "$arm_dir" "$KVSIEVE_ROOT" >/dev/null || kvs_die "meson setup $arm_dir failed"
    fi
    ninja -C "$arm_dir" >/dev/null || kvs_die "aarch64 cross build failed"
    arm_sel=("$@")
    if ((${#arm_sel[@]} == 0)); then
      # the CPU op suites (ops-SUITE-cpu, each sweeping the NEON variants; not the ops-all-cpu-* thread
      # runs), the model references through the forward (generate-cpu; quant-model: the quantized
      # fixture under every matmul variant), and the block decoders (quant-blocks checks the NEON ones
      # bit-exactly against gguf-py)
      mapfile -t arm_sel < <(meson test -C "$arm_dir" --list 2>/dev/null | awk '{print $NF}' |
        grep -E '^ops-[a-z0-9-]+-cpu$' | grep -v '^ops-all-')
      arm_sel+=(generate-cpu quant-model backend-table quant-blocks)
    fi
    # emulation is ~10-50x slower: the Check per-case and meson per-test timeouts are stretched
    # attention-kvq: the automatic choice only under emulation (NEON attention over block caches; the
    # full 5-variant sweep ran > 15 min under qemu on 2 cores)
    CK_TIMEOUT_MULTIPLIER="${CK_TIMEOUT_MULTIPLIER:-4}" KVS_TEST_SWEEP_SKIP="${KVS_TEST_SWEEP_SKIP-attention-kvq}" \
      meson test -C "$arm_dir" --print-errorlogs --timeout-multiplier 4 "${arm_sel[@]}" || rc=1
  fi
  kvs_log "aarch64 lane: $((SECONDS - t0)) s"
fi
exit $rc
