#!/usr/bin/env bash
# Builds the real control plane of the test tier (docs/realcluster.md) from the Go modules this
# folder's go.mod pins: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and Kueue's
# manager. The binaries go to a cache outside the repository, keyed by the pins and the Go
# toolchain, so a second run only checks that they are there. Prints the binaries' folder last.
#
#   hack/realcluster/build.sh            build (or reuse) and print the folder
#   hack/realcluster/build.sh --dir      print the folder the pins select, build nothing
#
# GPUSTACK_REALCLUSTER_CACHE moves the cache (default: $XDG_CACHE_HOME or ~/.cache, then
# gpustack-operator/realcluster). A failure is one line naming the component and the reason,
# with the build log's path.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"

if ! command -v go >/dev/null 2>&1; then
    echo "real cluster: Go is not installed (install Go >= 1.26 to build the real control plane)" >&2
    exit 3
fi

# The pins: what this folder's go.mod and go.sum select, the etcd entry point and the toolchain.
key="$(cat "$here/go.mod" "$here/go.sum" "$here/cmd/etcd/main.go" "$here/build.sh" \
    <(go env GOVERSION GOOS GOARCH) | sha256sum | cut -c1-16)"
cache_root="${GPUSTACK_REALCLUSTER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpustack-operator/realcluster}"
bin="$cache_root/$key"
if [ "${1:-}" = "--dir" ]; then
    echo "$bin"
    exit 0
fi

kube_version="$(awk '$1 == "k8s.io/kubernetes" { print $2; exit }' "$here/go.mod")"
kueue_version="$(awk '$1 == "sigs.k8s.io/kueue" { print $2; exit }' "$here/go.mod")"
etcd_version="$(awk '$1 == "go.etcd.io/etcd/server/v3" { print $2; exit }' "$here/go.mod")"
minor="${kube_version#v1.}"
minor="${minor%%.*}"

components=(etcd kube-apiserver kube-controller-manager kube-scheduler kueue)
declare -A package=(
    [etcd]=./cmd/etcd
    [kube-apiserver]=k8s.io/kubernetes/cmd/kube-apiserver
    [kube-controller-manager]=k8s.io/kubernetes/cmd/kube-controller-manager
    [kube-scheduler]=k8s.io/kubernetes/cmd/kube-scheduler
    [kueue]=sigs.k8s.io/kueue/cmd/kueue
)
# Version stamps, as each project's own release build sets them (servers report them).
kube_ldflags="-X k8s.io/component-base/version.gitVersion=$kube_version \
-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor \
-X k8s.io/component-base/version.gitTreeState=clean"
declare -A ldflags=(
    [etcd]=""
    [kube-apiserver]="$kube_ldflags"
    [kube-controller-manager]="$kube_ldflags"
    [kube-scheduler]="$kube_ldflags"
    [kueue]="-X sigs.k8s.io/kueue/pkg/version.GitVersion=$kueue_version"
)

mkdir -p "$bin"
cd "$here"
for name in "${components[@]}"; do
    if [ -x "$bin/$name" ]; then
        continue
    fi
    log="$bin/$name.build.log"
    started=$SECONDS
    echo "real cluster: building $name (${package[$name]}) ..." >&2
    if ! CGO_ENABLED=0 go build -mod=readonly -trimpath \
        -ldflags "-s -w ${ldflags[$name]}" -o "$bin/$name.tmp" "${package[$name]}" >"$log" 2>&1; then
        reason="$(grep -v '^#' "$log" | head -n 1)"
        echo "real cluster: building $name failed: ${reason:-see the log} (log: $log)" >&2
        exit 1
    fi
    mv "$bin/$name.tmp" "$bin/$name"
    echo "real cluster: built $name in $((SECONDS - started)) s" >&2
done
printf '%s\n' "kubernetes=$kube_version" "kueue=$kueue_version" "etcd=$etcd_version" >"$bin/versions"
echo "$bin"
