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
PY
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
expect 2 bench ops --json=1 && one_line_error
expect 2 bench ops --backend nope && one_line_error
expect 2 bench ops --backend cpu:7 && one_line_error
expect 0 bench ops --quick --reps 1 --filter gather --json && valid_json && contains '"gather"'

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
  dlm=(generate -m stories260K-llada-f32.gguf -p "Once upon a time" -n 64 -t 1 --json)
  expect 0 "${dlm[@]}" --diffusion-block-length 32 --diffusion-steps 64 && cp "$tmp/out" "$tmp/alias.json"
  expect 0 "${dlm[@]}" --block 32 --steps 64
  cmp -s "$tmp/alias.json" "$tmp/out" 2>/dev/null ||
    python3 - "$tmp/alias.json" "$tmp/out" <<'PY' || { echo "FAIL: diffusion aliases differ"; fails=$((fails + 1)); }
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert a["tokens"] == b["tokens"] and a["tokens"][:4] == [432, 383, 286, 261], (a["tokens"][:4], b["tokens"][:4])
PY
else
  echo "skip: the bundled models are not found: llama.cpp flag checks skipped"
fi

if ((fails > 0)); then
  echo "$fails check(s) failed"
  exit 1
fi
