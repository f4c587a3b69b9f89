"""Secrets never leave the advisor: one place that redacts them from names, command lines,
free text (log lines, reprs), JSON-like values and URLs.

Secret names: ``--api-key``, ``api_key``, ``--hf-token``, ``HF_TOKEN``, ``OPENAI_API_KEY``,
``*password*``, ``*secret*``, ``*credential*``. Engine arguments that merely mention tokens or
keys (``max_num_batched_tokens``, ``tokenizer``, ``kv_cache_memory_bytes``, ``ssl_keyfile``)
are not. Literal tokens (``hf_...``, ``sk-...``, ``ghp_...``), bearer tokens and URL passwords
are redacted wherever they appear. Every function is idempotent.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

REDACTED = "<redacted>"


def _norm(name: str) -> str:
    return name.strip().lstrip("-").lower().replace("_", "-")


@lru_cache(maxsize=4096)  # pure; a log flood asks about the same few names on every line
def is_secret_name(name: str) -> bool:
    """Whether a flag, config key or environment variable name holds a secret."""
    n = _norm(name)
    if not n:
        return False
    if any(w in n for w in ("password", "passwd", "secret", "credential", "authorization", "cookie")):
        return True
    parts = n.split("-")
    if parts[-1] in ("token", "key", "apikey") or "apikey" in parts:
        return True
    return "api-key" in n or "access-key" in n or "private-key" in n


# vLLM's flags whose value is a secret. vLLM's argparse accepts any unambiguous prefix of a long
# flag (``--api-ke X``, ``--hf-tok=X``), so every prefix of two characters or more counts as the
# flag itself (one character is ambiguous in every vLLM: ``--a``, ``--h``). Redacting the value
# of a prefix argparse would refuse as ambiguous (``--api``) loses nothing.
SECRET_FLAGS = ("api-key", "hf-token")
_MULTI_VALUE = ("api-key",)  # vLLM's --api-key takes one or more values


def _secret_flag_for(flag: str) -> str | None:
    n = _norm(flag)
    if len(n) < 2:
        return None
    hits = [s for s in SECRET_FLAGS if s.startswith(n)]
    return hits[0] if hits else None


@lru_cache(maxsize=4096)
def is_secret_flag(flag: str) -> bool:
    """Whether a long flag, as argparse may read it (abbreviated, underscores), holds a secret."""
    return is_secret_name(flag) or _secret_flag_for(flag) is not None


_LITERAL = r"(?:hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_-]{20,}|ghp_[A-Za-z0-9]{20,})"
_LITERAL_RE = re.compile(rf"(?<![A-Za-z0-9_-]){_LITERAL}(?![A-Za-z0-9_-])")
# scheme://authority: the userinfo ends at the authority's *last* "@" (a password may hold "@"),
# so the authority is taken whole (possessively: linear time) and split in _url_creds
_URL_AUTH_RE = re.compile(r"(?<![a-z0-9+.-])(?P<scheme>[a-z][a-z0-9+.-]*+://)(?P<auth>[^/\s?#]*+)", re.I)
# a quoted string, a [list], or a bare word that does not open a nested structure (so that in
# "args: {'api_key': 'x'}" the scan goes on into the braces instead of taking "{'api_key':" as
# the value of "args")
_VALUE = r"""'(?:[^'\\]|\\.)*+'|"(?:[^"\\]|\\.)*+"|\[[^\]]*+\]|[^\s,{}()\[\]&'"][^\s,})\]&]*+"""
# Names are matched whole and possessively, then checked with is_secret_name (linear time even on
# a 64 KiB line of one identifier).
_VALUE_RE = re.compile(_VALUE)
_VALUE_START = r"""(?=['"\[]|[^\s,{}()\[\]&'"])"""
# The heads only: a value is matched (_VALUE_RE) only after a secret name, so that a long line
# of ``a:a:a:...`` is not a value scanned again at every ``a`` (quadratic)
_KV_RE = re.compile(
    rf"""(?P<q>['"]?)(?<![A-Za-z0-9_-])(?P<name>[A-Za-z0-9_-]++)(?P=q)\s*[:=]\s*{_VALUE_START}"""
)
_FLAG_RE = re.compile(rf"(?<![A-Za-z0-9_-])--(?P<name>[A-Za-z0-9_-]++)(?:=|\s+){_VALUE_START}")
_BEARER_RE = re.compile(r"(?P<head>\bBearer\s+)(?P<val>[A-Za-z0-9._~+/=-]+)", re.I)
# HTTP headers whose whole value is a credential: the scheme (``Basic``, ``Bearer``...) is kept,
# everything after it to the end of the line (or the closing quote) goes
_HEADER_NAMES = ("authorization", "proxy-authorization", "cookie", "set-cookie")
_HEADER_RE = re.compile(
    r"""(?P<head>(?<![A-Za-z0-9_-])(?:proxy-)?(?:authorization|(?:set-)?cookie)['"]?[ \t]*[:=][ \t]*['"]?"""
    r"""(?:(?:basic|bearer|digest|token|negotiate|ntlm|hoba|mutual|aws4-hmac-sha256)[ \t]+)?)"""
    r"""(?P<val>[^\r\n'"]*[^\s'"])""",
    re.I,
)


def _redacted(head: str, val: str) -> str:
    if val == REDACTED or val.strip("'\"") == REDACTED:
        return head + val
    if val[:1] in ("'", '"'):
        return f"{head}{val[0]}{REDACTED}{val[0]}"
    return f"{head}{REDACTED}"


def _redacted_value(m: re.Match[str]) -> str:
    return _redacted(m.group("head"), m.group("val"))


def _sub_names(rx: re.Pattern[str], text: str, secret: Any) -> str:
    """The values after ``rx``'s heads whose name is ``secret`` are redacted. After a head whose
    name is not a secret the scan goes on at its value, so that in ``error: api_key=X`` or
    ``url: http://h/?token=X`` the ``api_key``/``token`` inside it is found; a value is read
    only after a secret name and then skipped: linear in the text."""
    out: list[str] = []
    pos = last = 0
    while (m := rx.search(text, pos)) is not None:
        name = m.group("name")
        vm = _VALUE_RE.match(text, m.end()) if secret(name) and _norm(name) not in _HEADER_NAMES else None
        if vm is None:
            pos = m.end()
            continue
        out.append(text[last : m.start()])
        out.append(_redacted(m.group(0), vm.group(0)))
        pos = last = vm.end()
    out.append(text[last:])
    return "".join(out)


def _header(m: re.Match[str]) -> str:
    if m.group("val").startswith(REDACTED):
        return m.group(0)
    return f"{m.group('head')}{REDACTED}"


def _url_creds(m: re.Match[str]) -> str:
    """``scheme://user:password@host`` -> ``scheme://user:<redacted>@host``; a userinfo with no
    password (``https://TOKEN@host``, a token used as the user name) goes whole."""
    userinfo, at, host = m["auth"].rpartition("@")
    if not at:
        return m.group(0)
    user, colon, pw = userinfo.partition(":")
    if not colon:
        return m.group(0) if user == REDACTED else f"{m['scheme']}{REDACTED}@{host}"
    if pw == REDACTED:
        return m.group(0)
    return f"{m['scheme']}{user}:{REDACTED}@{host}"


def redact_text(text: str) -> str:
    """Secret values in free text: ``'api_key': 'x'``, ``hf_token=x``, ``HF_TOKEN=x``,
    ``error: api_key=x``, ``?token=x`` / ``&access_token=x`` in URLs, ``--api-key x`` /
    ``--api-key=x`` and their abbreviations (``--api-ke x``), ``Bearer x``, ``Authorization:
    Basic x``, ``Cookie: ...``, ``scheme://user:pw@host``, ``scheme://TOKEN@host`` and literal
    tokens keep their key and lose their value."""
    if not text:
        return text
    out = _HEADER_RE.sub(_header, text)
    out = _sub_names(_KV_RE, out, is_secret_name)
    out = _sub_names(_FLAG_RE, out, is_secret_flag)
    out = _BEARER_RE.sub(_redacted_value, out)
    out = _URL_AUTH_RE.sub(_url_creds, out)
    return _LITERAL_RE.sub(REDACTED, out)


_ENV_ARG_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)


def is_number_token(tok: str) -> bool:
    """``-1``, ``0.5``: a command-line token that is a value, not a flag."""
    try:
        float(tok)
        return True
    except ValueError:
        return False


def _is_flag(tok: str) -> bool:
    return tok.startswith("-") and not is_number_token(tok)


def redact_argv(argv: Sequence[str]) -> list[str]:
    """A command line with every secret value replaced: ``--api-key X``, ``--api-key=X``,
    ``--api-key X Y`` (several keys), every abbreviation argparse accepts (``--api-ke X``,
    ``--hf-tok=X``), any secret-named flag, ``HF_TOKEN=X`` arguments, and
    literal tokens or URL passwords anywhere."""
    out: list[str] = []
    items = [str(a) for a in argv]
    i = 0
    while i < len(items):
        tok = items[i]
        if _is_flag(tok):
            flag, eq, _ = tok.partition("=")
            if (flag.startswith("--") and is_secret_flag(flag)) or is_secret_name(flag):
                i += 1
                if eq:
                    out.append(f"{flag}={REDACTED}")
                    continue
                out.append(flag)
                multi = (_secret_flag_for(flag) or _norm(flag)) in _MULTI_VALUE
                while i < len(items) and not _is_flag(items[i]):
                    out.append(REDACTED)
                    i += 1
                    if not multi:
                        break
                continue
        else:
            m = _ENV_ARG_RE.match(tok)
            if m and is_secret_name(m.group(1)):
                out.append(f"{m.group(1)}={REDACTED}")
                i += 1
                continue
        out.append(redact_text(tok))
        i += 1
    return out


def redact_obj(value: Any) -> Any:
    """A JSON-like value with secrets gone: values under secret-named keys, lists of strings
    read as command lines, and secrets inside strings."""
    if isinstance(value, Mapping):
        return {
            k: (
                REDACTED
                if is_secret_name(str(k)) and value[k] not in (None, "", [], False)
                else redact_obj(v)
            )
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        if value and all(isinstance(v, str) for v in value):
            red = redact_argv(value)
            return red if isinstance(value, list) else tuple(red)
        items = [redact_obj(v) for v in value]
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, str):
        return redact_text(value)
    return value


def redact_url(url: str) -> str:
    """Drop userinfo and redact secret query parameters (``api_key=...``, ``token=...``)."""
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return redact_text(url)
    if not parts.scheme or not parts.netloc or any(c.isspace() for c in url.strip()):
        return redact_text(url)  # not one URL: whatever URLs are inside lose their passwords
    netloc = parts.netloc.rsplit("@", 1)[-1]
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode([(k, REDACTED if is_secret_name(k) else v) for k, v in pairs], safe="<>")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
