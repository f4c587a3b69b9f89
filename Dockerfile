# syntax=docker/dockerfile:1
# vllm-advisor's container image: the console script `vllm-advisor` in a virtual environment at
# /opt/venv, run as the unprivileged UID/GID 10001. docs/image.md explains the choices;
# scripts/build-image.sh (`make image`) builds it with podman or docker.
#
#   docker build -t ghcr.io/vllm-advisor/vllm-advisor:0.1.0 .
#   docker build --build-arg EXTRAS=plugin ...        the wheel with an optional extra
#
# BASE_IMAGE: Python 3.11+ on Debian, pinned by tag and by the digest of its multi-arch index
# (fully qualified, so that podman, which has no default registry for short names, finds it too).
# Every command below also works on a plain Debian rootfs with python3 and python3-venv
# (nothing relies on /usr/local/bin/python or on pip outside the venv); the image test builds on
# one, since no registry is reachable where it runs.
ARG BASE_IMAGE=docker.io/library/python:3.12-slim-bookworm@sha256:782412e85d0f0984994c290652577d4018aff08145c85b262bb63dc0c7522254

# Optional folder of wheels for builds without an index: empty unless replaced with
# `--build-context wheels=DIR` (with --build-arg PIP_NO_INDEX=1 --build-arg PIP_FIND_LINKS=/wheels).
FROM scratch AS wheels

# ---------------------------------------------------------------- builder: wheel and venv
FROM ${BASE_IMAGE} AS builder
# EXTRAS: comma-separated extras of vllm-advisor, e.g. "plugin" or "gpu"; empty for none.
ARG EXTRAS=""
# pip reads these from the environment (build args are environment variables of RUN); all unset
# by default, i.e. pip uses the base image's defaults (pypi.org). Only this stage sees them: they
# are not in the final image's history. Put no credentials in them (use a build secret).
ARG PIP_INDEX_URL=""
ARG PIP_EXTRA_INDEX_URL=""
ARG PIP_TRUSTED_HOST=""
ARG PIP_NO_INDEX=""
ARG PIP_FIND_LINKS=""
ARG PIP_CERT=""
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_ROOT_USER_ACTION=ignore \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY rules/ rules/
COPY advisor/ advisor/
# The project's wheel is built with hatchling (pyproject's build-system, in pip's isolated build
# environment), then installed with its dependencies within pyproject's version ranges into a
# venv (an extra the wheel does not declare fails the build: pip would only warn); pip is removed
# from the venv afterwards, as nothing in the final image installs anything.
RUN --mount=type=bind,from=wheels,target=/wheels \
    python3 -m venv /opt/venv \
 && /opt/venv/bin/pip wheel --wheel-dir /dist --no-deps . \
 && /opt/venv/bin/pip install "$(echo /dist/vllm_advisor-*.whl)${EXTRAS:+[$EXTRAS]}" \
 && /opt/venv/bin/python -c "import sys, importlib.metadata as m; want = {e.strip() for e in sys.argv[1].split(',') if e.strip()}; unknown = want - set(m.metadata('vllm-advisor').get_all('Provides-Extra') or []); sys.exit(f'EXTRAS: vllm-advisor has no extra {sorted(unknown)}' if unknown else 0)" "$EXTRAS" \
 && /opt/venv/bin/python -m pip uninstall --yes --quiet pip setuptools \
 && /opt/venv/bin/vllm-advisor --version

# ---------------------------------------------------------------- the image
FROM ${BASE_IMAGE}
# A fixed numeric UID/GID (10001), so that Kubernetes' runAsNonRoot can check it and a
# securityContext can name it; not 65534 (nobody), which is also the overflow ID of user
# namespaces. Its one writable directory is the state directory, also writable by group 0 for
# platforms that run images under an arbitrary UID in group 0 (OpenShift).
RUN groupadd --gid 10001 vllm-advisor \
 && useradd --uid 10001 --gid 10001 --no-create-home \
      --home-dir /var/lib/vllm-advisor --shell /usr/sbin/nologin vllm-advisor \
 && install -d -o 10001 -g 0 -m 0770 /var/lib/vllm-advisor

COPY --from=builder /opt/venv /opt/venv

# VLLM_ADVISOR_LISTEN: all interfaces of the container's own network namespace. Inside a
# container, 127.0.0.1 is reachable only from the container itself (or from the containers that
# share its namespace: the vLLM container of a Kubernetes pod or of compose's
# network_mode: service:vllm), so a published port or Prometheus scraping the pod IP would find
# nothing there. It is not the host's interfaces, except under --network host: there, pass
# --listen 127.0.0.1:19842 (docs/image.md).
ENV PATH=/opt/venv/bin:$PATH \
    HOME=/var/lib/vllm-advisor \
    VLLM_ADVISOR_STATE_DIR=/var/lib/vllm-advisor \
    VLLM_ADVISOR_LISTEN=0.0.0.0:19842 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 10001:10001
WORKDIR /var/lib/vllm-advisor
EXPOSE 19842

# /healthz of the daemon (`run`, `demo`) on the port VLLM_ADVISOR_LISTEN names; Python's own
# urllib, so the image needs no curl. It answers 200 whether or not vLLM is up.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
  CMD ["python3", "-c", "import os, urllib.request as u; p = os.environ.get('VLLM_ADVISOR_LISTEN', '127.0.0.1:19842').rpartition(':')[2]; u.urlopen(f'http://127.0.0.1:{p}/healthz', timeout=4)"]

ENTRYPOINT ["vllm-advisor"]
# The daemon, for vLLM at http://127.0.0.1:8000: the vLLM of the same network namespace (the
# sidecar case). Give other arguments to run anything else: `run --vllm-url URL`, `explain ...`.
CMD ["run"]

# Last, so that a new revision or date leaves every layer above cached.
ARG BASE_IMAGE
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="vllm-advisor" \
      org.opencontainers.image.description="Prometheus exporter and tuning advisor for vLLM: finds the limit that hurts and recommends one knob." \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.documentation="docs/image.md in the source repository" \
      org.opencontainers.image.base.name="${BASE_IMAGE}"
