#!/usr/bin/env bash
# Installs the Debian 12 packages Weft builds with, if any is missing.
set -euo pipefail

packages=(
  cmake ninja-build g++ python3
  llvm-22-dev llvm-22-tools libmlir-22-dev mlir-22-tools
  libgtest-dev
  libonnx-dev libprotobuf-dev protobuf-compiler libonnx-testdata python3-onnx python3-torch
  libopenblas-dev libabsl-dev
  pybind11-dev python3-dev python3-numpy python3-pytest
  libopenmpi-dev openmpi-bin
  clang libclang-rt-14-dev
  chromium
)

missing=()
for pkg in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "weft: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "weft: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
