#!/usr/bin/env bash
# tools/fuzz.sh — builds the libFuzzer targets of tests/fuzz (clang, -fsanitize=fuzzer,address,
# undefined, CPU backend only) in build-fuzz/ and runs each for a given time, one after another,
# then prints one line per target: executions, executions per second, new corpus inputs, crashes.
# Usage: tools/fuzz.sh [SECONDS_PER_TARGET (default 60)] [TARGET ...]
#   targets: gguf llama2c safetensors tokenizer_bin tokenizer policy tasks ops (default: all)
# Environment: KVSIEVE_FUZZ_DIR (build dir, default build-fuzz), KVSIEVE_FUZZ_OUT (work dir for the
# grown corpora, logs and crash files, default build-fuzz/runs), KVSIEVE_FUZZ_ARGS (extra libFuzzer
# flags, e.g. "-runs=1000000"), KVSIEVE_MODELS (fixtures for the tokenizer target).
# The committed seeds (tests/data/fuzz/corpus/T) are read, never written: new inputs go to the work dir.
# A crash leaves crash-*/leak-*/oom-*/timeout-* files in OUT/T/; copy one to tests/fuzz/regress/T/
# with its fix so the replay test (meson test --suite fuzz) keeps checking it.
# Exit status: 0 when no target crashed, 1 otherwise. Needs clang and libclang-rt (Debian:
# clang libclang-rt-14-dev or libclang-rt-dev); as root, missing packages are installed.
if [ -z "${BASH_VERSION:-}" ]; then exec bash "$0" "$@"; fi
set -euo pipefail
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

secs="${1:-60}"
shift || true
targets=("$@")
if ((${#targets[@]} == 0)); then targets=(gguf llama2c safetensors tokenizer_bin tokenizer policy tasks ops); fi
fdir="${KVSIEVE_FUZZ_DIR:-$KVSIEVE_ROOT/build-fuzz}"
out="${KVSIEVE_FUZZ_OUT:-$fdir/runs}"

KVSIEVE_PKGS_REQUIRED+=(clang libclang-rt-dev)
KVSIEVE_PKGS_OPTIONAL=()
kvs_install_packages
command -v clang >/dev/null || kvs_die "clang not found"
if [[ ! -f "$fdir/meson-private/coredata.dat" ]]; then
  CC=clang meson setup "$fdir" "$KVSIEVE_ROOT" -Dfuzz=libfuzzer -Db_sanitize=address,undefined -Db_lundef=false \
    -Dopencl=disabled -Dvulkan=disabled -Dopenmp=disabled -Dtests=disabled -Dbuildtype=debugoptimized \
    -Dc_args=-fno-sanitize-recover=all >/dev/null || kvs_die "meson setup $fdir failed"
fi
mapfile -t goals < <(printf 'tests/fuzz/fuzz_%s\n' "${targets[@]}")
ninja -C "$fdir" "${goals[@]}" >/dev/null || kvs_die "build failed"
kvs_export_env

failed=0
printf '%-14s %12s %10s %8s %8s\n' target executions exec/s new crashes
for t in "${targets[@]}"; do
  work="$out/$t"
  mkdir -p "$work/corpus"
  log="$work/fuzz.log"
  seeds=("$KVSIEVE_ROOT/tests/data/fuzz/corpus/$t")
  [[ -d "$KVSIEVE_ROOT/tests/fuzz/regress/$t" ]] && seeds+=("$KVSIEVE_ROOT/tests/fuzz/regress/$t")
  extra=()
  if [[ -n "${KVSIEVE_FUZZ_ARGS:-}" ]]; then read -r -a extra <<<"$KVSIEVE_FUZZ_ARGS"; fi
  before=$(find "$work/corpus" -type f | wc -l)
  rc=0
  ASAN_OPTIONS="detect_leaks=1:abort_on_error=0" UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
    "$fdir/tests/fuzz/fuzz_$t" -max_total_time="$secs" -print_final_stats=1 -max_len=16384 -timeout=20 \
    -rss_limit_mb=2048 -dict="$KVSIEVE_ROOT/tests/fuzz/kvsieve.dict" -artifact_prefix="$work/" "${extra[@]}" \
    "$work/corpus" "${seeds[@]}" >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  after=$(find "$work/corpus" -type f | wc -l)
  crashes=$(find "$work" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'oom-*' -o -name 'timeout-*' \) | wc -l)
  printf '%-14s %12s %10s %8s %8s\n' "$t" "${execs:-?}" "${rate:-?}" "$((after - before))" "$crashes"
  if ((rc != 0 || crashes > 0)); then
    failed=1
    kvs_log "$t: libFuzzer exit $rc; log $log; artifacts in $work/"
    grep -m3 -E 'ERROR|SUMMARY|fuzz:' "$log" >&2 || true
  fi
done
exit $failed
