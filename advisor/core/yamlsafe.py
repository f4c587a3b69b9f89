"""The one YAML reader for every YAML input (the advisor's config, ``--engine-config``, rule
files, the alert config): bounded in size, nesting, alias expansion and number size.

PyYAML's ``SafeLoader`` builds no objects, but it still expands aliases: a 465-byte "billion
laughs" (nine anchors, each a list of nine aliases of the one before) stands for 9**9 values
and took a loader past 860 MiB. So a document is first *composed* (its node graph, where an
alias is a pointer, never a copy), the nodes it stands for once aliases are expanded are
counted (each node once, memoised, counting stops past the limit) with its depth, and only
then constructed. Integers beyond 64 bits and floats that overflow to infinity (``1e400``)
are refused where they are read, with their line: no setting, rule or engine argument is
that large, and a 400-digit integer must not become an ``OverflowError`` wherever it is first
used as a float. Every failure is one :class:`YamlError` with the line it is about.
"""

from __future__ import annotations

import math
import os
import re
from typing import Any

import yaml

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


class SafeLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` whose numbers are bounded (subclass it to add constructors)."""


def _int(loader: SafeLoader, node: yaml.ScalarNode) -> int:
    text = str(node.value).replace("_", "")
    if len(_INT_DIGITS_RE.findall(text)) > 40:  # read before int() turns 4,300 digits into a ValueError
        raise YamlError("a number too large to be a setting", node.start_mark.line + 1)
    value = yaml.SafeLoader.construct_yaml_int(loader, node)
    if abs(value) > MAX_INT:
        raise YamlError(
            f"the number {text[:24]}... is too large (more than 64 bits)", node.start_mark.line + 1
        )
    return int(value)


def _float(loader: SafeLoader, node: yaml.ScalarNode) -> float:
    value = float(yaml.SafeLoader.construct_yaml_float(loader, node))
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
    if len(text) > MAX_BYTES * 4:
        raise YamlError(f"larger than {MAX_BYTES // 1024} KiB: not a YAML settings file")
    try:
        loader = loader_cls(text)  # the reader refuses control characters here
    except yaml.YAMLError as e:
        raise _problem(e) from None
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
