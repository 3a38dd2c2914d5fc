#!/usr/bin/env bash
# `make image-test` (docs/deploy.md, "Building and testing the image"): build the image with
# podman on a Debian base made here from Debian's packages (no container registry needed),
# then run three commands in it the way deploy/ runs the worker: a non-root user, a read-only
# root filesystem, all capabilities dropped, no network; check that it holds no simulator
# (every product module imports without it; `sim` says how to get it). Prints the size.
#
# A fresh Debian machine needs nothing by hand: podman, runc and debootstrap are installed
# with apt-get when missing (as root, or through passwordless sudo). The engine's settings
# live in a private containers.conf under .cache/image/, not in /etc.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS

IMG=${IMG:-localhost/gpustack-operator:image-test}
DEBIAN_SUITE=${DEBIAN_SUITE:-bookworm}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
# python3-venv: the Dockerfile's builder installs uv into a venv (Debian's pip is PEP 668-locked).
BASE_PACKAGES=python3,python3-venv,ca-certificates
# Bump when the base recipe changes: the cached base is keyed by it, the suite and the packages.
BASE_RECIPE=1
CACHE=.cache/image
CA_BUNDLE=${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}

say() { printf 'image-test: %s\n' "$*" >&2; }
die() { say "FAILED: $*"; exit 1; }

as_root=()
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        as_root=(sudo -n)
    else
        die "needs root or passwordless sudo (to install podman with apt-get, run debootstrap and" \
            "use the root podman store); run it as root or set up sudo"
    fi
fi

# --- 1. the tools ---------------------------------------------------------------------------
missing=()
for tool in podman:podman runc:runc debootstrap:debootstrap; do
    command -v "${tool%%:*}" >/dev/null 2>&1 || missing+=("${tool#*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
    command -v apt-get >/dev/null 2>&1 ||
        die "missing ${missing[*]} and no apt-get to install them: install them by hand"
    say "installing ${missing[*]} with apt-get"
    "${as_root[@]}" apt-get update -qq ||
        die "apt-get update failed: check the machine's Debian mirror (/etc/apt/sources.list*)"
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        --no-install-recommends podman runc debootstrap containernetworking-plugins >/dev/null ||
        die "apt-get install podman runc debootstrap failed (see above)"
fi

# --- 2. the engine's settings, private to this script -----------------------------------------
# runc rather than crun (crun fails on hybrid cgroup hierarchies), cgroupfs rather than systemd
# (no systemd session needed), no default ulimits (raising nofile fails in unprivileged hosts).
mkdir -p "$CACHE"
cat >"$CACHE/containers.conf" <<'EOF'
[containers]
default_ulimits = []

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
export CONTAINERS_CONF="$PWD/$CACHE/containers.conf"
podman() { "${as_root[@]}" env CONTAINERS_CONF="$CONTAINERS_CONF" podman "$@"; }
podman info >/dev/null 2>"$CACHE/podman-info.err" ||
    die "podman cannot start here: $(tail -n 3 "$CACHE/podman-info.err")"

# --- 3. the Debian base, made once and cached ---------------------------------------------------
key=$(printf '%s\n' "$BASE_RECIPE" "$DEBIAN_SUITE" "$BASE_PACKAGES" | sha256sum | cut -c1-12)
BASE_IMG=localhost/gpustack-operator-base:$DEBIAN_SUITE-$key
BASE_TAR=$CACHE/base-$DEBIAN_SUITE-$key.tar
if ! podman image exists "$BASE_IMG"; then
    if [ ! -s "$BASE_TAR" ]; then
        say "making the $DEBIAN_SUITE base with debootstrap (about a minute; cached in $BASE_TAR)"
        rootfs=$(mktemp -d "${TMPDIR:-/tmp}/image-test-rootfs.XXXXXX")
        # shellcheck disable=SC2064  # expand now: the path is fixed
        trap "${as_root[*]} rm -rf '$rootfs'" EXIT
        "${as_root[@]}" debootstrap --variant=minbase --include="$BASE_PACKAGES" \
            "$DEBIAN_SUITE" "$rootfs" "$DEBIAN_MIRROR" >"$CACHE/debootstrap.log" 2>&1 ||
            die "debootstrap of $DEBIAN_SUITE from $DEBIAN_MIRROR failed: see $CACHE/debootstrap.log" \
                "(set DEBIAN_MIRROR to a reachable Debian mirror)"
        "${as_root[@]}" rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
        "${as_root[@]}" tar -C "$rootfs" -cf "$BASE_TAR.part" . && mv "$BASE_TAR.part" "$BASE_TAR"
        "${as_root[@]}" rm -rf "$rootfs"
        trap - EXIT
    fi
    podman import --quiet "$BASE_TAR" "$BASE_IMG" >/dev/null || die "podman import $BASE_TAR failed"
fi
say "base image $BASE_IMG"

# --- 4. the image --------------------------------------------------------------------------------
# The builder reaches PyPI through the host's network; the host's CA bundle is mounted for
# machines behind a TLS-inspecting proxy (build-time only: the final stage never sees it).
[ -r "$CA_BUNDLE" ] || die "no CA bundle at $CA_BUNDLE: set SSL_CERT_FILE to the machine's bundle"
say "building $IMG"
podman build --quiet --network host --pull=never \
    --build-arg BASE_IMAGE="$BASE_IMG" \
    --volume "$(realpath "$CA_BUNDLE"):/etc/ssl/certs/build-ca.crt:ro" \
    --build-arg SSL_CERT_FILE=/etc/ssl/certs/build-ca.crt \
    --build-arg PIP_CERT=/etc/ssl/certs/build-ca.crt \
    -t "$IMG" . >"$CACHE/build.log" 2>&1 ||
    die "podman build failed: $(tail -n 5 "$CACHE/build.log") (all of it in $CACHE/build.log)"

# --- 5. the four commands, run as deploy/ runs the worker -----------------------------------------
# deploy/base/deployment.yaml: runAsUser/runAsGroup 65532, readOnlyRootFilesystem, no privilege
# escalation, every capability dropped. The only writable place is a tmpfs at /tmp.
names=()
cleanup() {
    local name
    for name in "${names[@]}"; do podman rm --force --ignore "$name" >/dev/null 2>&1 || true; done
}
trap cleanup EXIT
in_image() {
    local label=$1 name
    shift
    name=gpustack-image-test-$$-${#names[@]}
    names+=("$name")
    if [ ${#entrypoint[@]} -eq 0 ]; then say "run: gpustack-operator $*"; else say "check: $label"; fi
    podman run --rm --name "$name" --user 65532:65532 --read-only --tmpfs /tmp:rw,size=64m \
        --cap-drop all --security-opt no-new-privileges --network none \
        --volume "$PWD/examples:/examples:ro" "${entrypoint[@]}" "$IMG" "$@" \
        >"$CACHE/$label.out" 2>"$CACHE/$label.err" ||
        die "'$*' failed in the image (exit $?): $(tail -n 5 "$CACHE/$label.err")"
}
entrypoint=()
expect() {
    grep -q -- "$2" "$CACHE/$1.out" ||
        die "$1: expected '$2' in its output, got: $(head -n 5 "$CACHE/$1.out")"
}

# The run is what deploy/ asks for: user 65532, and nothing outside /tmp can be written.
entrypoint=(--entrypoint python3)
in_image confinement -c 'import os, pathlib
assert (os.getuid(), os.getgid()) == (65532, 65532), f"runs as {os.getuid()}:{os.getgid()}"
mounts = {f[1]: f[3].split(",") for f in (m.split() for m in open("/proc/self/mounts"))}
assert "ro" in mounts["/"], f"root filesystem mounted {mounts[chr(47)]}"
pathlib.Path("/tmp/probe").write_text("the tmpfs is writable")
print("confined")'
expect confinement confined
entrypoint=()

version=$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("gpustack-operator"))' 2>/dev/null ||
    sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
in_image version --version
expect version "$version"
in_image detect device-manager detect
expect detect "manufacturers:"
in_image plan plan --nodes /examples/cluster.yaml
expect plan ClusterQueue
# The production image holds no simulator: not its distribution (gpustack_sim), not the CEL
# binding, and every product module imports without them (docs/simulator.md, "Where it runs").
entrypoint=(--entrypoint python3)
in_image product -c 'import importlib, importlib.util, pathlib, gpustack_operator as g
root = pathlib.Path(g.__file__).parent
names = sorted(".".join(("gpustack_operator", *p.relative_to(root).with_suffix("").parts))
               for p in root.rglob("*.py") if p.stem != "__main__")  # __main__ runs the CLI
assert importlib.util.find_spec("gpustack_sim") is None, "the simulator (gpustack_sim) is installed"
assert importlib.util.find_spec("cel") is None, "the CEL binding is installed"
for name in names:
    importlib.import_module(name.removesuffix(".__init__"))
print(f"imported {len(names)} modules, no simulator")'
expect product "no simulator"
entrypoint=()
name=gpustack-image-test-$$-sim
names+=("$name")
say "run: gpustack-operator sim --cluster /examples/cluster.yaml (must say how to get it)"
if podman run --rm --name "$name" --user 65532:65532 --read-only --network none \
    --volume "$PWD/examples:/examples:ro" "$IMG" sim --cluster /examples/cluster.yaml \
    >"$CACHE/sim.out" 2>"$CACHE/sim.err"; then
    die "sim ran in the production image: it must hold no simulator"
fi
grep -q "make demo" "$CACHE/sim.err" ||
    die "sim in the image did not say how to get the simulator: $(head -n 3 "$CACHE/sim.err")"

size=$(podman image inspect --format '{{.Size}}' "$IMG")
say "passed in $((SECONDS - started)) s: $IMG runs --version, device-manager detect and plan," \
    "imports every product module without the simulator, and sim says how to get it" \
    "as 65532:65532 with a read-only root filesystem and no network"
printf 'image size: %s MB (%s bytes)\n' "$((size / 1000000))" "$size"
