#!/usr/bin/env bash
# Builds the kubelet checkpoint oracle into <repo>/target/kubelet-checkpoint-oracle/
# kubelet-checkpoint-oracle (or $NODETOPO_CHECKPOINT_ORACLE_DIR), once per go.mod/go.sum/*.go
# content and Go version, under a flock; see ../go-build-common.sh. Prints the binary's path
# on stdout; exits non-zero with Go's error when the build fails.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
source "$here/../go-build-common.sh"
go_build_once kubelet-checkpoint-oracle "$here" \
    "${NODETOPO_CHECKPOINT_ORACLE_DIR:-$repo/target/kubelet-checkpoint-oracle}" \
    "the kubelet checkpoint oracle"
