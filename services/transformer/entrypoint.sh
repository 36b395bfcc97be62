#!/bin/sh
# Transformer: a thin wrapper; the behaviour lives in the packages behind the `mlops` CLI.
# Config comes from MLOPS_PROFILE and MLOPS__SECTION__KEY env vars (set by the Kubernetes manifests).
set -eu
exec mlops serve --role transformer "$@"
