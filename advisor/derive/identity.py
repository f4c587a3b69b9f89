"""Which engine answered a scrape: a URL in front of several replicas (a load-balanced
Service) answers from a different server from one scrape to the next.

Identity is the process start time, the model and the cache configuration a page shows. A
restart moves the start time forward and never comes back; a page whose start time goes
back, or whose identity was seen before the current one, comes from another server. Pure:
the daemon feeds identities and acts on the answers.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from dataclasses import dataclass

SEVERAL_SERVERS = "this URL reaches several servers: point the advisor at one, or use fleet mode"

_START_RE = re.compile(r"^process_start_time_seconds(?:\{[^}\n]*\})? ([0-9.eE+-]{1,40})[ \t]*$", re.M)
_MODEL_RE = re.compile(r'model_name="([^"\n]{0,512})"')
_CACHE_RE = re.compile(r"^vllm:cache_config_info\{([^}\n]{0,8192})\}", re.M)


@dataclass(frozen=True)
class Identity:
    start: float | None
    model: str | None
    cache: str | None


def of_page(text: str) -> Identity | None:
    """The engine identity a page shows; None when it shows none (no start time)."""
    m = _START_RE.search(text)
    if m is None:
        return None
    try:
        start = float(m.group(1))
    except ValueError:
        return None
    model = _MODEL_RE.search(text)
    cache = _CACHE_RE.search(text)
    return Identity(start, model.group(1) if model else None, cache.group(1) if cache else None)


class ServerTracker:
    """Follows the identities of successive pages.

    ``observe`` says whether a page comes from the server being followed (feed it) or from
    another one behind the same URL (do not). Once several servers are seen, ``several`` stays
    set until ``settle`` pages in a row come from one identity (the others were scaled away);
    that one is then followed.
    """

    def __init__(self, settle: int = 30, remember: int = 16) -> None:
        self.settle = settle
        self.remember = remember
        self.current: Identity | None = None
        self.several = False
        self.switched_at: float | None = None  # when ``current`` last changed (a restart, or so it seemed)
        self.detected_at: float | None = None
        self._seen: OrderedDict[Identity, float] = OrderedDict()
        self._run: tuple[Identity | None, int] = (None, 0)

    def settled(self, n: int = 3) -> bool:
        """The followed server has answered the last ``n`` scrapes since it last changed (or
        never changed): what its change started can be believed (and written to the ledger)."""
        if self.several:
            return False
        if self.switched_at is None:
            return True
        ident, run = self._run
        return ident == self.current and run >= n

    def _remember(self, ident: Identity, t: float) -> None:
        self._seen[ident] = t
        self._seen.move_to_end(ident)
        while len(self._seen) > self.remember:
            self._seen.popitem(last=False)

    def observe(self, ident: Identity | None, t: float) -> bool:
        """True when the page comes from the followed server (or shows no identity)."""
        last, n = self._run
        if ident is None:  # a page without an identity counts as the followed server's
            if last is not None and last == self.current:
                self._run = (last, n + 1)
            return True
        self._run = (ident, n + 1 if ident == last else 1)
        if self.current is None:
            self.current = ident
            self._remember(ident, t)
            return True
        if ident == self.current:
            self._remember(ident, t)
            if self.several and self._run[1] >= self.settle:
                self.several = False
            return True
        if self.several:
            if self._run[1] >= self.settle:  # only this one answers now: follow it
                self.several = False
                self.current = ident
                self.switched_at = t
                self._remember(ident, t)
                return True
            self._remember(ident, t)
            return False
        back_in_time = (
            ident.start is not None and self.current.start is not None and ident.start < self.current.start
        )
        if ident in self._seen or back_in_time:
            self.several = True
            self.detected_at = t
            self._remember(ident, t)
            return False
        # a new identity, later than the current one: a restart
        self.current = ident
        self.switched_at = t
        self._remember(ident, t)
        return True
