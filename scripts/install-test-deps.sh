#!/bin/sh
# Install everything the test suite needs on a fresh Debian machine:
# the Cortex-M cross toolchain and QEMU (Debian packages), then this package with its test extras.
set -eu
cd "$(dirname "$0")/.."
if command -v apt-get >/dev/null 2>&1; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
        gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm >/dev/null
else
    echo "install-test-deps: no apt-get; install gcc-arm-none-eabi, libnewlib-arm-none-eabi and" \
         "qemu-system-arm yourself" >&2
fi
python3 -m pip install --quiet --editable ".[test]"
