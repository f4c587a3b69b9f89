"""``baseline save``: observe a server, ask a daemon or replay a session, and keep the
baseline document (:mod:`advisor.verify.baseline`)."""

from __future__ import annotations

import json
from typing import Any

from advisor.core import jsonout
from advisor.core.config import Config
from advisor.diagnose.advise import Diagnosis
from advisor.diagnose.ruleset import load_rules
from advisor.drive import daemon, inputs
from advisor.sources.metrics import MetricsError
from advisor.sources.session import SessionError
from advisor.verify.baseline import BaselineError, from_diagnosis


def capture(
    url: str | None = None,
    daemon_url: str | None = None,
    session_dir: str | None = None,
    window_s: float = 60.0,
    interval_s: float = 5.0,
) -> dict[str, Any]:
    """The baseline document of a daemon, a session or a server observed for ``window_s``."""
    try:
        if daemon_url:
            return from_diagnosis(daemon.fetch_diagnosis(daemon_url), f"daemon {daemon_url}")
        rules = load_rules()
        d: Diagnosis | None
        if session_dir:
            _, d = inputs.from_session(session_dir, Config(), rules)
            source = f"session {session_dir}"
        else:
            assert url is not None
            d = daemon.observe(url, Config(), rules, window_s, interval_s)
            source = f"observed {url} for {window_s:.0f}s"
    except (daemon.DaemonError, SessionError, MetricsError, inputs.InputError) as e:
        raise BaselineError(str(e)) from None
    if d is None:
        raise BaselineError("no /metrics page could be read")
    return from_diagnosis(json.loads(jsonout.dumps(d.to_json(), default=str)), source)
