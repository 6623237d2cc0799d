#!/usr/bin/env bash
# tools/test.sh — installs what is missing (as root; otherwise prints the apt-get command),
# configures and builds kvsieve, then runs every test suite. Exits non-zero on any failure.
# Extra arguments go to `meson test`, e.g. `tools/test.sh --suite cpu` or a test name.
if [ -z "${BASH_VERSION:-}" ]; then exec bash "$0" "$@"; fi
set -euo pipefail

# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
kvs_setup

kvs_log "models: $(kvs_model_dirs | paste -sd " " -)"
meson test -C "$KVSIEVE_BUILD_DIR" --print-errorlogs "$@"
