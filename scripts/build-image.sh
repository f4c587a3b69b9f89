#!/usr/bin/env bash
# Build vllm-advisor's container image from the Dockerfile (`make image`), then smoke-run it.
# Idempotent: the base image and the build's layer cache are reused; run it again at will.
#
# Usage: scripts/build-image.sh
# Env:   IMAGE       the tag [ghcr.io/vllm-advisor/vllm-advisor:VERSION, VERSION from pyproject.toml]
#        EXTRAS      extras of the wheel, comma-separated, e.g. plugin [none]
#        BASE        pinned | debian | auto [auto]
#                      pinned: the Dockerfile's python image, pinned by digest (needs its registry)
#                      debian: a base made here from Debian's packages (debootstrap --variant=minbase
#                              with python3 and python3-venv; needs root and a Debian mirror only),
#                              tagged localhost/vllm-advisor-base:SUITE; FORCE_BASE=1 remakes it
#                      auto:   pinned when it is present or can be pulled, else debian (said so)
#        WHEELS_DIR  build without any index and with no network: DIR holds the dependencies'
#                    wheels and hatchling's, for the base's Python. WHEELS_DIR=host fills
#                    build/image-wheels with this machine's pip (its config: mirrors, CA), which
#                    must run the base's Python X.Y (PYTHON, default python3).
#                    Unset: the build's pip reaches its index over the host's network.
#        BUILDER     podman | docker [podman; scripts/install-image-deps.sh installs it]
#        DEBIAN_MIRROR, DEBIAN_SUITE   for BASE=debian [apt's first Debian URI; this host's codename]
#        SMOKE=0     skip the smoke run (--version; the user is UID 10001)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

say() { echo "build-image: $*"; }
die() {
  echo "build-image: error: $*" >&2
  exit 1
}
since() { echo "$(($(date +%s) - $1)) s"; }

PYTHON=${PYTHON:-python3}
VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml | head -1)
[[ -n $VERSION ]] || die "no version in pyproject.toml"
IMAGE=${IMAGE:-ghcr.io/vllm-advisor/vllm-advisor:$VERSION}
EXTRAS=${EXTRAS:-}
BASE=${BASE:-auto}
BUILDER=${BUILDER:-podman}
PINNED=$(sed -n 's/^ARG BASE_IMAGE=\(.*\)$/\1/p' Dockerfile | head -1)
[[ -n $PINNED ]] || die "no 'ARG BASE_IMAGE=' default in the Dockerfile"
case $BASE in pinned | debian | auto) ;; *) die "BASE=$BASE: give pinned, debian or auto" ;; esac
[[ $EXTRAS =~ ^[A-Za-z0-9_.,-]*$ ]] || die "EXTRAS=$EXTRAS: comma-separated extra names only"

# ---------------------------------------------------------------- the builder
B=()
BUILD_FLAGS=()
case $BUILDER in
  podman)
    if ! command -v podman >/dev/null; then
      say "podman missing: installing it (scripts/install-image-deps.sh)"
      bash scripts/install-image-deps.sh
    fi
    B=(podman)
    # crun (podman's default runtime) refuses hosts with cgroup controllers on both v1 and v2;
    # runc runs there and everywhere else
    if command -v runc >/dev/null; then B+=(--runtime runc); fi
    # Without CAP_SYS_RESOURCE a container may not get higher limits than its starter has, and
    # podman asks for more by default (nofile 1048576; nproc 32768, more than podman keeps for
    # itself): ask for the host's hard limits instead, which also hold where more is allowed.
    nofile=$(ulimit -Hn)
    [[ $nofile == unlimited ]] && nofile=1048576
    nproc=$(ulimit -Hu)
    [[ $nproc == unlimited || $nproc -gt 32768 ]] && nproc=32768
    ULIMITS=(--ulimit "nofile=$nofile:$nofile" --ulimit "nproc=$nproc:$nproc")
    BUILD_FLAGS+=(--format docker "${ULIMITS[@]}") # docker format: OCI has no HEALTHCHECK
    RUN_FLAGS=("${ULIMITS[@]}")
    image_exists() { podman image exists "$1"; }
    ;;
  docker)
    command -v docker >/dev/null || die "BUILDER=docker but no docker command"
    docker info >/dev/null 2>&1 || die "BUILDER=docker but its engine does not answer ($(docker info 2>&1 | grep -m1 -i error || true))"
    B=(docker)
    RUN_FLAGS=()
    image_exists() { docker image inspect "$1" >/dev/null 2>&1; }
    ;;
  *) die "BUILDER=$BUILDER: give podman or docker" ;;
esac

# ---------------------------------------------------------------- the base image
debian_base() {
  local suite mirror tag rootfs t0
  if [[ -n ${DEBIAN_SUITE:-} ]]; then
    suite=$DEBIAN_SUITE
  else
    local id codename
    id=$(sed -n 's/^ID=//p' /etc/os-release 2>/dev/null | tr -d '"')
    codename=$(sed -n 's/^VERSION_CODENAME=//p' /etc/os-release 2>/dev/null | tr -d '"')
    suite=bookworm # a Debian suite also where the host is not Debian
    if [[ $id == debian && -n $codename ]]; then suite=$codename; fi
  fi
  tag=localhost/vllm-advisor-base:$suite
  if image_exists "$tag" && [[ -z ${FORCE_BASE:-} ]]; then
    say "base: $tag (made earlier; FORCE_BASE=1 remakes it)"
    BASE_IMAGE=$tag
    return
  fi
  [[ $(id -u) -eq 0 ]] || die "BASE=debian: debootstrap needs root"
  command -v debootstrap >/dev/null || bash scripts/install-image-deps.sh
  mirror=${DEBIAN_MIRROR:-}
  if [[ -z $mirror ]]; then
    mirror=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null | sed -n 's/^URIs: *\([^ ]*\).*/\1/p' | grep -v security | head -1 || true)
  fi
  if [[ -z $mirror ]]; then
    mirror=$(sed -n 's/^deb  *\(\[[^]]*\] *\)\{0,1\}\(http[^ ]*\) .*/\2/p' /etc/apt/sources.list 2>/dev/null | grep -v security | head -1 || true)
  fi
  mirror=${mirror:-http://deb.debian.org/debian}
  rootfs=$(mktemp -d "${TMPDIR:-/tmp}/vllm-advisor-rootfs.XXXXXX")
  trap 'rm -rf "$rootfs"' EXIT
  say "base: debootstrap --variant=minbase $suite from $mirror (python3, python3-venv) ..."
  t0=$(date +%s)
  if ! debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
    "$suite" "$rootfs" "$mirror" >"$rootfs.log" 2>&1; then
    tail -5 "$rootfs.log" >&2
    die "debootstrap $suite from $mirror failed (log: $rootfs.log)"
  fi
  rm -f "$rootfs.log"
  say "base: debootstrap took $(since "$t0")"
  # The base trusts what this host trusts: a TLS-intercepting proxy's CA, where the host has
  # one, is what lets the build's pip reach its index.
  if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "$rootfs/usr/local/share/ca-certificates/"
    chroot "$rootfs" update-ca-certificates >/dev/null 2>&1 || die "update-ca-certificates failed in the base"
  fi
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb
  t0=$(date +%s)
  tar -C "$rootfs" -c . | "${B[@]}" import -q --change 'CMD ["python3"]' - "$tag" >/dev/null
  rm -rf "$rootfs"
  trap - EXIT
  say "base: imported as $tag in $(since "$t0")"
  BASE_IMAGE=$tag
}

BASE_IMAGE=
if [[ $BASE != debian ]]; then
  if image_exists "$PINNED"; then
    BASE_IMAGE=$PINNED
  elif err=$(timeout 300 "${B[@]}" pull -q "$PINNED" 2>&1); then
    BASE_IMAGE=$PINNED
  else
    err=$(echo "$err" | tail -1)
    [[ $BASE == pinned ]] && die "cannot pull $PINNED: $err"
    say "the pinned base cannot be pulled ($err): building on a Debian base made here (BASE=debian)"
  fi
fi
[[ -n $BASE_IMAGE ]] || debian_base

# ---------------------------------------------------------------- dependencies
BUILD_ARGS=(--build-arg "BASE_IMAGE=$BASE_IMAGE" --build-arg "EXTRAS=$EXTRAS")
if [[ $BASE_IMAGE != "$PINNED" ]]; then
  # Debian's ca-certificates bundle, where the base above added this host's CAs (pip otherwise
  # trusts only its own copy of certifi's)
  BUILD_ARGS+=(--build-arg PIP_CERT=/etc/ssl/certs/ca-certificates.crt)
fi
NETWORK=host # the host's DNS, routes and proxy: pip reaches what the host reaches
if [[ -n ${WHEELS_DIR:-} ]]; then
  if [[ $WHEELS_DIR == host ]]; then
    want=$("${B[@]}" run --rm "${RUN_FLAGS[@]}" --entrypoint python3 "$BASE_IMAGE" \
      -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null | tail -1)
    have=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    [[ $want == "$have" ]] || die "WHEELS_DIR=host: $PYTHON is Python $have, the base's is ${want:-unknown}: give PYTHON=python$want or drop WHEELS_DIR"
    WHEELS_DIR=$ROOT/build/image-wheels
    hatchling=$(sed -n 's/^requires = \["\(hatchling[^"]*\)"\]$/\1/p' pyproject.toml | head -1)
    t0=$(date +%s)
    rm -rf "$WHEELS_DIR"
    "$PYTHON" -m pip wheel -q --disable-pip-version-check -w "$WHEELS_DIR" "${hatchling:-hatchling}" \
      "$ROOT${EXTRAS:+[$EXTRAS]}" 2> >(grep -v "^WARNING: Location" >&2) || die "pip wheel failed"
    rm -f "$WHEELS_DIR"/vllm_advisor-*.whl
    say "wheels: $(find "$WHEELS_DIR" -name '*.whl' | wc -l) from this machine's pip (Python $have) in $(since "$t0")"
  fi
  [[ -d $WHEELS_DIR ]] || die "WHEELS_DIR=$WHEELS_DIR is not a folder"
  BUILD_ARGS+=(--build-context "wheels=$WHEELS_DIR" --build-arg PIP_NO_INDEX=1 --build-arg PIP_FIND_LINKS=/wheels)
  NETWORK=none
fi

# ---------------------------------------------------------------- build
REVISION=$(git rev-parse HEAD 2>/dev/null || echo unknown)
[[ $REVISION != unknown && -n $(git status --porcelain 2>/dev/null) ]] && REVISION+=-dirty
BUILD_ARGS+=(--build-arg "VERSION=$VERSION" --build-arg "REVISION=$REVISION"
  --build-arg "CREATED=$(date -u +%Y-%m-%dT%H:%M:%SZ)")
say "building $IMAGE on $BASE_IMAGE (EXTRAS=${EXTRAS:-none}, network: $NETWORK) ..."
t0=$(date +%s)
log=$(mktemp "${TMPDIR:-/tmp}/vllm-advisor-build.XXXXXX")
if ! "${B[@]}" build "${BUILD_FLAGS[@]}" --network "$NETWORK" "${BUILD_ARGS[@]}" -t "$IMAGE" . >"$log" 2>&1; then
  grep -v 'level=warning' "$log" | tail -25 >&2
  die "the build failed (whole log: $log)"
fi
rm -f "$log"
say "built $IMAGE in $(since "$t0")"

# ---------------------------------------------------------------- smoke
if [[ ${SMOKE:-1} != 0 ]]; then
  t0=$(date +%s)
  v=$("${B[@]}" run --rm "${RUN_FLAGS[@]}" "$IMAGE" --version 2>/dev/null) || die "$IMAGE --version failed"
  [[ $v == *"$VERSION"* ]] || die "$IMAGE --version said '$v', not $VERSION"
  uid=$("${B[@]}" run --rm "${RUN_FLAGS[@]}" --entrypoint id "$IMAGE" -u 2>/dev/null) || die "id failed in $IMAGE"
  [[ $uid == 10001 ]] || die "$IMAGE runs as UID $uid, not 10001"
  say "smoke: '$v' as UID $uid, in $(since "$t0")"
fi
echo "$IMAGE"
