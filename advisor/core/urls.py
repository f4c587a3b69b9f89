"""Joining a path to a URL the user gave: the path goes after the URL's own path and before its
query (``http://h:8000/?tenant=a`` -> ``http://h:8000/metrics?tenant=a``, not
``http://h:8000/?tenant=a/metrics``). The one place the advisor builds a URL from another."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

METRICS = "/metrics"


def join(base: str, path: str, params: Mapping[str, Any] | Sequence[tuple[str, Any]] | None = None) -> str:
    """``base``'s path (trailing slashes dropped) + ``path``, ``base``'s query kept, ``params``
    added to it."""
    parts = urlsplit(base.strip())
    query = parts.query
    if params:
        extra = urlencode(params, doseq=True)
        query = f"{query}&{extra}" if query else extra
    return urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/") + path, query, parts.fragment))


def without_path_suffix(url: str, suffix: str = METRICS) -> str:
    """``url`` with ``suffix`` (and trailing slashes) cut from the end of its path, query kept."""
    parts = urlsplit(url.strip())
    path = parts.path.rstrip("/").removesuffix(suffix).rstrip("/")
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, parts.fragment))


def metrics_url(url: str) -> str:
    """The page's URL from a server's URL or the page's own."""
    return join(without_path_suffix(url), METRICS)
