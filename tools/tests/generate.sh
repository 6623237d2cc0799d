#!/usr/bin/env bash
# CLI test of `kvsieve generate`: the published greedy text and a diffusion reference decode through
# the command line (--json), and one-line errors with exit status 2 for bad flags and files.
set -euo pipefail
kvsieve="$1"
# the fixtures and the reference JSON: $KVSIEVE_MODELS, else the repository's models/, else
# ../shared/models (kvs_model_locate's order; models.sh)
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/models.sh"
models=$(kvs_test_models stories260K-f32.v3.gguf)
export MODELS_DIR="$models"
fail() { echo "FAIL: $*" >&2; exit 1; }

if ! "$kvsieve" generate -m stories260K-f32.v3.gguf -n 1 --json >/dev/null 2>&1; then
  echo "SKIP: model fixtures not found (set KVSIEVE_MODELS)"; exit 77
fi

# AR greedy: the first tokens of ref_greedy_256 ("Once upon a time, there was a little girl named Lily.")
out=$("$kvsieve" generate -m stories260K-f32.v3.gguf -n 256 --threads 1 --json)
python3 - "$out" <<'PY' || fail "greedy json"
import json, os, sys
j = json.loads(sys.argv[1])
ref_path = os.path.join(os.environ["MODELS_DIR"], "ref_greedy_256.json")
assert j["prompt_tokens"] == [1], j["prompt_tokens"]
assert j["text"].startswith("Once upon a time, there was a little girl named Lily."), j["text"][:80]
if ref_path and os.path.exists(ref_path):
    assert j["tokens"] == json.load(open(ref_path))["generated_ids"]
s = j["stats"]
assert s["steps"] == 256 and s["rows_computed"] == 256 * 5, s
assert 0 < s["compute_fraction"] < 0.01, s
assert s["cache_bytes_peak"] == 256 * 5 * 2 * 4 * 8 * 4, s
# kernel builds under the unit-last key; the older "seconds_build" (README) stays beside it
assert s["build_seconds"] == s["seconds_build"] == 0.0 and s["load_seconds"] >= 0, s
PY

# diffusion: reference case 1 of stories260K-llada-ref.json
out=$("$kvsieve" generate -m stories260K-llada-f32.gguf -p "Once upon a time" -n 64 --block 32 --steps 64 --threads 1 --json)
python3 - "$out" <<'PY' || fail "diffusion json"
import json, sys
j = json.loads(sys.argv[1])
assert j["prompt_tokens"] == [1, 403, 407, 261, 378], j["prompt_tokens"]
assert j["tokens"][:8] == [432, 383, 286, 261, 376, 298, 315, 421], j["tokens"][:8]
assert j["text"].startswith(", there was a little girly."), j["text"][:40]
assert j["stats"]["compute_fraction"] == 1.0 and j["stats"]["steps"] == 64
assert j["stats"]["tokens_decoded"] == 64 and j["stats"]["tokens_eos_filled"] == 0, j["stats"]
PY

# --stop-eos: this fixture never commits its EOS, so the decode is the reference one, all decoded
out=$("$kvsieve" generate -m stories260K-llada-f32.gguf -p "Once upon a time" -n 64 --block 32 --steps 64 --threads 1 --json --stop-eos)
python3 - "$out" <<'PY' || fail "diffusion --stop-eos json"
import json, sys
j = json.loads(sys.argv[1])
assert j["tokens"][:8] == [432, 383, 286, 261, 376, 298, 315, 421], j["tokens"][:8]
assert j["stats"]["tokens_decoded"] == 64 and j["stats"]["tokens_eos_filled"] == 0, j["stats"]
PY

# --profile: the per-layer table has columns embed, 0 .. L-1, head (the order the forward runs); the
# embedding is timed in "embed" only, and every kind's row sums to its ms in the per-kind table; the
# JSON cells name their part (embed / layer / head) the same way
prof=(generate -m stories260K-llada-f32.gguf -p "Once upon a time" -n 16 --block 16 --cache elastic --threads 1 --profile)
err=$("$kvsieve" "${prof[@]}" 2>&1 >/dev/null)
"$kvsieve" "${prof[@]}" --json >"${TMPDIR:-/tmp}/kvs-gen-profile.$$.json"
python3 - "$err" "${TMPDIR:-/tmp}/kvs-gen-profile.$$.json" <<'PY' || fail "--profile table"
import json, sys
lines = sys.argv[1].splitlines()
i = next(k for k, l in enumerate(lines) if "profile, per step" in l)
kinds, k = {}, i + 2
while not lines[k].lstrip().startswith("ms per layer"):
    f = lines[k].split()
    kinds[f[0]] = float(f[2])
    k += 1
head = lines[k].split()[3:]
assert head == ["embed", "0", "1", "2", "3", "4", "head"], head
rows = {}
for l in lines[k + 1:k + 2 + len(kinds)]:
    f = l.split()
    rows[f[0]] = [float(x) for x in f[1:]]
assert set(rows) == set(kinds) | {"all"}, rows.keys()
for kind, ms in kinds.items():
    assert abs(sum(rows[kind]) - ms) <= 5e-4 * len(head), (kind, rows[kind], ms)
emb = rows["embedding"]
assert emb[0] > 0 and all(x == 0 for x in emb[1:]), emb
assert rows["matmul"][0] == 0 and all(x > 0 for x in rows["matmul"][1:]), rows["matmul"]
for c in range(len(head)):
    assert abs(sum(r[c] for kd, r in rows.items() if kd != "all") - rows["all"][c]) <= 5e-4 * len(kinds)
cells = json.load(open(sys.argv[2]))["stats"]["profile"]
for c in cells:
    assert c["part"] in ("embed", "layer", "head"), c
    assert (c["layer"] is None) == (c["part"] != "layer"), c
assert [c["part"] for c in cells if c["kind"] == "embedding"] == ["embed"], cells
assert {c["layer"] for c in cells if c["kind"] == "attention"} == {0, 1, 2, 3, 4}
PY
rm -f "${TMPDIR:-/tmp}/kvs-gen-profile.$$.json"

# errors: one line on stderr, exit 2
expect_usage() {
  local rc=0 err
  err=$("$kvsieve" generate "$@" 2>&1 >/dev/null) || rc=$?
  [ "$rc" -eq 2 ] || fail "generate $* exited $rc, want 2"
  [ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] || fail "generate $*: want one error line, got: $err"
}
expect_usage --bogus-flag
expect_usage -m /nonexistent/model.gguf
expect_usage -m stories260K-f32.v3.gguf --temp -1
expect_usage -m stories260K-llada-f32.gguf -n 50 --block 32
expect_usage -m stories260K-f32.v3.gguf -n 8 --stop-eos
expect_usage -m stories260K-f32.v3.gguf --backend nosuchbackend
# values that equal an option's internal default must not slip through as "not given"
expect_usage -m stories260K-f32.v3.gguf -n -1
expect_usage -m stories260K-f32.v3.gguf -n 8 --policy streaming --budget 0.5 --sink -1
expect_usage -m stories260K-f32.v3.gguf -n 8 --sink 2
expect_usage -m stories260K-f32.v3.gguf -n 8 --buffer 4
expect_usage -m stories260K-f32.v3.gguf -n 8 --policy h2o --budget 0.5 --buffer 0
# an explicit --window 0 is given (0 was the unset value): it needs --policy on an AR model, is the
# elastic window (>= 1) on a diffusion model; with --policy h2o it is the policy's default window
expect_msg() {
  local want="$1" rc=0 err; shift
  err=$("$kvsieve" generate "$@" 2>&1 >/dev/null) || rc=$?
  [ "$rc" -eq 2 ] || fail "generate $* exited $rc, want 2"
  [ "$err" = "kvsieve generate: $want" ] || fail "generate $*: got '$err', want 'kvsieve generate: $want'"
}
expect_msg "--window needs --policy on autoregressive models ('llama')" -m stories260K-f32.v3.gguf -n 8 --window 0
expect_msg "--window is for the elastic cache, which is not run" -m stories260K-llada-f32.gguf -n 32 --window 0
expect_msg "--window 0: want >= 1" -m stories260K-llada-f32.gguf -n 32 --cache elastic --window 0
expect_msg "--window -3: want >= 1" -m stories260K-llada-f32.gguf -n 32 --cache elastic --window -3
"$kvsieve" generate -m stories260K-f32.v3.gguf -n 8 --policy h2o --budget 0.5 --window 0 --no-stream >/dev/null 2>&1 ||
  fail "generate --policy h2o --window 0 refused"
"$kvsieve" generate -m stories260K-llada-f32.gguf -n 32 --cache elastic --window 4 --no-stream >/dev/null 2>&1 ||
  fail "generate --cache elastic --window 4 refused"
# a flag for a schedule that is not run
expect_usage -m stories260K-llada-f32.gguf -n 32 --gamma 0.5
expect_usage -m stories260K-llada-f32.gguf -n 32 --cache prefix --reload 2
tmp=$(mktemp)
head -c 1000 "$models/stories260K-f32.v3.gguf" > "$tmp"
expect_usage -m "$tmp"
rm -f "$tmp"
echo "generate CLI: all checks passed"
