#!/usr/bin/env bash
# System packages the tests need: redis-server (the real server, started by the tests) and
# openssl (certificates of the local control plane and the webhook). Debian packages only.
set -euo pipefail
need=()
command -v redis-server >/dev/null || need+=(redis-server)
command -v openssl >/dev/null || need+=(openssl)
[ ${#need[@]} -eq 0 ] && exit 0
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
