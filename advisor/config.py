"""The advisor's own settings: defaults, a YAML file, environment, flags (last wins).

Environment variables are ``VLLM_ADVISOR_<KEY>`` (upper case), e.g.
``VLLM_ADVISOR_VLLM_URL``, ``VLLM_ADVISOR_LISTEN``, ``VLLM_ADVISOR_INTERVAL``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import yaml

from advisor.ruleset import parse_duration

# Prometheus's exporter range 9100-9999 has been fully allocated since 2023 (its "Default port
# allocations" wiki page), so any port there clashes with some exporter. 19842 lies outside it, below
# Linux's ephemeral range (32768+), and is not a registered well-known service.
DEFAULT_PORT = 19842
DEFAULT_TARGETS = {"ttft_p95_seconds": 2.0, "itl_p95_seconds": 0.1}


class ConfigError(Exception):
    pass


@dataclass(frozen=True)
class Config:
    vllm_url: str = "http://127.0.0.1:8000"
    log_file: str | None = None
    log_cmd: str | None = None
    listen: str = f"127.0.0.1:{DEFAULT_PORT}"
    interval_s: float = 5.0
    scrape_timeout_s: float = 4.0
    engine_config: str | None = None  # the YAML `vllm serve --config` takes
    vllm_port: int | None = None  # find the vLLM process on this host by its port (default: from vllm_url)
    rules_dir: str | None = None
    state_dir: str = str(Path.home() / ".local" / "state" / "vllm-advisor")
    # diagnosis
    window_s: float = 120.0  # signals are computed over this much recent data
    retention_s: float = 900.0  # how much the window keeps (experiments compare before/after)
    min_window_s: float = 20.0  # less data than this: insufficient-data
    min_requests: int = 5  # fewer finished requests in the window, and nothing running: idle
    warmup_s: float = 30.0  # no advice this soon after an engine start
    observe_after_change_s: float = 300.0  # after a knob change, observe this long before new advice
    stale_after_s: float = 30.0  # advice older than this (no fresh data) is withdrawn
    experiment_max_wait_s: float = 1800.0  # judge an experiment after this long even if few requests came
    ledger_path: str | None = None  # default: STATE_DIR/ledger.sqlite
    targets: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_TARGETS))
    severity_overrides: dict[str, str] = field(default_factory=dict)
    host_gpus: int | None = None

    def with_overrides(self, **kw: Any) -> Config:
        kw = {k: v for k, v in kw.items() if v is not None}
        return replace(self, **_coerce(kw))


_DURATIONS = {
    "interval_s",
    "scrape_timeout_s",
    "window_s",
    "retention_s",
    "min_window_s",
    "warmup_s",
    "observe_after_change_s",
    "stale_after_s",
    "experiment_max_wait_s",
}


def _coerce(d: dict[str, Any]) -> dict[str, Any]:
    known = {f.name: f for f in fields(Config)}
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = k.replace("-", "_")
        if key not in known and key + "_s" in _DURATIONS:
            key += "_s"
        if key not in known:
            raise ConfigError(f"unknown setting {k!r}")
        if key in _DURATIONS:
            try:
                v = parse_duration(v)
            except ValueError as e:
                raise ConfigError(f"{k}: {e}") from None
        elif key in ("min_requests", "vllm_port", "host_gpus") and v is not None:
            v = int(v)
        out[key] = v
    return out


def load(path: str | None = None, env: dict[str, str] | None = None, **flags: Any) -> Config:
    """Defaults, then the YAML file, then ``VLLM_ADVISOR_*`` environment, then flags."""
    cfg = Config()
    if path:
        try:
            raw = yaml.safe_load(Path(path).read_text()) or {}
        except (OSError, yaml.YAMLError, UnicodeDecodeError) as e:
            raise ConfigError(f"{path}: {e}") from None
        if not isinstance(raw, dict):
            raise ConfigError(f"{path}: must be a mapping of settings")
        cfg = replace(cfg, **_coerce(raw))
    environ = os.environ if env is None else env
    from_env = {}
    for f in fields(Config):
        for key in (f.name, f.name.removesuffix("_s")):
            v = environ.get("VLLM_ADVISOR_" + key.upper())
            if v is not None and f.name not in ("targets", "severity_overrides"):
                from_env[f.name] = v
    cfg = replace(cfg, **_coerce(from_env))
    return cfg.with_overrides(**flags)


def parse_listen(listen: str) -> tuple[str, int]:
    host, _, port = str(listen).rpartition(":")
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(
            f"listen (--listen, VLLM_ADVISOR_LISTEN or listen: in the config file) must be HOST:PORT "
            f"with a port from 0 to 65535, got {listen!r}"
        )
    return (host.strip("[]") or "127.0.0.1"), int(port)


def parse_duration_s(text: str | float) -> float:
    """``5s``, ``2m``, ``1h`` or a number of seconds; ConfigError on anything else."""
    try:
        return parse_duration(text)
    except ValueError as e:
        raise ConfigError(str(e)) from None


SAMPLE_CONFIG = "vllm-advisor.yaml"


def sample_text() -> str:
    """The commented sample config shipped in the package (``vllm-advisor config sample``)."""
    import importlib.resources

    return (importlib.resources.files("advisor") / "data" / SAMPLE_CONFIG).read_text(encoding="utf-8")
