#!/usr/bin/env bash
# Builds the kubelet oracle into <repo>/target/kubelet-oracle/kubelet-oracle (or
# $NODETOPO_ORACLE_DIR), once per go.mod/go.sum/*.go content and Go version, under a flock;
# see ../go-build-common.sh. Prints the binary's path on stdout; exits non-zero with Go's
# error when the build fails.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
source "$here/../go-build-common.sh"
go_build_once kubelet-oracle "$here" \
    "${NODETOPO_ORACLE_DIR:-$repo/target/kubelet-oracle}" \
    "the kubelet oracle"
