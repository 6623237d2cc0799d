# shellcheck shell=bash
# tools/common.sh — the set-up shared by tools/demo.sh and tools/test.sh (sourced, not run).
#
# kvs_setup: installs missing Debian packages (as root; otherwise prints the apt-get command),
# exports the environment the tools and tests need, configures the build directory with meson
# (reconfiguring an existing one) and builds it with ninja. Works from any current directory.
#
# Environment (all optional):
#   KVSIEVE_BUILD_DIR   build directory (default: build/ in the source tree)
#   KVSIEVE_MESON_ARGS  extra arguments for meson setup, e.g. "-Dvulkan=disabled"
#   KVSIEVE_NO_INSTALL  1: never call apt-get, only report what is missing
#   KVSIEVE_MODELS      model directory searched first (default: none; then the repository's
#                       models/, then ../shared/models next to the source tree: kvs_model_locate)
#   POCL_CACHE_DIR      PoCL kernel cache (default: pocl-cache/ in the build directory)
#   CK_DEFAULT_TIMEOUT  Check per-test timeout in seconds (default: 600; cold GPU compiles are slow)
#   OMP_WAIT_POLICY     OpenMP idle threads (default: passive, see kvs_export_env)

KVSIEVE_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
KVSIEVE_BUILD_DIR="${KVSIEVE_BUILD_DIR:-$KVSIEVE_ROOT/build}"
# shellcheck disable=SC2034  # used by the scripts that source this file
KVSIEVE_BIN="$KVSIEVE_BUILD_DIR/tools/kvsieve"

# Needed to build kvsieve at all (CPU backend, CLI, tests).
KVSIEVE_PKGS_REQUIRED=(
  gcc libc6-dev meson ninja-build pkg-config python3 check libopenblas-dev libjson-c-dev
)
# The rest of the toolchain (../shared/TOOLCHAIN.md): the OpenCL and Vulkan backends, their CPU
# drivers (PoCL, lavapipe), the validation layer and the shader compilers.
KVSIEVE_PKGS_OPTIONAL=(
  opencl-headers ocl-icd-opencl-dev ocl-icd-libopencl1 pocl-opencl-icd clinfo libclblast-dev
  libvulkan-dev mesa-vulkan-drivers vulkan-tools vulkan-validationlayers glslang-tools glslc
  spirv-tools python3-numpy
)

kvs_log() {
  printf '[kvsieve] %s\n' "$*" >&2
}

kvs_die() {
  kvs_log "error: $*"
  exit 1
}

# Prints the packages of "$@" that dpkg does not list as installed, one per line.
kvs_missing_packages() {
  local p
  for p in "$@"; do
    if ! dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q 'ok installed'; then
      printf '%s\n' "$p"
    fi
  done
}

kvs_install_packages() {
  if ! command -v dpkg-query >/dev/null 2>&1; then
    kvs_log "not a Debian system: install the equivalents of: ${KVSIEVE_PKGS_REQUIRED[*]} ${KVSIEVE_PKGS_OPTIONAL[*]}"
    return 0
  fi
  local missing_req missing_opt
  mapfile -t missing_req < <(kvs_missing_packages "${KVSIEVE_PKGS_REQUIRED[@]}")
  mapfile -t missing_opt < <(kvs_missing_packages "${KVSIEVE_PKGS_OPTIONAL[@]}")
  local missing=("${missing_req[@]}" "${missing_opt[@]}")
  if ((${#missing[@]} == 0)); then
    return 0
  fi
  local cmd="DEBIAN_FRONTEND=noninteractive apt-get install -y ${missing[*]}"
  if [[ "$(id -u)" == 0 && "${KVSIEVE_NO_INSTALL:-0}" != 1 ]]; then
    kvs_log "installing missing packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update </dev/null || kvs_die "apt-get update failed"
    apt-get install -y "${missing[@]}" </dev/null || kvs_die "apt-get install failed: ${missing[*]}"
    return 0
  fi
  kvs_log "missing packages: ${missing[*]}"
  kvs_log "install them with:  sudo apt-get update && sudo $cmd"
  if ((${#missing_req[@]} > 0)); then
    kvs_die "cannot build without: ${missing_req[*]}"
  fi
  kvs_log "continuing without them (the OpenCL/Vulkan backends or their drivers may be left out)"
}

# Exports what the tools and tests expect; call after the build directory exists.
kvs_export_env() {
  # Models: kvs_model_locate looks in $KVSIEVE_MODELS (when set), the repository's models/, then
  # ../shared/models; the scripts find them the same way (kvs_model_path).
  if [[ -n "${KVSIEVE_MODELS:-}" ]]; then
    export KVSIEVE_MODELS
  fi
  export CK_DEFAULT_TIMEOUT="${CK_DEFAULT_TIMEOUT:-600}"
  # OpenMP threads that spin at barriers stall badly when cores are shared (meson runs tests in
  # parallel; CI machines have 2 cores): measured 150 s vs 2.7 s for the CPU generate test under
  # load. Sleeping waits cost little on an idle machine.
  export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
  export POCL_CACHE_DIR="${POCL_CACHE_DIR:-$KVSIEVE_BUILD_DIR/pocl-cache}"
  if ! mkdir -p "$POCL_CACHE_DIR" 2>/dev/null || [[ ! -w "$POCL_CACHE_DIR" ]]; then
    POCL_CACHE_DIR="$(mktemp -d "${TMPDIR:-/tmp}/kvsieve-pocl.XXXXXX")"
    export POCL_CACHE_DIR
  fi
  if [[ -n "${KVSIEVE_MODELS:-}" && ! -d "$KVSIEVE_MODELS" ]]; then
    kvs_log "note: KVSIEVE_MODELS=$KVSIEVE_MODELS does not exist: models are looked up in $KVSIEVE_ROOT/models and ../shared/models instead"
  fi
}

# The model directories in lookup order (the same as kvs_model_locate): $KVSIEVE_MODELS when set, the
# repository's models/, ../shared/models next to the source tree; one a line, existing ones only.
kvs_model_dirs() {
  local d
  for d in ${KVSIEVE_MODELS:+"$KVSIEVE_MODELS"} "$KVSIEVE_ROOT/models" "$(dirname "$KVSIEVE_ROOT")/shared/models"; do
    [[ -d "$d" ]] && printf '%s\n' "$d"
  done
  return 0
}

# Prints the path of model NAME (a path that exists, else the first of kvs_model_dirs holding it);
# returns 1 and prints nothing when none has it.
kvs_model_path() {
  local name="$1" d
  if [[ -e "$name" ]]; then
    printf '%s\n' "$name"
    return 0
  fi
  while read -r d; do
    if [[ -e "$d/$name" ]]; then
      printf '%s\n' "$d/$name"
      return 0
    fi
  done < <(kvs_model_dirs)
  return 1
}

kvs_configure() {
  local extra=()
  if [[ -n "${KVSIEVE_MESON_ARGS:-}" ]]; then
    read -r -a extra <<<"$KVSIEVE_MESON_ARGS"
  fi
  if [[ -f "$KVSIEVE_BUILD_DIR/meson-private/coredata.dat" ]]; then
    meson setup --reconfigure "${extra[@]}" "$KVSIEVE_BUILD_DIR" "$KVSIEVE_ROOT" ||
      kvs_die "meson setup --reconfigure $KVSIEVE_BUILD_DIR failed (delete the directory to start afresh)"
  else
    meson setup "${extra[@]}" "$KVSIEVE_BUILD_DIR" "$KVSIEVE_ROOT" ||
      kvs_die "meson setup $KVSIEVE_BUILD_DIR failed"
  fi
  kvs_log "configured $KVSIEVE_BUILD_DIR"
}

kvs_build() {
  ninja -C "$KVSIEVE_BUILD_DIR" || kvs_die "build failed"
}

# Everything a script needs before it runs its job.
kvs_setup() {
  kvs_install_packages
  kvs_configure
  kvs_build
  kvs_export_env
}
