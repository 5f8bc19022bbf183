#!/usr/bin/env bash
# Builds nodetopo-testnode (pause, workload and deviceplugin for the single-node test cluster)
# as a static binary (CGO_ENABLED=0) into <repo>/target/node-tools/nodetopo-testnode (or
# $NODETOPO_NODE_TOOLS_DIR), once per go.mod/go.sum/*.go content and Go version, under a
# flock; see ../go-build-common.sh. Prints the binary's path on stdout; exits non-zero with
# Go's error when the build fails.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
source "$here/../go-build-common.sh"
export CGO_ENABLED=0
go_build_once nodetopo-testnode "$here" \
    "${NODETOPO_NODE_TOOLS_DIR:-$repo/target/node-tools}" \
    "the test node tools (pause, workload, device plugin)"
