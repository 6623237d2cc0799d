#!/usr/bin/env bash
# kvsieve train / eval / generate with learned policies, end to end on stories260K (tiny settings):
# each kind trains (2 steps) into a side file written atomically, the same seed gives an identical
# file, eval and generate accept it (also in threshold and floor modes: --learned-threshold,
# --floor), and a wrong kind, a missing file, a non-policy file and bad mode values are refused
# with exit 2 and a message. Usage: test_learned_cli.sh KVSIEVE TEXT (skips with 77 when
# the model or text is missing).
set -u
exe=$1
text=$2
# outside the usual layout, find the text next to the models
if [ ! -f "$text" ] && [ -n "${KVSIEVE_MODELS:-}" ] && [ -f "$KVSIEVE_MODELS/../text/$(basename "$text")" ]; then
  text="$KVSIEVE_MODELS/../text/$(basename "$text")"
fi
model=stories260K-f32.v3.gguf
[ -f "$text" ] || { echo "SKIP: no $text"; exit 77; }
"$exe" devices > /dev/null 2>&1 || { echo "SKIP: kvsieve does not run"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
locate_ok=1
for k in retention indexer rl; do
  out=$("$exe" train --kind $k -m $model --text "$text" --out "$dir/$k.gguf" --steps 2 --ctx 32 --seed 3 2>"$dir/err")
  rc=$?
  if [ $rc -eq 2 ] && grep -q "not found\|no such\|cannot" "$dir/err"; then echo "SKIP: model missing"; exit 77; fi
  [ $rc -eq 0 ] || fail "train $k: rc $rc: $(cat "$dir/err")"
  grep -q "step 2/2  loss" "$dir/err" || fail "train $k: no progress line"
  [ -f "$dir/$k.gguf" ] && [ ! -e "$dir/$k.gguf.tmp" ] || fail "train $k: file not written atomically"
  "$exe" train --kind $k -m $model --text "$text" --out "$dir/$k-2.gguf" --steps 2 --ctx 32 --seed 3 2>/dev/null >/dev/null
  cmp -s "$dir/$k.gguf" "$dir/$k-2.gguf" || fail "train $k: same seed, different file"
done
"$exe" eval -m $model --text "$text" --split held-out --policies h2o,retention,indexer,rl \
  --policy-file "$dir/retention.gguf,$dir/indexer.gguf,$dir/rl.gguf" --budgets 0.25 --ctx 48 --windows 1 \
  > "$dir/eval" 2>"$dir/err" || fail "eval: $(cat "$dir/err")"
for k in retention indexer rl; do grep -q "^$k " "$dir/eval" || fail "eval: no row for $k"; done
grep -q "split held-out" "$dir/eval" || fail "eval: split not reported"
"$exe" generate -m $model -p "Once upon a time" -n 40 --policy retention --policy-file "$dir/retention.gguf" \
  --budget 0.5 > "$dir/gen" 2>"$dir/err" || fail "generate: $(cat "$dir/err")"
# threshold and floor modes (retention/indexer); the eval header names them
"$exe" generate -m $model -p "Once upon a time" -n 40 --policy retention --policy-file "$dir/retention.gguf" \
  --budget 0.5 --learned-threshold -4.6 --floor 0.25 > "$dir/gen" 2>"$dir/err" || fail "generate threshold/floor: $(cat "$dir/err")"
"$exe" eval -m $model --text "$text" --split held-out --policies adakv,retention,indexer \
  --policy-file "$dir/retention.gguf,$dir/indexer.gguf" --budgets 0.25 --ctx 48 --windows 1 --scope global \
  --learned-threshold -5 --floor 0.5 > "$dir/eval" 2>"$dir/err" || fail "eval threshold/floor: $(cat "$dir/err")"
grep -q "threshold mode: .* below -5; floor: .* 0.5" "$dir/eval" || fail "eval: modes not reported: $(head -3 "$dir/eval")"
for k in adakv retention indexer; do grep -q "^$k " "$dir/eval" || fail "eval threshold/floor: no row for $k"; done
# bad mode values and flags for policies that have no such mode: usage errors (2) with a message
bad() { # expected-message-fragment, then the command's arguments
  want=$1; shift
  "$exe" "$@" >/dev/null 2>"$dir/err"
  rc=$?
  [ $rc -eq 2 ] && grep -q -- "$want" "$dir/err" || fail "$* -> rc $rc, $(cat "$dir/err") (wanted exit 2 and '$want')"
}
gen=(generate -m $model -p "Hi" -n 8 --budget 0.5)
bad "finite score" "${gen[@]}" --policy retention --policy-file "$dir/retention.gguf" --learned-threshold nan
bad "finite score" "${gen[@]}" --policy retention --policy-file "$dir/retention.gguf" --learned-threshold inf
bad "finite score" "${gen[@]}" --policy retention --policy-file "$dir/retention.gguf" --learned-threshold 1e99
bad "finite score" "${gen[@]}" --policy indexer --policy-file "$dir/indexer.gguf" --learned-threshold abc
bad "needs a learned policy" "${gen[@]}" --policy h2o --learned-threshold -3
bad "fraction in \[0, 1\]" "${gen[@]}" --policy retention --policy-file "$dir/retention.gguf" --floor 1.5
bad "fraction in \[0, 1\]" "${gen[@]}" --policy adakv --floor -0.1
bad "applies to adakv" "${gen[@]}" --policy snapkv --floor 0.2
bad "^kvsieve generate: --budget, --floor need --policy$" "${gen[@]}" --floor 0.2
bad "needs a learned policy" eval -m $model --text "$text" --policies h2o,snapkv --budgets 0.25 --ctx 48 --windows 1 \
  --learned-threshold -3
# refusals
"$exe" eval -m $model --text "$text" --policies rl --policy-file "$dir/retention.gguf" --budgets 0.25 --ctx 48 \
  --windows 1 >/dev/null 2>"$dir/err"
[ $? -eq 2 ] && grep -q "retention" "$dir/err" || fail "wrong kind not refused: $(cat "$dir/err")"
"$exe" generate -m $model -p "Hi" -n 8 --policy indexer --budget 0.5 >/dev/null 2>"$dir/err"
[ $? -eq 2 ] && grep -q "policy-file" "$dir/err" || fail "missing --policy-file not refused"
"$exe" generate -m $model -p "Hi" -n 8 --policy indexer --policy-file "$text" --budget 0.5 >/dev/null 2>"$dir/err"
[ $? -eq 2 ] || fail "a text file taken as a policy file"
"$exe" train --kind nope -m $model --text "$text" --out "$dir/x.gguf" >/dev/null 2>&1
[ $? -eq 2 ] || fail "bad --kind accepted"
# bad values caught before any training: learning rate, context, output path, text
for args in "--lr 0" "--lr -1" "--steps -1" "--ctx 100000" "--out $dir"; do
  # shellcheck disable=SC2086
  "$exe" train --kind retention -m $model --text "$text" --out "$dir/x.gguf" $args >/dev/null 2>&1
  [ $? -eq 2 ] || fail "train $args accepted"
done
"$exe" train --kind retention -m $model --text "$dir" --out "$dir/x.gguf" >/dev/null 2>&1
[ $? -eq 2 ] || fail "a directory taken as --text"
# a diverging run says so (not "out of memory")
"$exe" train --kind retention -m $model --text "$text" --out "$dir/x.gguf" --steps 3 --ctx 32 --lr 1e30 \
  >/dev/null 2>"$dir/err"
grep -q "diverged" "$dir/err" || fail "divergence not reported: $(cat "$dir/err")"
echo "PASS"
