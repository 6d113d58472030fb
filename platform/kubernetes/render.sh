#!/usr/bin/env bash
# The plain manifests, from the chart: `helm template` with the default values, release `tidal` in the namespace
# `tidal`. `make manifests` writes them to platform/kubernetes/tidal.yaml, for `kubectl apply` without Helm and for
# the tests that read Tidal's RBAC from there; tests/integration/test_helm_chart.py fails when that file is stale.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
HELM="$(bash "$HERE/../kube/build.sh" bindir helm)/helm"
cat <<'HEADER'
# GENERATED from platform/kubernetes/chart by `make manifests` (helm template, default values): do not edit.
# Without Helm: kubectl create namespace tidal, create the Secret tidal-secrets (docs/how-to/kubernetes.md), then
# kubectl apply -f platform/kubernetes/tidal.yaml
HEADER
"$HELM" template tidal "$HERE/chart" --namespace tidal
