#!/usr/bin/env bash
# Installs Debian's chromium for the browser tests (pytest -m browser), only when it is missing.
# Called from the Makefile's test target; needs root (CI containers) or sudo.
set -euo pipefail

if command -v chromium >/dev/null 2>&1; then
    echo "chromium already installed: $(command -v chromium)"
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO="sudo"
    else
        echo "install_chromium.sh: chromium is missing and this user is not root (no sudo):" \
             "the browser tests will be skipped; install it with: apt-get install -y chromium" >&2
        exit 0
    fi
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y chromium
echo "installed chromium: $(command -v chromium)"
