#!/usr/bin/env bash
# tools/demo.sh — the first command to run: installs what is missing (as root; otherwise prints the
# apt-get command), configures and builds kvsieve, then runs its main job.
# Extra arguments go to the main job, e.g. `tools/demo.sh --backend vulkan`.
if [ -z "${BASH_VERSION:-}" ]; then exec bash "$0" "$@"; fi
set -euo pipefail

# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
kvs_setup

kvs_log "KVSIEVE_MODELS=$KVSIEVE_MODELS"

# ---- main job -------------------------------------------------------------------------------
# Until text generation lands this shows the devices and a quick op benchmark. When it does,
# replace this block with the model decodes, e.g.:
#   "$KVSIEVE_BIN" generate -m stories260K-llada-f32.gguf ... "$@"
#   "$KVSIEVE_BIN" generate -m stories260K-f32.v3.gguf ... "$@"
"$KVSIEVE_BIN" devices
echo
"$KVSIEVE_BIN" bench ops --quick "$@"
