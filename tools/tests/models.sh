# shellcheck shell=bash
# Sourced by the CLI test scripts (generate.sh, eval_tasks.sh): where the model fixtures are, in
# kvs_model_locate's order. Defines kvs_test_models MARKER, which prints the folder to use:
# $KVSIEVE_MODELS when set (as given, even when it lacks MARKER: the script then skips with its
# own message), else $KVSIEVE_SOURCE_ROOT/models (default root: .) when it holds the file MARKER
# (a bare clone has them), else $KVSIEVE_SOURCE_ROOT/../shared/models.
kvs_test_models() {
  local marker="$1" root="${KVSIEVE_SOURCE_ROOT:-.}"
  if [ -n "${KVSIEVE_MODELS:-}" ]; then
    printf '%s\n' "$KVSIEVE_MODELS"
  elif [ -f "$root/models/$marker" ]; then
    printf '%s\n' "$root/models"
  else
    printf '%s\n' "$root/../shared/models"
  fi
}
