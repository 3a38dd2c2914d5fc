#!/usr/bin/env bash
# NFD's CRDs beside whatever NFD a cluster already runs (docs/deploy.md, "Beside an NFD of your
# own"). `make deploy` runs `install`, `make undeploy` runs `uninstall`.
#
#   install    create each CRD of deploy/nfd-crds that does not exist; update those this
#              project installed; leave every other one exactly as it is
#   uninstall  delete only the CRDs this project installed
#
# "This project installed it" is the worker's rule too (domain/bootstrap/prerequisites.py,
# installed_by_us): the label app.kubernetes.io/managed-by=gpustack-operator and no Helm
# release annotation meta.helm.sh/release-name. KUBECTL may carry flags
# (KUBECTL="kubectl --context=prod").
set -euo pipefail
shopt -s inherit_errexit

action=${1:-}
read -r -a kubectl <<<"${KUBECTL:-kubectl}"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
crds=("$here"/deploy/nfd-crds/*.yaml)

# Prints "absent", "ours" or "foreign (<who>)" for the CRD named $1.
owner() {
    local found
    found=$("${kubectl[@]}" get crd "$1" --ignore-not-found -o \
        'jsonpath={.metadata.name}|{.metadata.labels.app\.kubernetes\.io/managed-by}|{.metadata.annotations.meta\.helm\.sh/release-name}')
    if [[ -z $found ]]; then
        echo absent
        return
    fi
    local managed_by release
    IFS='|' read -r _ managed_by release <<<"$found"
    if [[ $managed_by == gpustack-operator && -z $release ]]; then
        echo ours
    elif [[ -n $release ]]; then
        echo "foreign (Helm release $release)"
    else
        echo "foreign (managed-by: ${managed_by:-none})"
    fi
}

case $action in
install)
    for file in "${crds[@]}"; do
        name=$(basename "$file" .yaml)
        state=$(owner "$name")
        case $state in
        absent) "${kubectl[@]}" create --save-config -f "$file" ;;
        ours) "${kubectl[@]}" apply -f "$file" ;;
        *) echo "customresourcedefinition $name exists, $state: left as is; the worker uses that NFD" ;;
        esac
    done
    ;;
uninstall)
    for file in "${crds[@]}"; do
        name=$(basename "$file" .yaml)
        state=$(owner "$name")
        case $state in
        ours) "${kubectl[@]}" delete crd "$name" --ignore-not-found ;;
        absent) ;;
        *) echo "customresourcedefinition $name is not ours ($state): left as is" ;;
        esac
    done
    ;;
*)
    echo "usage: $0 install|uninstall" >&2
    exit 2
    ;;
esac
