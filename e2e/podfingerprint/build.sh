#!/usr/bin/env bash
# Builds the pod fingerprint oracle into <repo>/target/podfingerprint-oracle/podfingerprint-oracle
# (or $NODETOPO_PODFINGERPRINT_DIR), once per go.mod/go.sum/*.go content and Go version, under
# a flock; see ../go-build-common.sh. Prints the binary's path on stdout; exits non-zero with
# Go's error when the build fails.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
source "$here/../go-build-common.sh"
go_build_once podfingerprint-oracle "$here" \
    "${NODETOPO_PODFINGERPRINT_DIR:-$repo/target/podfingerprint-oracle}" \
    "the pod fingerprint oracle"
