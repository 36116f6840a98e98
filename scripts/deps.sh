#!/usr/bin/env bash
# Installs the system packages the build needs when they are missing (fresh Debian machine).
# Today that is libzmq3-dev (cgo, for github.com/pebbe/zmq4), pkg-config, and Node.js with npm
# (make testdata fetches pinned tokenizers and the reference tokenizer from npm).
set -euo pipefail
need=()
dpkg -s libzmq3-dev >/dev/null 2>&1 || need+=(libzmq3-dev)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
command -v npm >/dev/null 2>&1 || need+=(nodejs npm) # make testdata: pinned tokenizers and the oracle
if [ ${#need[@]} -eq 0 ]; then exit 0; fi
echo "deps: installing ${need[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
