#!/usr/bin/env bash
# Build (and optionally push) the three images the Helm chart runs, named exactly as the chart's
# defaults (charts/sparse/values.yaml: ghcr.io/sparse-gpu/sparse-<component>:<Chart appVersion>):
#
#   hack/build-images.sh                                   # or: make images
#   REGISTRY=registry.example.com/mirror TAG=dev PUSH=1 hack/build-images.sh
#   COMPONENTS="extender" hack/build-images.sh             # just one
#   DRY_RUN=1 hack/build-images.sh                         # print the commands only
#
#   ghcr.io/sparse-gpu/sparse-extender:<appVersion>   docker/extender.Dockerfile  (also the webhook)
#   ghcr.io/sparse-gpu/sparse-predictor:<appVersion>  docker/predictor.Dockerfile
#   ghcr.io/sparse-gpu/sparse-agent:<appVersion>      docker/agent.Dockerfile
#
# Builder (BUILDER=buildah|podman|docker, default: the first one found, in that order). buildah
# and podman need no daemon and run rootless (Debian/Ubuntu: apt-get install buildah uidmap;
# rootless also needs subuid/subgid ranges for the user). Docker needs its daemon:
#   docker build -f docker/extender.Dockerfile -t ghcr.io/sparse-gpu/sparse-extender:0.1.0 .
#   docker push ghcr.io/sparse-gpu/sparse-extender:0.1.0        (same for predictor, agent)
#
# Other knobs: PYTHON_IMAGE (base image, e.g. a mirror of python:3.11-slim-bookworm),
# BUILD_OPTS (extra builder flags, word-split), PLATFORM (e.g. linux/amd64). The git commit is
# baked in as SPARSE_REVISION (the `revision` label of sparse_build_info).
# REGISTRY replaces the registry host exactly as the chart's global.imageRegistry does, so
#   REGISTRY=registry.example.com/mirror TAG=dev PUSH=1 make images
#   helm install sparse charts/sparse --set global.imageRegistry=registry.example.com/mirror \
#     --set extender.image.tag=dev --set predictor.image.tag=dev --set agent.image.tag=dev
# (with the default TAG, the chart's appVersion, no tag needs setting).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

APP_VERSION=$(sed -n 's/^appVersion:[[:space:]]*"\{0,1\}\([^"]*\)"\{0,1\}[[:space:]]*$/\1/p' charts/sparse/Chart.yaml)
REGISTRY=${REGISTRY:-ghcr.io}
REGISTRY=${REGISTRY%/}
TAG=${TAG:-$APP_VERSION}
COMPONENTS=${COMPONENTS:-extender predictor agent}
REVISION=${REVISION:-$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}
PUSH=${PUSH:-0}
DRY_RUN=${DRY_RUN:-0}

log() { printf '[build-images %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

if [ -z "${BUILDER:-}" ]; then
  for b in buildah podman docker; do
    if command -v "$b" >/dev/null; then BUILDER=$b; break; fi
  done
fi
if [ -z "${BUILDER:-}" ]; then
  log "no image builder found: install buildah (daemonless; apt-get install buildah) or podman,"
  log "or use Docker (see the top of $0)"
  exit 1
fi
[ -n "$TAG" ] || { log "no TAG and no appVersion in charts/sparse/Chart.yaml"; exit 1; }

run() {
  printf '+ %s\n' "$*" >&2
  [ "$DRY_RUN" = 1 ] || "$@"
}

# shellcheck disable=SC2206  # BUILD_OPTS is meant to be word-split
extra=(${BUILD_OPTS:-})
[ -n "${PYTHON_IMAGE:-}" ] && extra+=(--build-arg "PYTHON_IMAGE=$PYTHON_IMAGE")
[ -n "${PLATFORM:-}" ] && extra+=(--platform "$PLATFORM")
case "$BUILDER" in
  buildah) build=(buildah build --layers) ;;
  podman) build=(podman build --layers) ;;
  docker) build=(docker build) ;;
  *) log "unknown BUILDER=$BUILDER (buildah, podman or docker)"; exit 1 ;;
esac

log "builder $BUILDER, registry $REGISTRY, tag $TAG, revision $REVISION"
built=()
for c in $COMPONENTS; do
  file=docker/$c.Dockerfile
  [ -f "$file" ] || { log "no $file (components: extender predictor agent)"; exit 1; }
  image=$REGISTRY/sparse-gpu/sparse-$c:$TAG
  log "building $image from $file"
  start=$(date +%s)
  run "${build[@]}" -f "$file" -t "$image" --build-arg "REVISION=$REVISION" \
    --build-arg "VERSION=$TAG" "${extra[@]}" .
  [ "$DRY_RUN" = 1 ] || log "built $image in $(( $(date +%s) - start )) s"
  built+=("$image")
done
if [ "$PUSH" = 1 ]; then
  for image in "${built[@]}"; do run "$BUILDER" push "$image"; done
fi
printf '%s\n' "${built[@]}"
