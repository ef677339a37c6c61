#!/usr/bin/env bash
# Installs every build and test dependency of kimi with apt, by package name.
# Idempotent: packages already present are skipped without touching the network.
set -euo pipefail

PACKAGES=(
  cmake ninja-build ccache gcc g++ python3 procps
  llvm-22-dev libmlir-22-dev mlir-22-tools llvm-22-tools
  libgtest-dev libxxhash-dev libpcre2-dev libcpp-httplib-dev pkg-config nodejs curl
  clang-22 libclang-rt-22-dev
  libflatbuffers-dev flatbuffers-compiler
  libopenmpi-dev openmpi-bin
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

# npm comes with NodeSource's nodejs; with Debian's it is a package of its own.
command -v npm >/dev/null 2>&1 || missing+=(npm)

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "setup: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"

if [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "setup: CUDA toolkit found at /usr/local/cuda (GPU parts will build)"
else
  echo "setup: no CUDA toolkit at /usr/local/cuda (GPU parts are skipped)"
fi
