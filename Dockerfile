# syntax=docker/dockerfile:1
# The gpustack-operator image: one console script for `worker` and `device-manager`.
# Build: make docker-build IMG=<registry>/gpustack-operator:<tag>

# --- builder: resolve the locked dependencies into a self-contained virtual environment ----
FROM python:3.12-slim AS builder
ENV UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy \
    UV_PYTHON_DOWNLOADS=never \
    UV_PROJECT_ENVIRONMENT=/opt/venv
RUN pip install --no-cache-dir uv==0.13.8
WORKDIR /src
# Dependencies first (cached while only the code changes), exactly as uv.lock pins them.
COPY pyproject.toml uv.lock README.md ./
RUN uv sync --frozen --no-dev --extra amd --no-install-project
# Then the project itself, installed as a wheel (no editable link back to /src).
COPY gpustack_operator ./gpustack_operator
COPY controllers ./controllers
RUN uv sync --frozen --no-dev --extra amd --no-editable

# --- final: the interpreter, the venv and nothing else (no compiler, no uv, no sources) ----
FROM python:3.12-slim
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
