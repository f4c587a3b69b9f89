"""The container image: what the Dockerfile promises, read from it; the deploy manifests against
it; and the image itself, built by scripts/build-image.sh with Debian's podman on a Debian base made
here with debootstrap (no container registry is needed: none is reachable where these tests run)
and run: the console script, the non-root UID, the daemon's /healthz through a published port and
through the image's HEALTHCHECK, a read-only root filesystem, and the sidecar's command from the
Kubernetes manifest. The build test is marked ``image``: ~2 min on a fresh machine (installing
podman, debootstrap, the build), ~15 s once the base and the layers are cached."""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.paths import REPO

DOCKERFILE = REPO / "Dockerfile"
BUILD_SCRIPT = REPO / "scripts" / "build-image.sh"
K8S = REPO / "deploy" / "kubernetes"
COMPOSE = REPO / "deploy" / "compose" / "docker-compose.yml"
TEST_IMAGE = "localhost/vllm-advisor:pytest"


def _version() -> str:
    m = re.search(r'^version = "([^"]+)"$', (REPO / "pyproject.toml").read_text(), re.M)
    assert m
    return m.group(1)


def instructions() -> list[tuple[str, str]]:
    """The Dockerfile's instructions as (KEYWORD, arguments), continuation lines joined and
    comment lines dropped, as the builder reads them."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        keyword, _, args = line.partition(" ")
        out.append((keyword.upper(), args.strip()))
    assert not pending, "the Dockerfile ends in a continuation line"
    return out


def _args(keyword: str) -> list[str]:
    return [a for k, a in instructions() if k == keyword]


def image_uid() -> int:
    """The UID of the image's last USER instruction (numeric: Kubernetes' runAsNonRoot can check
    only a number)."""
    user = _args("USER")[-1]
    assert re.fullmatch(r"\d+(:\d+)?", user), f"USER {user}: not numeric"
    return int(user.split(":")[0])


def build_script_image() -> str:
    """The tag scripts/build-image.sh gives by default, with pyproject's version."""
    m = re.search(r"^IMAGE=\$\{IMAGE:-([^}]+)\}$", BUILD_SCRIPT.read_text(), re.M)
    assert m, "no IMAGE=${IMAGE:-...} default in scripts/build-image.sh"
    return m.group(1).replace("$VERSION", _version())


# ---------------------------------------------------------------- the Dockerfile, read
def test_the_image_runs_as_a_fixed_non_root_uid() -> None:
    uid = image_uid()
    assert uid != 0
    assert _args("USER")[-1] == f"{uid}:{uid}"
    run = " ".join(_args("RUN"))
    assert f"useradd --uid {uid} --gid {uid}" in run and f"groupadd --gid {uid}" in run


def test_the_base_is_pinned_by_tag_and_digest_and_every_stage_uses_it() -> None:
    base = next(a for k, a in instructions() if k == "ARG" and a.startswith("BASE_IMAGE="))
    ref = base.removeprefix("BASE_IMAGE=")
    assert re.fullmatch(r"[a-z0-9.-]+(/[a-z0-9._-]+)+:[\w.-]+@sha256:[0-9a-f]{64}", ref), ref
    froms = [a.split()[0] for a in _args("FROM")]
    assert set(froms) == {"scratch", "${BASE_IMAGE}"}, froms


def test_the_entrypoint_is_the_console_script_and_the_healthcheck_needs_no_curl() -> None:
    assert json.loads(_args("ENTRYPOINT")[-1]) == ["vllm-advisor"]
    assert re.search(r'^vllm-advisor = "advisor\.cli:main"$', (REPO / "pyproject.toml").read_text(), re.M)
    assert json.loads(_args("CMD")[-1]) == ["run"]
    (check,) = _args("HEALTHCHECK")
    test = json.loads(check[check.index("CMD ") + 4 :])
    assert test[0] == "python3" and "/healthz" in test[-1]
    assert not re.search(r"\b(curl|wget)\b", check)


def test_extras_are_a_build_arg_and_the_labels_carry_the_packages_version() -> None:
    args = {a.split("=", 1)[0]: a.partition("=")[2] for a in _args("ARG")}
    assert args["EXTRAS"] == '""'
    assert args["VERSION"] == _version()
    labels = " ".join(_args("LABEL"))
    for key in ("title", "version", "revision", "created", "licenses", "base.name"):
        assert f"org.opencontainers.image.{key}=" in labels


def test_the_build_context_is_what_the_dockerfile_copies() -> None:
    """.dockerignore excludes everything but the COPY sources (not the venv, .git, tests)."""
    lines = [ln for ln in (REPO / ".dockerignore").read_text().splitlines() if ln and ln[0] != "#"]
    assert lines[0] == "*"
    allowed = {ln[1:].rstrip("/") for ln in lines if ln.startswith("!")}
    sources = set()
    for a in _args("COPY"):
        if a.startswith("--from"):
            continue
        sources.update(p.rstrip("/") for p in a.split()[:-1])
    assert sources == allowed


# ---------------------------------------------------------------- the manifests, against it
IMAGE_REPO = build_script_image().rsplit(":", 1)[0]


def _deployments() -> list[dict[str, Any]]:
    docs = []
    for path in [*sorted(K8S.glob("*.yaml")), *sorted(K8S.glob("*/*.yaml"))]:
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d and d["kind"] == "Deployment"]
    return docs


def _advisor_containers() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(pod spec, container) of every container that runs the advisor's image."""
    out = []
    for d in _deployments():
        pod = d["spec"]["template"]["spec"]
        out += [(pod, c) for c in pod["containers"] if c["image"].split(":")[0] == IMAGE_REPO]
    assert out
    return out


def test_the_manifests_name_the_image_make_image_builds() -> None:
    images = {c["image"] for _, c in _advisor_containers()}
    compose = yaml.safe_load(COMPOSE.read_text())["services"]["vllm-advisor"]["image"]
    assert images | {compose} == {build_script_image()}


def test_kubernetes_runs_the_advisor_as_the_images_uid() -> None:
    """runAsNonRoot and runAsUser, from the container's securityContext or the pod's, are the
    Dockerfile's USER: a runAsUser that differs would run the image under a UID that does not
    own its state directory."""
    uid = image_uid()
    for pod, c in _advisor_containers():
        ctx = {**pod.get("securityContext", {}), **c.get("securityContext", {})}
        assert ctx.get("runAsNonRoot") is True, c["name"]
        assert ctx.get("runAsUser") == uid, (c["name"], ctx.get("runAsUser"))


# ---------------------------------------------------------------- its install steps, in a clean venv
def _builder_run() -> str:
    """The builder stage's RUN (the one that mounts the wheels stage), without its --mount flag."""
    (run,) = [a for a in _args("RUN") if a.startswith("--mount=type=bind,from=wheels")]
    return run.split(" ", 1)[1].strip()


def _env_of_image(venv: Path, state: Path, listen: str) -> dict[str, str]:
    """The final stage's ENV, its paths moved into the test's folder and its listen address to
    loopback (nothing here needs to be reached from outside the machine)."""
    env_args = _args("ENV")[-1]  # the final stage's
    env = dict(os.environ)
    for key, value in re.findall(r"(\w+)=(\S+)", env_args):
        env[key] = value.replace("/opt/venv", str(venv)).replace("$PATH", os.environ["PATH"])
    env.update(HOME=str(state), VLLM_ADVISOR_STATE_DIR=str(state), VLLM_ADVISOR_LISTEN=listen)
    return env


def test_the_dockerfiles_install_steps_work_in_a_clean_venv(tmp_path: Path) -> None:
    """Without a container: the builder's RUN, as written in the Dockerfile, on a copy of the build
    context (what its COPY lines take) with /opt/venv and /dist moved into a temporary folder and an
    extra that exists (EXTRAS=gpu); then the daemon started the way ENTRYPOINT, CMD and ENV start
    it, and the HEALTHCHECK's own command run against it. make test runs this; the image itself is
    built and run by `make image-test` (the tests below)."""
    src, venv, dist = tmp_path / "src", tmp_path / "venv", tmp_path / "dist"
    src.mkdir()
    for a in _args("COPY"):
        if a.startswith("--from"):
            continue
        *sources, _ = a.split()
        for name in sources:
            path = REPO / name.rstrip("/")
            if path.is_dir():
                shutil.copytree(path, src / path.name, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(path, src / path.name)
    steps = _builder_run().replace("/opt/venv", str(venv)).replace("/dist", str(dist))
    env = {**os.environ, "EXTRAS": "gpu", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    p = subprocess.run(["sh", "-c", steps], cwd=src, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert p.stdout.strip().endswith(f"vllm-advisor, version {_version()}")
    assert not (venv / "bin" / "pip").exists()
    assert subprocess.run([venv / "bin" / "python", "-c", "import pynvml"], timeout=60).returncode == 0
    # an extra the wheel does not declare fails the build (pip itself would only warn)
    (check,) = [s for s in steps.split(" && ") if "Provides-Extra" in s]
    bad = subprocess.run(
        ["sh", "-c", check], env={**env, "EXTRAS": "gpu,no-such-extra"}, capture_output=True, text=True
    )
    assert bad.returncode == 1 and "no extra ['no-such-extra']" in bad.stderr, bad.stderr

    port = _free_port()
    state = tmp_path / "state"
    state.mkdir()
    image_env = _env_of_image(venv, state, f"127.0.0.1:{port}")
    entrypoint = json.loads(_args("ENTRYPOINT")[-1]) + json.loads(_args("CMD")[-1])
    daemon = subprocess.Popen(
        [shutil.which(entrypoint[0], path=image_env["PATH"]) or entrypoint[0], *entrypoint[1:]],
        env=image_env,
        cwd=state,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert _get_json(f"http://127.0.0.1:{port}/healthz")["ok"] is True
        (check_line,) = _args("HEALTHCHECK")
        health = json.loads(check_line[check_line.index("CMD ") + 4 :])
        exe = shutil.which(health[0], path=image_env["PATH"])
        assert exe == str(venv / "bin" / health[0])
        assert subprocess.run([exe, *health[1:]], env=image_env, timeout=30).returncode == 0
    finally:
        daemon.terminate()
        daemon.communicate(timeout=30)
    assert (state / "diagnosis.json").exists()


# ---------------------------------------------------------------- the image, built and run
def _podman() -> list[str]:
    """podman as scripts/build-image.sh calls it: runc, and the host's hard limits (see there)."""
    cmd = ["podman"]
    if shutil.which("runc"):
        cmd += ["--runtime", "runc"]
    return cmd


def _limits() -> list[str]:
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    nofile = 1048576 if nofile == resource.RLIM_INFINITY else nofile
    nproc = 32768 if nproc == resource.RLIM_INFINITY else min(nproc, 32768)
    return ["--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", f"nproc={nproc}:{nproc}"]


def _run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*_podman(), "run", "--rm", *_limits(), *args], capture_output=True, text=True, timeout=timeout
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get_json(url: str, deadline_s: float = 30) -> dict[str, Any]:
    end = time.monotonic() + deadline_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                body: dict[str, Any] = json.loads(r.read())
                return body
        except OSError:
            if time.monotonic() > end:
                raise
            time.sleep(0.3)


@pytest.fixture(scope="module")
def image() -> Iterator[str]:
    """The image, built by scripts/build-image.sh: on the Debian base (BASE=debian), from wheels
    this machine's pip fetches (WHEELS_DIR=host: its mirrors, its CA), with no network in the
    build itself."""
    env = {
        **os.environ,
        "IMAGE": TEST_IMAGE,
        "BASE": "debian",
        "WHEELS_DIR": "host",
        "PYTHON": sys.executable,
    }
    t0 = time.monotonic()
    p = subprocess.run(
        ["bash", str(BUILD_SCRIPT)], cwd=REPO, env=env, capture_output=True, text=True, timeout=900
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    print(f"\nbuild-image.sh: {time.monotonic() - t0:.0f} s\n{p.stdout}")
    yield TEST_IMAGE


@pytest.mark.image
def test_the_console_script_runs_as_the_non_root_uid(image: str) -> None:
    p = _run(image, "--version")
    assert p.returncode == 0 and p.stdout.strip() == f"vllm-advisor, version {_version()}", p.stderr
    p = _run("--entrypoint", "id", image)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split()[:2] == [f"uid={image_uid()}(vllm-advisor)", f"gid={image_uid()}(vllm-advisor)"]
    # nothing of the install is the user's to change; only the state directory is
    p = _run("--entrypoint", "sh", image, "-c", "test ! -w /opt/venv/bin && test -w /var/lib/vllm-advisor")
    assert p.returncode == 0, p.stdout + p.stderr


@pytest.mark.image
def test_the_daemon_answers_on_a_published_port_and_its_healthcheck_passes(image: str) -> None:
    port = _free_port()
    name = f"vllm-advisor-pytest-{os.getpid()}"
    start = subprocess.run(
        [*_podman(), "run", "-d", "--name", name, *_limits(), "-p", f"127.0.0.1:{port}:19842", image],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert start.returncode == 0, start.stderr
    try:
        health = _get_json(f"http://127.0.0.1:{port}/healthz")
        assert health["ok"] is True and health["vllm_up"] is False  # no vLLM beside it here
        hc = subprocess.run(
            [*_podman(), "healthcheck", "run", name], capture_output=True, text=True, timeout=30
        )
        assert hc.returncode == 0, hc.stdout + hc.stderr
        top = subprocess.run(
            [*_podman(), "exec", name, "id", "-u"], capture_output=True, text=True, timeout=30
        )
        assert top.stdout.strip() == str(image_uid())
    finally:
        subprocess.run([*_podman(), "rm", "-f", "-t", "2", name], capture_output=True, timeout=60)


@pytest.mark.image
def test_a_read_only_root_filesystem_needs_only_the_state_directory(image: str, tmp_path: Path) -> None:
    """The state directory on a volume as Kubernetes makes an emptyDir (root's, mode 0777)."""
    state = tmp_path / "state"
    state.mkdir()
    state.chmod(0o777)
    script = (
        "vllm-advisor run --run-seconds 2 --interval 1s --listen 127.0.0.1:19842 2>&1; "
        "ls /var/lib/vllm-advisor"
    )
    ro = ["--read-only", "--read-only-tmpfs=false", "--entrypoint", "sh"]
    p = _run(*ro, "-v", f"{state}:/var/lib/vllm-advisor", image, "-c", script)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "diagnosis.json" in p.stdout and "cannot write state" not in p.stdout, p.stdout
    # without it the daemon still runs, and says why it keeps no state
    p = _run(*ro, image, "-c", script)
    assert p.returncode == 0 and "cannot write state" in p.stdout, p.stdout + p.stderr


@pytest.mark.image
def test_the_kubernetes_sidecar_command_runs_in_the_image(image: str) -> None:
    """The manifest's `command` (a /bin/sh loop that bounds the log file, then exec
    vllm-advisor) replaces the ENTRYPOINT: sh, stat and sleep are there, vllm-advisor is on PATH."""
    c = next(c for _, c in _advisor_containers() if c["command"][0] == "/bin/sh")
    port = _free_port()
    name = f"vllm-advisor-pytest-sidecar-{os.getpid()}"
    cmd = [*_podman(), "run", "-d", "--name", name, *_limits(), "-p", f"127.0.0.1:{port}:19842"]
    for m in c["volumeMounts"]:
        cmd += ["--tmpfs", f"{m['mountPath']}:mode=1777"]
    cmd += ["--entrypoint", c["command"][0], image, *c["command"][1:]]
    start = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert start.returncode == 0, start.stderr
    try:
        assert _get_json(f"http://127.0.0.1:{port}/healthz")["ok"] is True
        ps = subprocess.run(
            [
                *_podman(),
                "exec",
                name,
                "sh",
                "-c",
                "for c in stat sleep vllm-advisor; do command -v $c; done",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert ps.returncode == 0 and len(ps.stdout.split()) == 3, ps.stdout + ps.stderr
    finally:
        subprocess.run([*_podman(), "rm", "-f", "-t", "2", name], capture_output=True, timeout=60)
