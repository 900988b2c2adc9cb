"""Read a config file into a ``Doc``: JSON or YAML by content, with the line of every key.

Files are read through trainmem.sources.files (regular files only, size capped). YAML goes
through PyYAML's safe loader (no Python objects are built); the node tree it composes gives
each key's line, so a wrong value is reported at its line. A malformed file is one line
with the file and the line of the problem.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped,unused-ignore]

from trainmem.core.errors import PlanError
from trainmem.sources import files
from trainmem.sources.configs.common import FIELD, Doc

MAX_CONFIG = 4 * 2**20  # training configs are kilobytes; a larger file is something else


def read_doc(path: Path, *, what: str = "config file") -> Doc:
    """The parsed file at ``path``; PlanError (one line) for anything unreadable."""
    if path.suffix.lower() == ".toml":  # no framework's training config is TOML; ours is
        raise PlanError(
            FIELD,
            f"{files.show(path)}: a .toml file is a trainmem plans file, not a training config: "
            f"open it with trainmem-tui --compare {files.show(path)} (--from reads YAML, JSON, "
            "launch scripts and Unsloth scripts)",
        )
    try:
        text = files.read_text(path, limit=MAX_CONFIG, what=what)
    except files.FileReadError as exc:
        raise PlanError(FIELD, str(exc)) from None
    return parse_doc(text, files.show(path), path)


def parse_doc(text: str, name: str, path: Path | None = None) -> Doc:
    """JSON when it looks like JSON (a ``.json`` name or a leading ``{``), else YAML."""
    # Values are separated by commas or line breaks, in JSON and YAML alike: a text with more
    # separators than MAX_EXPANDED values could use is refused before a parser composes them
    # (libyaml takes 12 s over 2M values on one 4 MiB line, and they would be refused after).
    if text.count(",") + text.count("\n") > 4 * MAX_EXPANDED:
        raise PlanError(
            FIELD,
            f"{name}: holds over {MAX_EXPANDED:,} values; a training config holds a few hundred",
        )
    looks_json = name.endswith(".json") or text.lstrip().startswith("{")
    if looks_json:
        try:
            data = files.parse_json(text, what=name)
        except files.FileReadError as exc:
            problem = _json_problem(text, name) or str(exc)
            if name.endswith(".json"):
                raise PlanError(FIELD, problem) from None
            try:  # a YAML flow mapping also starts with "{"
                return _yaml_doc(text, name, path)
            except PlanError:
                raise PlanError(FIELD, problem) from None
        if not isinstance(data, dict):
            raise PlanError(FIELD, f"{name} holds {type(data).__name__}, not a mapping of keys")
        return Doc(name, data, _json_lines(text), path)
    return _yaml_doc(text, name, path)


# libyaml's parser when PyYAML has it: composing 4 MiB of keys takes 1.7 s instead of 9 s.
# The constructor is the same SafeConstructor: no Python object is ever built.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _control_character(text: str, name: str, exc: Any) -> PlanError:
    """A control character (NUL, BEL, ESC) PyYAML's reader refuses: libyaml gives its byte
    offset, PyYAML's own reader its character offset."""
    before = text.encode("utf-8")[: exc.position] if _LOADER is not yaml.SafeLoader else None
    at = (before.count(b"\n") if before is not None else text.count("\n", 0, exc.position)) + 1
    return PlanError(FIELD, f"{name}:{at}: not valid YAML: control character {exc.character:#04x}")


def _yaml_doc(text: str, name: str, path: Path | None) -> Doc:
    try:
        loader = _LOADER(text)  # PyYAML's reader refuses control characters right here
    except yaml.reader.ReaderError as exc:
        raise _control_character(text, name, exc) from None
    try:
        node = loader.get_single_node()  # libyaml's, here
        if node is not None:
            _check_aliases(node, name)  # before constructing: merge keys copy what they expand
        data = loader.construct_document(node) if node is not None else None
    except yaml.reader.ReaderError as exc:
        raise _control_character(text, name, exc) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = exc.problem or exc.context or "malformed"
        raise PlanError(FIELD, f"{name}{line}: not valid YAML: {_one_line(problem)}") from None
    except yaml.YAMLError as exc:
        raise PlanError(FIELD, f"{name}: not valid YAML: {_one_line(exc)}") from None
    except RecursionError:
        raise PlanError(FIELD, f"{name}: nested too deeply") from None
    except PlanError:
        raise
    except (ValueError, OverflowError):  # int() of over 4,300 digits, a date like 2024-13-45
        raise PlanError(FIELD, f"{name}: not valid YAML: a value that cannot be read") from None
    finally:
        loader.dispose()
    if data is None:
        raise PlanError(FIELD, f"{name} is empty")
    if not isinstance(data, dict):
        raise PlanError(FIELD, f"{name} holds a {type(data).__name__}, not a mapping of keys")
    return Doc(name, data, dict(_node_lines(node)), path)


MAX_EXPANDED = 100_000  # values a YAML document may hold once its aliases are expanded


def _check_aliases(root: Any, name: str) -> None:
    """Refuse a document whose aliases expand to more than ``MAX_EXPANDED`` values (the
    "billion laughs": nine aliases of nine aliases of ...), that holds that many itself, or
    whose aliases refer to themselves.

    The composed nodes are shared, not copied, so loading is cheap; but anything that walks
    the values (a message, a comparison, axolotl's own loader) expands them, and PyYAML's
    merge keys (``<<: [*a, *a]``) copy what they merge while constructing. So the expanded
    size is counted on the node graph first, each node once (sizes of shared nodes are
    memoised), without expanding anything."""
    size: dict[int, int] = {}
    open_: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            open_.discard(key)
            total = 1 + sum(size[id(c)] for c in _children(node))
            size[key] = min(total, MAX_EXPANDED + 1)
            continue
        if key in size:
            continue
        if key in open_:
            line = node.start_mark.line + 1
            raise PlanError(FIELD, f"{name}:{line}: not valid YAML: an alias refers to itself")
        open_.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in _children(node) if id(c) not in size)
    if size[id(root)] > MAX_EXPANDED:
        what = (
            f"holds over {MAX_EXPANDED:,} values"
            if len(size) > MAX_EXPANDED  # that many without counting an alias twice
            else f"its YAML aliases expand to over {MAX_EXPANDED:,} values (an alias bomb?)"
        )
        raise PlanError(FIELD, f"{name}: {what}; a training config holds a few hundred")


def _children(node: Any) -> list[Any]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _node_lines(node: Any, prefix: str = "") -> Iterator[tuple[str, int]]:
    """(dotted key, 1-based line) for every key of nested mappings. Each node is visited
    once, so YAML aliases cannot make the walk grow."""
    seen: set[int] = set()
    stack = [(node, prefix)]
    while stack:
        item, at = stack.pop()
        if not isinstance(item, yaml.MappingNode) or id(item) in seen:
            continue
        seen.add(id(item))
        for key_node, value_node in item.value:
            if isinstance(key_node, yaml.ScalarNode):
                key = f"{at}{key_node.value}"
                yield key, key_node.start_mark.line + 1
                stack.append((value_node, f"{key}."))


def _json_lines(text: str) -> dict[str, int]:
    """Key lines of a JSON document, through the YAML composer (JSON is YAML); none when
    PyYAML reads it differently (lines are only for messages)."""
    try:
        node = yaml.compose(text, Loader=_LOADER)
    except (yaml.YAMLError, RecursionError):
        return {}
    return dict(_node_lines(node))


def _json_problem(text: str, name: str) -> str | None:
    """``name:line: not valid JSON: why`` for a syntax error (files.parse_json words it
    without the line in front); None for the errors it reports itself (depth, huge ints)."""
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        return f"{name}:{exc.lineno}: not valid JSON: {exc.msg} (column {exc.colno})"
    except (ValueError, RecursionError):
        return None
    return None


def _one_line(text: object) -> str:
    return " ".join(str(text).split())[:200]


__all__ = ["MAX_CONFIG", "parse_doc", "read_doc"]
