# syntax=docker/dockerfile:1.7
# Image of the node agent (agent.cli run); NVML comes from the host driver via the NVIDIA runtime.
# Build from the repository root:  docker build -f docker/agent.Dockerfile -t sparse-agent .
# Multi-stage: wheels are built in "build" (with compilers if needed), only the venv is copied
# into the runtime stage. Non-root (uid 65532), no writes outside /tmp: runs with
# readOnlyRootFilesystem (no .pyc written at run time, byte-code compiled at build time).
# Pin the base images by digest at release time (docker buildx imagetools inspect ...).
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY docker/constraints.txt /tmp/constraints.txt
RUN python -m venv /opt/sparse \
 && /opt/sparse/bin/pip install --constraint /tmp/constraints.txt pip setuptools wheel
COPY pyproject.toml README.md ./
COPY extender ./extender
COPY predictor ./predictor
COPY agent ./agent
COPY bench ./bench
COPY webhook ./webhook
RUN /opt/sparse/bin/pip install --constraint /tmp/constraints.txt "." nvidia-ml-py \
 && /opt/sparse/bin/python -m compileall -q /opt/sparse

FROM ${PYTHON_IMAGE}
# `make images` (hack/build-images.sh) names the image as the chart does and sets REVISION,
# the git commit, which shows as sparse_build_info{revision}.
ARG REVISION=unknown
ARG VERSION=""
LABEL org.opencontainers.image.source="https://github.com/sparse-gpu/sparse" \
      org.opencontainers.image.description="sparse agent" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.version="${VERSION}"
ENV SPARSE_REVISION=${REVISION} \
    PATH=/opt/sparse/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    TMPDIR=/tmp
COPY --from=build /opt/sparse /opt/sparse
USER 65532:65532
EXPOSE 9400
ENTRYPOINT ["python", "-m", "agent.cli"]
CMD ["run", "--in-cluster"]
