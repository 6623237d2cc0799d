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
# 1. masked diffusion: the bundled LLaDA-layout model decodes 64 tokens in blocks of 32;
# 2. autoregressive: stories260K, greedy, the published 256-token text.
# Extra arguments (e.g. --backend vulkan) go to both decodes.
"$KVSIEVE_BIN" devices
echo
kvs_log "masked diffusion: stories260K-llada-f32.gguf, 64 tokens, blocks of 32, threshold 0.9"
"$KVSIEVE_BIN" generate -m stories260K-llada-f32.gguf -p "Once upon a time" -n 64 --block 32 --threshold 0.9 "$@"
echo
kvs_log "autoregressive: stories260K-f32.v3.gguf, greedy, 256 tokens"
"$KVSIEVE_BIN" generate -m stories260K-f32.v3.gguf -n 256 "$@"
