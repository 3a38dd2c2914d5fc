# syntax=docker/dockerfile:1
# The gpustack-operator image: one console script for `worker` and `device-manager`.
# Build: make docker-build IMG=<registry>/gpustack-operator:<tag>
# BASE_IMAGE: any Debian-like image with python3 (>= 3.11, with its venv module), useradd and
# groupadd; `make image-test` builds on a Debian base it makes itself (docs/deploy.md).
ARG BASE_IMAGE=python:3.12-slim

# --- builder: resolve the locked dependencies into a self-contained virtual environment ----
FROM ${BASE_IMAGE} AS builder
ENV UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy \
    UV_PYTHON_DOWNLOADS=never \
    UV_PROJECT_ENVIRONMENT=/opt/venv
# A CA bundle for builds behind a TLS-inspecting proxy (unset by default; build-time only, the
# final stage never sees it).
ARG SSL_CERT_FILE
ARG PIP_CERT
# uv in a venv of its own: works with a distribution's python3 too, whose system pip refuses
# installs (PEP 668); the venv stays in this stage.
RUN python3 -m venv /opt/uv \
    && /opt/uv/bin/pip install --no-cache-dir --disable-pip-version-check uv==0.13.8
ENV PATH=/opt/uv/bin:$PATH
WORKDIR /src
# Dependencies first (cached while only the code changes), exactly as uv.lock pins them.
# --frozen installs from the lock without reading the workspace's other member, sim/ (the
# simulator, gpustack-sim): it is a dev-group dependency, which --no-dev leaves out, so it is
# neither copied nor installed (docs/deploy.md, "Building and testing the image").
COPY pyproject.toml uv.lock README.md ./
RUN uv sync --frozen --no-dev --extra amd --no-install-project
# Then the project itself, installed as a wheel (no editable link back to /src).
COPY gpustack_operator ./gpustack_operator
COPY controllers ./controllers
RUN uv sync --frozen --no-dev --extra amd --no-editable

# --- final: the interpreter, the venv and nothing else (no compiler, no uv, no sources) ----
FROM ${BASE_IMAGE}
RUN groupadd --system --gid 65532 gpustack \
    && useradd --system --uid 65532 --gid 65532 --no-create-home --shell /usr/sbin/nologin gpustack
COPY --from=builder /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    _RUNNING_INSIDE_CONTAINER_=true
# The worker runs as this user; the device-manager DaemonSets override it with root
# (they must open device nodes, see docs/security.md).
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["gpustack-operator"]
CMD ["--help"]
