#!/usr/bin/env bash
# Builds the standalone kubelet (fake CRI) into <repo>/target/kubelet-standalone/
# kubelet-standalone (or $NODETOPO_KUBELET_STANDALONE_DIR), once per go.mod/go.sum/*.go content
# and Go version, under a flock; see ../go-build-common.sh. Prints the binary's path on
# stdout; exits non-zero with Go's error when the build fails.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
source "$here/../go-build-common.sh"
go_build_once kubelet-standalone "$here" \
    "${NODETOPO_KUBELET_STANDALONE_DIR:-$repo/target/kubelet-standalone}" \
    "the standalone kubelet (fake CRI)"
