"""The one YAML reader for every YAML input (the advisor's config, ``--engine-config``, rule
files, the alert config): bounded in size, nesting, alias expansion and number size.

PyYAML's ``SafeLoader`` builds no objects, but it still expands aliases: a 465-byte "billion
laughs" (nine anchors, each a list of nine aliases of the one before) stands for 9**9 values
and took a loader past 860 MiB. So a document is first *composed* (its node graph, where an
alias is a pointer, never a copy), the nodes it stands for once aliases are expanded are
counted (each node once, memoised, counting stops past the limit) with its depth, and only
then constructed. Two limits come before the parser, whose pure-Python scanner is the slow part
(a 3,000-level ``[[[...`` took it 1-3 s of CPU to reach the depth check, a flat list of
400,000 values 9 s): the text is pre-scanned in one linear pass (:func:`prescan`: its size and
an estimate of its flow and block nesting, quoted scalars, comments and block scalars
skipped), and composition stops at the ``max_nodes``-th node it composes, so the parser's work
is bounded by the limits, not by what the document holds. Integers beyond 64 bits and floats that overflow to infinity (``1e400``)
are refused where they are read, with their line: no setting, rule or engine argument is
that large, and a 400-digit integer must not become an ``OverflowError`` wherever it is first
used as a float. Every failure is one :class:`YamlError` with the line it is about.

The text is scanned and parsed by libyaml (PyYAML's ``CParser``, in its wheels) where PyYAML has
it, and composed and constructed in Python as before: the pure-Python scanner took ~85% of the
time to read the 22 rule files (0.12 s of CPU against 0.017 s), a one-shot ``explain``'s largest
fixed cost after its imports. The composer, where the node budget is counted, is PyYAML's own
either way. Where PyYAML was built without libyaml the pure-Python parser reads it (the same
values; a syntax error's wording is the parser's own).
"""

from __future__ import annotations

import math
import os
import re
from typing import TYPE_CHECKING, Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.resolver import Resolver

MAX_BYTES = 1024 * 1024  # every YAML input is a few KiB
MAX_NODES = 20_000  # values once aliases are expanded (a rule file is a few hundred)
MAX_DEPTH = 64  # nesting levels (a rule file uses 5)
MAX_INT = 2**63 - 1
_INT_DIGITS_RE = re.compile(r"[0-9a-fA-F]")


class YamlError(ValueError):
    """A YAML input refused: ``line`` (1-based; None when unknown) and what is wrong."""

    def __init__(self, problem: str, line: int | None = None) -> None:
        self.problem = problem
        self.line = line
        super().__init__(f"line {line}: {problem}" if line is not None else problem)


if TYPE_CHECKING:  # the stubs know PyYAML's own loaders only: typed as the pure one (same methods)
    _Base = yaml.SafeLoader
elif yaml.__with_libyaml__:
    from yaml._yaml import CParser

    class _Base(Composer, CParser, SafeConstructor, Resolver):
        """libyaml's scanner and parser (its events), PyYAML's composer, safe constructor and
        resolver: ``yaml.CSafeLoader`` less its C composer."""

        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            Composer.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)

else:  # pragma: no cover - PyYAML's wheels carry libyaml
    _Base = yaml.SafeLoader

PARSER = "libyaml" if yaml.__with_libyaml__ else "pure Python"


class SafeLoader(_Base):
    """A safe loader whose numbers are bounded (subclass it to add constructors) and whose
    composer stops past ``node_budget`` composed nodes (an alias counts once, as in the text)."""

    node_budget: int = MAX_NODES
    nodes_composed: int = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        self.nodes_composed += 1
        if self.nodes_composed > self.node_budget:
            mark = self.peek_event().start_mark
            raise YamlError(f"more than {self.node_budget} values: not a settings file", mark.line + 1)
        return super().compose_node(parent, index)


def _int(loader: SafeLoader, node: yaml.ScalarNode) -> int:
    text = str(node.value).replace("_", "")
    if len(_INT_DIGITS_RE.findall(text)) > 40:  # read before int() turns 4,300 digits into a ValueError
        raise YamlError("a number too large to be a setting", node.start_mark.line + 1)
    value = SafeConstructor.construct_yaml_int(loader, node)
    if abs(value) > MAX_INT:
        raise YamlError(
            f"the number {text[:24]}... is too large (more than 64 bits)", node.start_mark.line + 1
        )
    return int(value)


def _float(loader: SafeLoader, node: yaml.ScalarNode) -> float:
    value = float(SafeConstructor.construct_yaml_float(loader, node))
    text = str(node.value).lower().lstrip("+-")
    if math.isinf(value) and text not in (".inf",):
        raise YamlError(f"the number {node.value[:24]} is out of range", node.start_mark.line + 1)
    return value


SafeLoader.add_constructor("tag:yaml.org,2002:int", _int)
SafeLoader.add_constructor("tag:yaml.org,2002:float", _float)


def expanded_size(node: yaml.Node, max_nodes: int = MAX_NODES, max_depth: int = MAX_DEPTH) -> int:
    """How many nodes ``node`` stands for once its aliases are expanded (counting stops past
    ``max_nodes``); raises :class:`YamlError` past ``max_depth`` levels. Linear in the
    composed graph: a shared node is counted once and its size remembered."""
    memo: dict[int, int] = {}

    def size(n: yaml.Node, depth: int) -> int:
        if depth > max_depth:
            raise YamlError(f"nested more than {max_depth} levels deep", n.start_mark.line + 1)
        got = memo.get(id(n))
        if got is not None:
            return got
        total = 1
        if isinstance(n, yaml.SequenceNode):
            children: list[yaml.Node] = list(n.value)
        elif isinstance(n, yaml.MappingNode):
            children = [c for pair in n.value for c in pair]
        else:
            children = []
        for c in children:
            total += size(c, depth + 1)
            if total > max_nodes:
                break
        memo[id(n)] = total
        return total

    return size(node, 0)


_SEPARATORS = " \t,:"  # after one of these a token may start (a flow collection, a quote)


def prescan(text: str, max_depth: int = MAX_DEPTH, max_bytes: int = MAX_BYTES) -> None:
    """Refuse, in one linear pass over the text and before any parsing, a document larger than
    ``max_bytes`` or nested more than ``max_depth`` levels deep. The depth is an estimate from
    above for what the parser will find: the open flow collections (``[``/``{`` where a token
    starts, outside quoted scalars, comments and block scalars) plus the stack of block indents
    (each ``- ``/``? `` opening one more); the exact depth, aliases expanded, is checked after
    composing. Raises :class:`YamlError` with the line where the limit is passed."""
    if len(text) > max_bytes:  # a character is at least one byte
        raise YamlError(f"larger than {max_bytes // 1024} KiB: not a YAML settings file")
    flow = 0  # open [ and { here
    indents: list[int] = []  # the block indents that enclose this line
    block_scalar_indent = -1  # >= 0: in a | or > scalar whose parent line has this indent
    quote = ""  # the quote character of the scalar being read across lines, or ""
    for lineno, line in enumerate(text.split("\n"), 1):
        stripped = line.lstrip(" ")
        col = len(line) - len(stripped)
        if block_scalar_indent >= 0:
            if not stripped.strip() or col > block_scalar_indent:
                continue
            block_scalar_indent = -1
        i, n = 0, len(line)
        if not quote and flow == 0 and stripped and stripped[0] != "#":
            while indents and indents[-1] >= col:  # the block level of this line
                indents.pop()
            indents.append(col)
            i = col
            while line.startswith(("- ", "? "), i) or line[i:].rstrip() in ("-", "?"):
                i += 2
                while i < n and line[i] == " ":
                    i += 1
                indents.append(i)
            if len(indents) > max_depth:
                raise YamlError(f"nested more than {max_depth} levels deep", lineno)
        prev, at_token = " ", True
        while i < n:
            c = line[i]
            if quote:
                if c == "\\" and quote == '"':
                    i += 2
                    continue
                if c == quote:
                    if quote == "'" and line.startswith("''", i):
                        i += 2
                        continue
                    quote = ""
            elif c == "#" and prev in " \t":
                break
            elif at_token:
                if c in "[{":
                    flow += 1
                    if flow + len(indents) > max_depth:
                        raise YamlError(f"nested more than {max_depth} levels deep", lineno)
                elif c in "\"'":
                    quote = c
                elif c in "|>" and flow == 0 and re.fullmatch(r"[|>][-+0-9]*\s*(#.*)?", line[i:]):
                    block_scalar_indent = col
                    break
            if c in "]}" and flow and not quote:
                flow -= 1
            # a token starts after a separator or an opened collection, not inside a plain
            # scalar ("x[[" is one scalar)
            at_token = not quote and (c in _SEPARATORS or (c in "[{]}" and at_token))
            prev = c
            i += 1


def decode(data: bytes, max_bytes: int = MAX_BYTES) -> str:
    """The bytes of a YAML file as text: no larger than ``max_bytes``, UTF-8, not binary."""
    if len(data) > max_bytes:
        raise YamlError(f"larger than {max_bytes // 1024} KiB: not a YAML settings file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise YamlError(f"not UTF-8 text (byte {e.start}): not YAML", line) from None
    if "\x00" in text:
        raise YamlError("a binary file, not YAML")
    return text


def _problem(e: yaml.YAMLError) -> YamlError:
    mark = getattr(e, "problem_mark", None)
    problem = getattr(e, "problem", None) or (str(e).splitlines() or [type(e).__name__])[0]
    return YamlError(str(problem), mark.line + 1 if mark is not None else None)


def compose(
    text: str,
    loader_cls: type[SafeLoader] = SafeLoader,
    *,
    max_nodes: int = MAX_NODES,
    max_depth: int = MAX_DEPTH,
) -> tuple[yaml.Node | None, SafeLoader]:
    """The document's node graph, checked (aliases, depth), and the loader to construct it
    with (the caller disposes of it). Raises :class:`YamlError`."""
    prescan(text, max_depth)  # before the parser: its scanner is the slow part
    try:
        loader = loader_cls(text)  # the pure reader refuses control characters here; libyaml's later
    except yaml.YAMLError as e:
        raise _problem(e) from None
    loader.node_budget = max_nodes
    try:
        node = loader.get_single_node()
        if node is not None and expanded_size(node, max_nodes, max_depth) > max_nodes:
            raise YamlError(
                f"more than {max_nodes} values once aliases are expanded (an alias bomb?)",
                node.start_mark.line + 1,
            )
    except yaml.YAMLError as e:
        loader.dispose()
        raise _problem(e) from None
    except RecursionError:
        loader.dispose()
        raise YamlError("nested too deeply") from None
    except YamlError:
        loader.dispose()
        raise
    return node, loader


def construct(loader: SafeLoader, node: yaml.Node) -> Any:
    """Build the value of one (checked) node. Raises :class:`YamlError`."""
    try:
        return loader.construct_object(node, deep=True)
    except yaml.YAMLError as e:
        raise _problem(e) from None
    except RecursionError:
        raise YamlError("nested too deeply", node.start_mark.line + 1) from None
    except (ValueError, TypeError) as e:
        if isinstance(e, YamlError):
            raise
        raise YamlError(f"cannot read the value: {e}", node.start_mark.line + 1) from None


def loads(text: str, loader_cls: type[SafeLoader] = SafeLoader, **limits: int) -> Any:
    """One YAML document, checked, as Python values (None for an empty one)."""
    node, loader = compose(text, loader_cls, **limits)
    try:
        return None if node is None else construct(loader, node)
    finally:
        loader.dispose()


def load_file(
    path: str | os.PathLike[str],
    loader_cls: type[SafeLoader] = SafeLoader,
    max_bytes: int = MAX_BYTES,
    **limits: int,
) -> Any:
    """A YAML file, read no further than ``max_bytes`` (OSError passes through)."""
    with open(path, "rb") as fh:
        data = fh.read(max_bytes + 1)
    return loads(decode(data, max_bytes), loader_cls, **limits)
