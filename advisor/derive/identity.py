"""Which engine answered a scrape: a URL in front of several replicas (a load-balanced
Service) answers from a different server from one scrape to the next.

Identity is the process start time, the model and the cache configuration a page shows. A
restart moves the start time forward and never comes back; a page whose start time goes
back, or whose identity was seen before the current one, comes from another server.

A page without a start time (Ray's exporter, a proxy that drops it) shows no identity; there
the engine's token counters tell: a restart takes them down once and they rise from there, while
two engines behind one URL take them back and forth between two lines of values (down, then
back up onto the line left a page or two before). Pure: the daemon feeds identities and
progress and acts on the answers.
"""

from __future__ import annotations

import re
from collections import OrderedDict, deque
from dataclasses import dataclass

SEVERAL_SERVERS = "this URL reaches several servers: point the advisor at one, or use fleet mode"
TWO_ENGINES = (
    "two engines behind one URL: the pages show no process start time, and their token counters go "
    "back and forth between two lines of values (not a restart): point the advisor at one, or use "
    "fleet mode"
)
_TOKENS_RE = re.compile(
    r"^(?:ray_)?vllm:(?:prompt|generation)_tokens(?:_total)?(?:\{[^}\n]*\})? ([0-9.eE+-]{1,40})[ \t]*$", re.M
)

_START_RE = re.compile(r"^process_start_time_seconds(?:\{[^}\n]*\})? ([0-9.eE+-]{1,40})[ \t]*$", re.M)
_MODEL_RE = re.compile(r'model_name="([^"\n]{0,512})"')
_CACHE_RE = re.compile(r"^vllm:cache_config_info\{([^}\n]{0,8192})\}", re.M)


@dataclass(frozen=True)
class Identity:
    start: float | None
    model: str | None
    cache: str | None


def progress_of_page(text: str) -> float | None:
    """The engine's prompt and generation tokens counted so far, summed (None when not shown)."""
    total, found = 0.0, False
    for m in _TOKENS_RE.finditer(text):
        try:
            v = float(m.group(1))
        except ValueError:
            continue
        if v == v and v not in (float("inf"), float("-inf")):
            total, found = total + v, True
    return total if found else None


class ProgressLines:
    """Pages without an identity, told apart by their token counters. Each page continues the
    line of values whose last value is the highest at or below its own; a value below every
    line starts a new one (a restart, or another engine). Going back onto a line left within
    ``recent`` pages is a return; ``returns`` of them within ``within`` pages, and the pages
    come from two engines (one bad reading, a dip on one page, is one return)."""

    def __init__(self, returns: int = 2, recent: int = 3, within: int = 8, keep: int = 4) -> None:
        self.returns_needed = returns
        self.recent = recent
        self.within = within
        self.keep = keep
        self._return_pages: deque[int] = deque(maxlen=returns)
        self._lines: list[list[float]] = []  # [last value, page number it was last seen on]
        self._page = 0
        self._prev: int | None = None  # the line of the page before
        self.returns = 0
        self.followed: int | None = None

    def observe(self, v: float) -> tuple[bool, bool]:
        """(this page is on the followed line, the pages come from two engines)."""
        self._page += 1
        below = [i for i, ln in enumerate(self._lines) if ln[0] <= v]
        if not below:
            self._lines.append([v, self._page])
            if len(self._lines) > self.keep:  # forget the line seen least recently
                drop = min(range(len(self._lines)), key=lambda i: self._lines[i][1])
                self._lines.pop(drop)
                self.followed = None if self.followed == drop else self.followed
                if self.followed is not None and self.followed > drop:
                    self.followed -= 1
                self._prev = None if self._prev == drop else self._prev
                if self._prev is not None and self._prev > drop:
                    self._prev -= 1
            line = len(self._lines) - 1
            if not self._two():
                self.followed = line  # a restart, so far as can be told
        else:
            line = max(below, key=lambda i: self._lines[i][0])
            if line != self._prev and self._page - self._lines[line][1] <= self.recent:
                self.returns += 1
                self._return_pages.append(self._page)
            self._lines[line] = [v, self._page]
        self._prev = line
        if self.followed is None:
            self.followed = line
        return line == self.followed, self._two()

    def _two(self) -> bool:
        r = self._return_pages
        return len(r) >= self.returns_needed and self._page - r[0] < self.within


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
        self.reason = SEVERAL_SERVERS  # why several: identities, or counters (TWO_ENGINES)
        self._progress = ProgressLines()
        self._lone = 0  # pages in a row on the followed line while two engines were seen

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

    def observe(self, ident: Identity | None, t: float, progress: float | None = None) -> bool:
        """True when the page comes from the followed server. A page without an identity
        counts as the followed server's unless its token counters (``progress``) show two
        engines taking turns."""
        last, n = self._run
        if ident is None:
            if last is not None and last == self.current:
                self._run = (last, n + 1)
            return True if progress is None else self._observe_progress(progress, t)
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
            self.several, self.reason = True, SEVERAL_SERVERS
            self.detected_at = t
            self._remember(ident, t)
            return False
        # a new identity, later than the current one: a restart
        self.current = ident
        self.switched_at = t
        self._remember(ident, t)
        return True

    def _observe_progress(self, v: float, t: float) -> bool:
        followed_before = self._progress.followed
        same, two = self._progress.observe(v)
        if not two:
            if self._progress.followed != followed_before and followed_before is not None:
                self.switched_at = t  # a new line: a restart, so far as can be told
            return True
        if not self.several:
            self.several, self.reason, self.detected_at, self._lone = True, TWO_ENGINES, t, 0
        self._lone = self._lone + 1 if same else 0
        if self._lone >= self.settle:  # the other engine stopped answering: one again
            self.several = False
            self._progress = ProgressLines()
        return same
