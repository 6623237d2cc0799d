#!/usr/bin/env bash
# Tests of the kvsieve CLI's contract: exit statuses (0 ok, 2 usage), one-line errors, --help for
# every subcommand, valid JSON. Usage: cli.sh PATH/TO/kvsieve
set -euo pipefail
KVSIEVE="$1"
fails=0
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# expect STATUS ARGS...: runs kvsieve ARGS, checks the exit status; stdout/stderr kept in $tmp.
expect() {
  local want="$1" got=0
  shift
  "$KVSIEVE" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null || got=$?
  if [[ "$got" != "$want" ]]; then
    echo "FAIL: kvsieve $* exited $got, expected $want; stderr:"
    cat "$tmp/err"
    fails=$((fails + 1))
    return 1
  fi
  echo "ok: kvsieve $* -> $got"
}

# one_line_error: the last command's stderr is exactly one line naming the program.
one_line_error() {
  if [[ "$(wc -l <"$tmp/err")" != 1 ]] || ! grep -q '^kvsieve' "$tmp/err"; then
    echo "FAIL: expected one error line starting with 'kvsieve', got:"
    cat "$tmp/err"
    fails=$((fails + 1))
  fi
}

valid_json() {
  if ! python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$tmp/out"; then
    echo "FAIL: stdout is not valid JSON"
    fails=$((fails + 1))
  fi
}

contains() {
  if ! grep -q -- "$1" "$tmp/out"; then
    echo "FAIL: stdout lacks '$1'"
    fails=$((fails + 1))
  fi
}

contains_err() {
  if ! grep -q -- "$1" "$tmp/err"; then
    echo "FAIL: stderr lacks '$1'"
    fails=$((fails + 1))
  fi
}

expect 0 --help && contains devices
expect 0 --version
expect 2 || true
expect 2 no-such-command && one_line_error
expect 0 devices && contains 'cpu: 1 device'
expect 0 devices --help && contains '--json'
expect 0 devices --json && valid_json
python3 - "$tmp/out" <<'PY' || fails=$((fails + 1))
import json, sys
d = json.load(open(sys.argv[1]))
names = [b["name"] for b in d["backends"]]
assert names == ["cpu", "opencl", "vulkan"], names
cpu = d["backends"][0]
assert cpu["built"] and cpu["devices"][0]["caps"]["compute_units"] >= 1, cpu
# Vulkan has no compute-unit query: null (not reported), never 0; OpenCL reports a count
for b in d["backends"][1:]:
    for dev in b.get("devices", []):
        cu = dev.get("caps", {}).get("compute_units", "absent")
        if b["name"] == "vulkan" and "caps" in dev:
            assert cu is None, dev
        assert cu != 0, dev
PY
expect 0 devices
if grep -q '^vulkan: [1-9]' "$tmp/out" 2>/dev/null; then
  contains 'compute units not reported'
fi
! grep -q ' 0 compute units' "$tmp/out" || { echo "FAIL: devices prints 0 compute units" >&2; fails=$((fails + 1)); }
expect 2 devices --bogus && one_line_error
expect 2 devices extra-arg && one_line_error
expect 2 bench && true
expect 0 bench --help
expect 2 bench nope && one_line_error
expect 0 bench ops --help && contains '--backend'
expect 2 bench ops --reps && one_line_error
expect 2 bench ops --reps x && one_line_error
expect 2 bench ops --reps 0 && one_line_error
expect 2 bench ops --max-seconds 0 && one_line_error
expect 2 bench ops --quick --reps 1 --filter no-such-case && one_line_error
# ... checked before the peaks are measured (nothing on stdout), naming the ops a filter can pick
contains_err "ops: matmul, gemv, attention"
[[ ! -s "$tmp/out" ]] || { echo "FAIL: bench ops --filter no-such-case measured before refusing:"; cat "$tmp/out"; fails=$((fails + 1)); }
expect 2 bench ops --json=1 && one_line_error
expect 2 bench ops --backend nope && one_line_error
expect 2 bench ops --backend cpu:7 && one_line_error
expect 0 bench ops --quick --reps 1 --filter gather --json && valid_json && contains '"gather"'
# bench model: refusals, then a smoke run on the made-up shapes (structure and sanity, never timing)
expect 2 bench model && one_line_error
expect 2 bench model --shape no-such-shape && one_line_error
expect 2 bench model --shape tiny --type q9_z && one_line_error
expect 2 bench model --shape tiny --steps 0 && one_line_error
expect 2 bench model --shape tiny --variants no-such-variant && one_line_error
expect 2 bench model --shape tiny --cache-type-k q4_0 --prompt 0 && one_line_error
expect 2 bench model --shape tiny --layers 3 && one_line_error
expect 0 bench model --shape tiny --layers 1 --json --reps 1 --prompt 4 --decode 2 -t 1 --no-ops && valid_json
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["shape"]["n_layers"] == 1, d["shape"]' "$tmp/out" \
  || fails=$((fails + 1))
# bench model --context (plain decoding after N cached rows of the cache type): refusals, then a run
# whose new fields must be there (never timing)
expect 2 bench model --shape tiny --fill random && one_line_error && contains_err 'belongs to --context'
expect 2 bench model --shape tiny --context 0 && one_line_error
expect 2 bench model --shape tiny --context 64 --fill sideways && one_line_error
expect 2 bench model --shape tiny --context 64 --prompt 8 && one_line_error && contains_err 'does not apply'
expect 2 bench model --shape tiny --context 64 --no-ops && one_line_error && contains_err 'does not apply'
expect 2 bench model --shape tiny --context 510 --decode 8 && one_line_error && contains_err context
expect 2 bench model --shape tiny-dlm --context 64 && one_line_error && contains_err diffusion
expect 0 bench model --shape tiny --context 64 --cache-type-k q4_0 --cache-type-v q4_0 --decode 2 --reps 1 -t 1 \
  && contains 'context decode after 64 cached rows' && contains 'KiB per token' && contains 'tokens/s'
expect 0 bench model --shape tiny --context 64 --cache-type-k q4_0 --cache-type-v q4_0 --decode 2 --reps 1 -t 1 --json && valid_json
python3 - "$tmp/out" <<'PY' || fails=$((fails + 1))
import json, sys
d = json.load(open(sys.argv[1]))
c = d["context_decode"]
assert c["ok"] and c["context"] == 64 and c["fill"] == "random" and c["decode_tokens"] == 2 and c["tokens"] == 2, c
# q4_0: 18 bytes per 32 values; 2 layers x 2 kv heads x (K + V) x 36 bytes per head row of 64
assert c["kv_bytes_per_token"] == d["kv_bytes_per_token"] == 2 * 2 * 2 * 36, c
assert c["kv_read_bytes"] == 64 * 2 * 2 * 2 * 36 and c["weight_bytes"] == d["model_bytes"], c
assert c["seconds"] > 0 and c["cpu_seconds"] > 0 and c["tokens_per_s"] > 0, c
assert c["attention_share"] is None or 0 <= c["attention_share"] <= 1, c
assert d["cache_type_k"] == d["cache_type_v"] == "q4_0" and "forward" not in d and "speculative" not in d and d["matmul"] == [], d.keys()
PY
expect 0 bench model --shape tiny --context 40 --fill prefill --cache-type-k qh8 --cache-type-v f16 --decode 3 --reps 1 -t 1 \
  && contains 'a prefill of random tokens'
# bench model --speculative (QuantSpec against plain decoding at a context): refusals, then a run at a
# long-ish context whose speculative tokens must equal the plain ones (the bench exits 1 otherwise)
expect 2 bench model --shape tiny --draft 0 && one_line_error
expect 2 bench model --shape tiny --draft 16 && one_line_error
expect 2 bench model --shape tiny --speculative --context 0 && one_line_error
expect 2 bench model --shape tiny --speculative --fill sideways && one_line_error
expect 2 bench model --shape tiny --speculative --cache-type-k q8_0 --cache-type-v q8_0 && one_line_error && contains_err qh8
expect 2 bench model --shape tiny-dlm --speculative && one_line_error
expect 2 bench model --shape tiny --speculative --decode 1 && one_line_error && contains_err 'decode >= 2'
expect 2 bench model --shape tiny --draft 2 --prompt 8 && one_line_error && contains_err 'does not apply'
expect 2 bench model --shape tiny --speculative --variants auto && one_line_error && contains_err variants
expect 2 bench model --shape tiny --speculative --context 500 --decode 32 && one_line_error && contains_err context
expect 0 bench model --shape tiny --speculative --draft 4 --context 300 --decode 20 --reps 2 -t 1 --json && valid_json
python3 - "$tmp/out" <<'PY' || fails=$((fails + 1))
import json, sys
d = json.load(open(sys.argv[1]))
s = d["speculative"]
assert s["ok"] and s["identical"] and s["first_diff"] == -1, s
assert s["draft"] == 4 and s["context"] == 300 and s["fill"] == "random" and s["reps"] == 2, s
assert s["plain_tokens"] == s["spec_tokens"] == 20 and 1 <= s["distinct_tokens"] <= 20, s
assert 0 <= s["accepted"] <= s["drafted"] and s["verify_steps"] > 0, s
assert 0 <= s["acceptance"] <= 1 and 1 <= s["tokens_per_verify_step"] <= 5, s
assert s["speedup_wall"] > 0 and s["speedup_cpu"] > 0 and s["plain_seconds"] > 0 and s["spec_seconds"] > 0, s
assert s["kv_bytes_per_context_token"] == 2 * 2 * 2 * 72 and s["kv_bytes_per_context_token_draft"] == 2 * 2 * 2 * 40, s
assert d["cache_type_k"] == d["cache_type_v"] == "qh8" and "forward" not in d and d["matmul"] == [], d.keys()
PY
# no --context: 1024, or what the shape's context (tiny: 512) leaves beside --decode
expect 0 bench model --shape tiny --speculative --decode 8 --reps 1 -t 1 --json && valid_json
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); c=d["speculative"]["context"]; assert c == 504, c' "$tmp/out" \
  || { echo "FAIL: bench model --speculative default context"; fails=$((fails + 1)); }
expect 0 bench model --shape tiny --speculative --fill prefill --context 200 --decode 12 --reps 1 -t 1 \
  --cache-type-k f16 --cache-type-v qh8 && contains 'tokens identical to plain decoding' && contains acceptance
# the draft's q4_0 weight copy (kvs_model_set_draft_weights): the verify keeps the f16 weights, tokens equal
expect 2 bench model --shape tiny --draft-weights q4_k && one_line_error && contains_err 'q4_0'
expect 0 bench model --shape tiny --type f16 --draft-weights q4_0 --context 100 --decode 16 --reps 1 -t 1 --json && valid_json
python3 - "$tmp/out" <<'PY' || fails=$((fails + 1))
import json, sys
s = json.load(open(sys.argv[1]))["speculative"]
assert s["ok"] and s["identical"] and s["draft_weights"] == "q4_0" and s["draft_weight_bytes"] > 0, s
PY
expect 0 bench model --shape tiny-dlm --json --reps 1 --prompt 8 --decode 2 --gen 8 --steps 2 -t 1 \
  --cache-type-k q8_0 --variants auto,portable && valid_json
python3 - "$tmp/out" <<'PY' || fails=$((fails + 1))
import json, sys
d = json.load(open(sys.argv[1]))
s = d["shape"]
assert s["name"] == "tiny-dlm" and s["arch"] == "llada" and s["n_layers"] == 2, s
assert d["type"] == "q4_k" and d["cache_type_k"] == "q8_0" and d["errors"] == 0, d
assert d["kv_bytes_per_token"] == 2 * 2 * (64 // 32 * 34 + 64 * 4), d["kv_bytes_per_token"]  # layers, kv heads
# q4_K: 144 bytes per 256 values; every matrix of the tiny shape is whole super-blocks (F32 norms on top)
L, dim, qd, kvd, ffn, voc = 2, 256, 256, 128, 512, 512
mats = 2 * voc * dim + L * (dim * (qd + 2 * kvd) + qd * dim + 3 * dim * ffn)
assert d["model_bytes"] == mats // 256 * 144 + 4 * (dim + L * 2 * dim), d["model_bytes"]
f = d["forward"]
assert f["ok"] and f["prompt_tokens"] == 8 and f["decode_tokens"] == 2, f
assert f["prefill_tokens_per_s"] > 0 and f["decode_tokens_per_s"] > 0, f
g = d["dlm_step"]
assert g["ok"] and g["rows"] == 16 and g["none_steps"] == 2 and g["elastic_steps"] == 2, g
assert 0 < g["elastic_compute_fraction"] <= 1 and g["none_step_seconds"] > 0, g
rows = d["matmul"]
assert len(rows) == 8 * 2 * 2, len(rows)  # 8 matrices x gemv/gemm x 2 variants
for r in rows:
    assert r["ok"] and r["type"] == "q4_k" and r["seconds"] > 0 and r["of_peak"] > 0, r
    assert r["n"] == (1 if r["kind"] == "gemv" else 8) and r["layers"] == (1 if r["kind"] == "gemm" or r["matrix"] == "output" else 2), r
assert {r["variant"] for r in rows} == {"auto", "portable"}
PY
# the --variants example in bench model --help names variants the CPU backend has (the full list is
# in the refusal of an unknown one)
expect 0 bench model --help
mapfile -t ex < <(sed -n 's/.*--variants LIST.*(e\.g\. \([^;]*\);.*/\1/p' "$tmp/out" | tr ',' '\n')
expect 2 bench model --shape tiny --variants no-such-variant
for v in "${ex[@]}"; do
  grep -q -- "[(, ]${v}[,)]" "$tmp/err" || { echo "FAIL: bench model --help's example variant '$v' does not exist"; fails=$((fails + 1)); }
done
((${#ex[@]} >= 2)) || { echo "FAIL: no --variants example in bench model --help"; fails=$((fails + 1)); }
# a model file's shape: stories260K (dim 64, ffn 172) takes llama-quantize's fallback types
expect 0 bench model --shape stories260K-f32.v3.gguf --json --reps 1 --prompt 4 --decode 2 -t 1 && valid_json
python3 - "$tmp/out" <<'PY' || fails=$((fails + 1))
import json, sys
d = json.load(open(sys.argv[1]))
t = {r["matrix"]: r["type"] for r in d["matmul"]}
assert t["attn_q"] == "q5_0" and t["ffn_gate"] == "q5_0" and t["ffn_down"] == "f16", t
assert d["forward"]["ok"] and "dlm_step" not in d, d
# the header's types are the ones used, not only --type (it printed "weights q4_k" for q5_0 + f16)
assert d["type"] == "q4_k" and d["types_used"] == ["q5_0", "f16"], (d["type"], d["types_used"])
# the weights' build and the kernel builds (the CPU has none) under their own unit-last keys
assert d["weights_build_seconds"] >= 0 and d["build_seconds"] == 0.0, d
PY
expect 0 bench model --shape stories260K-f32.v3.gguf --reps 1 --prompt 4 --decode 2 -t 1 --no-ops \
  && contains "weights q5_0 + f16 (--type q4_k; rows not whole q4_k blocks fall back)"

# Every subcommand listed by --help (including ones added later): --help works, a bad flag is a
# one-line error with exit status 2.
expect 0 --help
mapfile -t cmds < <(awk '/^commands:/ { on = 1; next } on && /^  [a-z]/ { print $1; next } on { exit }' "$tmp/out")
if ((${#cmds[@]} < 2)); then
  echo "FAIL: could not read the command list from kvsieve --help"
  fails=$((fails + 1))
fi
for c in "${cmds[@]}"; do
  expect 0 "$c" --help
  # every option line states its default (or that it is required)
  if grep -E '^  (-[a-zA-Z], )?--|^      --' "$tmp/out" | grep -v -- '--help ' | grep -viE 'default|required'; then
    echo "FAIL: kvsieve $c --help: the option lines above state no default"
    fails=$((fails + 1))
  fi
  expect 2 "$c" --no-such-flag && one_line_error
done
expect 0 eval --dlm --help && contains '--diffusion-block-length'

# --version names the version and the backends built in (cpu always)
expect 0 --version && contains 'backends built in: cpu'

# llama.cpp spellings (-s, -c/--ctx-size, --diffusion-steps/--diffusion-block-length) are the same
# options as ours; they need the bundled models (kvs_model_locate: models/ in the source tree)
if "$KVSIEVE" generate -m stories260K-f32.v3.gguf -n 1 --json >/dev/null 2>&1; then
  expect 0 generate -m stories260K-f32.v3.gguf -n 24 --temp 1.5 -s 7 --json && cp "$tmp/out" "$tmp/short.json"
  expect 0 generate -m stories260K-f32.v3.gguf -n 24 --temp 1.5 --seed 7 --json
  cmp -s <(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["tokens"])' "$tmp/short.json") \
         <(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["tokens"])' "$tmp/out") ||
    { echo "FAIL: -s 7 and --seed 7 differ"; fails=$((fails + 1)); }
  expect 0 generate -m stories260K-f32.v3.gguf -n 8 -c 9 -t 1 --json
  expect 2 generate -m stories260K-f32.v3.gguf -n 9 --ctx-size 8 && one_line_error && contains_err 'ctx-size'
  expect 2 generate -m stories260K-f32.v3.gguf -n 8 -c -1 && one_line_error
  # ThinK on keys it cannot prune is refused before decoding (nothing on stdout)
  expect 2 generate -m stories260K-f32.v3.gguf -n 40 --policy snapkv --budget 16 --think 0.4 --kv-rotate &&
    one_line_error && contains_err 'Hadamard'
  [[ ! -s "$tmp/out" ]] || { echo "FAIL: --think --kv-rotate printed to stdout"; fails=$((fails + 1)); }
  expect 2 generate -m tiny-llama-mixed-q.gguf -n 40 --policy snapkv --budget 16 --think 0.4 --cache-type-k q8_0 &&
    one_line_error && contains_err 'q8_0'
  # the streaming hint only where --rerotate can be taken (not for q8_0 keys)
  expect 2 generate -m tiny-llama-mixed-q.gguf -n 1000 --cache-type-k q8_0 && one_line_error
  if grep -q -- '--rerotate' "$tmp/err"; then echo "FAIL: --rerotate hinted for q8_0 keys"; fails=$((fails + 1)); fi
  # diffusion schedules a model cannot run are usage errors before anything reaches stdout
  # (--block-causal: none/prefix only; Dream's shifted logits: no d2cache)
  for c in dual delayed elastic d2cache; do
    expect 2 generate -m stories260K-llada-f32.gguf -p "Once" -n 16 --block 16 --block-causal --cache "$c" &&
      one_line_error && contains_err 'block-causal'
    [[ ! -s "$tmp/out" ]] || { echo "FAIL: --block-causal --cache $c printed to stdout"; fails=$((fails + 1)); }
  done
  expect 2 generate -m tiny-dream.gguf -p "Once" -n 16 --block 16 --cache d2cache && one_line_error &&
    contains_err 'shifted logits'
  [[ ! -s "$tmp/out" ]] || { echo "FAIL: d2cache on dream printed to stdout"; fails=$((fails + 1)); }
  expect 2 generate -m tiny-dream.gguf -p "Once" -n 16 --block 16 --cache d2cache --wavefilter && one_line_error
  expect 0 generate -m tiny-dream.gguf -p "Once" -n 16 --block 16 --block-causal --cache prefix -t 1 --json
  # QuantSpec with the draft's q4_0 weight copy (implies --speculative): greedy tokens equal plain decoding's
  expect 2 generate -m tiny-llama-mixed-q.gguf -n 8 --draft-weights f16 && one_line_error && contains_err 'draft-weights'
  expect 0 generate -m tiny-llama-mixed-q.gguf -n 24 --draft-weights q4_0 --draft 2 -t 1 --json
  python3 - "$tmp/out" <<'PY' || { echo "FAIL: --draft-weights q4_0"; fails=$((fails + 1)); }
import json, sys
s = json.load(open(sys.argv[1]))["stats"]["speculative"]
assert s["identical_to_plain"] and s["draft_weights"] == "q4_0" and s["draft_weight_bytes"] > 0 and s["draft"] == 2, s
PY
  # --json text is valid UTF-8 even when byte tokens cut a character (this random model emits such)
  expect 0 generate -m tiny-llama-mixed-q.gguf -n 60 -p "Once upon a time" -t 1 --json
  python3 - "$tmp/out" <<'PY' || { echo "FAIL: generate --json text is not valid UTF-8"; fails=$((fails + 1)); }
import json, sys
d = json.loads(open(sys.argv[1], "rb").read().decode("utf-8"))
assert isinstance(d["text"], str) and len(d["tokens"]) == 60, d
PY
  dlm=(generate -m stories260K-llada-f32.gguf -p "Once upon a time" -n 64 -t 1 --json)
  expect 0 "${dlm[@]}" --diffusion-block-length 32 --diffusion-steps 64 && cp "$tmp/out" "$tmp/alias.json"
  expect 0 "${dlm[@]}" --block 32 --steps 64
  cmp -s "$tmp/alias.json" "$tmp/out" 2>/dev/null ||
    python3 - "$tmp/alias.json" "$tmp/out" <<'PY' || { echo "FAIL: diffusion aliases differ"; fails=$((fails + 1)); }
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert a["tokens"] == b["tokens"] and a["tokens"][:4] == [432, 383, 286, 261], (a["tokens"][:4], b["tokens"][:4])
PY

  # a full disk: every output, on standard output (/dev/full: ENOSPC) or to a file (a file-size limit
  # of 0: EFBIG; SIGXFSZ ignored), fails with exit 1 and one line naming the file and the errno's text
  full_out() {
    local rc=0 err
    err=$("$KVSIEVE" "$@" 2>&1 >/dev/full) || rc=$?
    if [[ "$rc" != 1 ]] || ! grep -q '/dev/full.*No space left on device' <<<"$err"; then
      echo "FAIL: kvsieve $* >/dev/full exited $rc, want 1 and '/dev/full: No space left on device'; stderr: $err"
      fails=$((fails + 1))
    else
      echo "ok: kvsieve $* >/dev/full -> 1"
    fi
  }
  full_file() { # full_file PATH ARGS...: ARGS write PATH
    local path="$1" rc=0 err
    shift
    err=$( (trap '' XFSZ; ulimit -f 0; exec "$KVSIEVE" "$@" 2>&1 >/dev/null) ) || rc=$?
    if [[ "$rc" != 1 ]] || ! grep -qF "$path" <<<"$err" || ! grep -q 'File too large' <<<"$err" || [[ -e "$path" ]]; then
      echo "FAIL: kvsieve $* under ulimit -f 0 exited $rc, want 1, '$path ... File too large', no file left; stderr: $err"
      fails=$((fails + 1))
    else
      echo "ok: kvsieve $* under ulimit -f 0 -> 1"
    fi
  }
  text="${KVSIEVE_SOURCE_ROOT:-$(dirname "$0")/../..}/tools/data/dlm-prompts.txt"
  ev=(eval -m stories260K-f32.v3.gguf --text "$text" --ctx 32 --windows 1 --budgets 0.5 --policies h2o -t 1)
  full_out --version
  full_out --help
  full_out devices
  full_out devices --json
  full_out generate -m stories260K-f32.v3.gguf -n 8 -t 1
  full_out generate -m stories260K-f32.v3.gguf -n 8 -t 1 --json
  full_out generate -m stories260K-f32.v3.gguf -n 300 -t 1 --no-stream
  full_out generate -m stories260K-llada-f32.gguf -p "Once" -n 16 -t 1
  full_out "${ev[@]}"
  full_out "${ev[@]}" --json
  full_out eval --dlm -m stories260K-llada-f32.gguf --prompts "$text" --gen 16 --caches none,dual --long-prompts 0 -t 1 --json
  full_out bench ops --quick --filter dwt --json
  full_out train --kind retention -m stories260K-f32.v3.gguf --text "$text" --out "$tmp/pol.gguf" --steps 1 -t 1
  full_file "$tmp/p.svg" "${ev[@]}" --plot "$tmp/p.svg"
  full_file "$tmp/d.svg" eval --dlm -m stories260K-llada-f32.gguf --prompts "$text" --gen 16 --caches none,dual \
    --long-prompts 0 -t 1 --plot "$tmp/d.svg"
  full_file "$tmp/pol2.gguf" train --kind retention -m stories260K-f32.v3.gguf --text "$text" --out "$tmp/pol2.gguf" \
    --steps 1 -t 1
  [[ ! -e "$tmp/pol2.gguf.tmp" ]] || { echo "FAIL: train left $tmp/pol2.gguf.tmp"; fails=$((fails + 1)); }
else
  echo "skip: the bundled models are not found: llama.cpp flag checks skipped"
fi

if ((fails > 0)); then
  echo "$fails check(s) failed"
  exit 1
fi
