#!/usr/bin/env bash
# install_deps.sh: installs bt's build and run-time dependencies from Debian's packages.
# Idempotent and quiet when everything is already installed. Needs root (or sudo).
#   bash scripts/install_deps.sh           build + test dependencies
#   bash scripts/install_deps.sh --python  also python3-torch/numpy/pil (fixture generators
#                                          and side-by-side benchmarks; never needed to test)
set -euo pipefail

packages=(build-essential meson ninja-build pkg-config python3
          libopenblas-dev libdnnl-dev libjpeg62-turbo-dev libcjson-dev
          libpng-dev libwebp-dev  # PNG and WebP images (src/data/image_png.c, image_webp.c)
          libopenmpi-dev openmpi-bin valgrind help2man
          python3-venv  # test only: scripts/check_doc_commands.sh runs the docs' venv step
          iproute2  # test only: ip netns, veth (tests/test_netns.sh)
          chromium zlib1g-dev  # test only: report.html rendered headless, PNG decoded
          clang libclang-rt-14-dev)  # test only: clang build, libFuzzer, sanitizers
if [ "${1:-}" = "--python" ]; then
    packages+=(python3-torch python3-numpy python3-pil python3-regex)
fi

missing=()
for p in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
echo "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
