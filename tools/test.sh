#!/usr/bin/env bash
# tools/test.sh — installs what is missing (as root; otherwise prints the apt-get command),
# configures and builds kvsieve, then runs every test suite. Exits non-zero on any failure.
# Extra arguments go to `meson test`, e.g. `tools/test.sh --suite cpu` or a test name.
#
# Sanitizer lane: after a full run (no arguments) it also builds a CPU-only
# -Db_sanitize=address,undefined configuration in build-san/ (KVSIEVE_SAN_BUILD_DIR) and runs the
# CPU suites plus the fuzz corpus replay there (LeakSanitizer on, UBSan fatal). KVSIEVE_SANITIZE=0
# skips it; KVSIEVE_SANITIZE=1 runs it also when arguments select tests (with those arguments).
if [ -z "${BASH_VERSION:-}" ]; then exec bash "$0" "$@"; fi
set -euo pipefail

# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
kvs_setup

kvs_log "models: $(kvs_model_dirs | paste -sd " " -)"
rc=0
meson test -C "$KVSIEVE_BUILD_DIR" --print-errorlogs "$@" || rc=$?

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
  ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}" \
    UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}" \
    meson test -C "$san" --print-errorlogs "${san_sel[@]}" || rc=1
  kvs_log "sanitizer lane: $((SECONDS - t0)) s"
fi
exit $rc
