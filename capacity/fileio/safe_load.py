"""Bounded reading of user files: YAML and JSON whose cost is known before any work is done.

Every scenario, simulation block, config.json, profile catalog, trace and benchmark file goes through here.
``read_bytes`` opens the path without blocking, refuses anything but a regular file (``/dev/zero``, a FIFO, a
socket, a directory) and reads at most ``limit`` bytes. ``parse_yaml`` composes the YAML node graph (safe tags
only) and checks it before building any Python object:

* aliases: the document as expanded (every alias counted as a copy of its anchor) holds at most
  ``max_nodes`` values, so a 552-byte "billion laughs" is refused at once; a recursive alias is refused;
* nesting at most ``MAX_DEPTH`` levels; duplicate keys in one mapping refused (YAML 1.2 forbids them);
* integers of at most ``MAX_INT_DIGITS`` digits; no lone surrogates (no file can store them).

``parse_json`` applies the same checks to JSON (and refuses NaN and Infinity, which JSON does not have).
Every failure is one ScenarioError naming the origin and, for YAML, the line.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

import yaml

from capacity.errors import ScenarioError, clean_line

#: Deepest nesting of mappings and lists accepted (a scenario nests 3 levels).
MAX_DEPTH = 32
#: Most values in one document, aliases expanded (a scenario holds about 50).
MAX_NODES = 20_000
#: Longest integer literal [digits]; 10^30 is beyond any count or size the planner takes.
MAX_INT_DIGITS = 30

_SURROGATE = re.compile("[\ud800-\udfff]")
_INT_TAG = "tag:yaml.org,2002:int"


def read_bytes(path: str | Path, limit: int, what: str = "file") -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes; ScenarioError naming the path otherwise.

    The file is opened with O_NONBLOCK (a FIFO without a writer does not hang the open) and checked with
    ``fstat`` on the open descriptor (no race between check and read); devices report size 0, so the kind of
    file is checked, not only its size.
    """
    shown = clean_line(str(path), 120)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise ScenarioError(f"cannot read {shown}: {exc.strerror or exc}") from None
    except (ValueError, TypeError) as exc:  # a NUL byte in the path, or not a path at all
        raise ScenarioError(f"cannot read {shown}: {exc}") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise ScenarioError(f"{shown} is a directory; give a {what}")
        if not stat.S_ISREG(info.st_mode):
            raise ScenarioError(f"{shown} is not a regular file (a device, FIFO or socket); give a {what}")
        if info.st_size > limit:
            raise ScenarioError(f"{shown} is {info.st_size:,} bytes; a {what} is limited to {limit:,} bytes")
        chunks, total = [], 0
        while total <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > limit:  # the file grew while being read
            raise ScenarioError(f"{shown} is over {limit:,} bytes; a {what} is limited to {limit:,} bytes")
        return b"".join(chunks)
    except OSError as exc:
        raise ScenarioError(f"cannot read {shown}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def read_text(path: str | Path, limit: int, what: str = "file", encoding: str = "utf-8") -> str:
    """The text of a regular file of at most ``limit`` bytes; undecodable bytes become U+FFFD."""
    return read_bytes(path, limit, what).decode(encoding, errors="replace")


# --- YAML ------------------------------------------------------------------------------------------------------

def _where(node: yaml.Node) -> str:
    mark = node.start_mark
    return f" at line {mark.line + 1}" if mark is not None else ""


def _check_scalar(value: str, tag: str, origin: str, node: yaml.Node) -> None:
    if tag == _INT_TAG and len(value.lstrip("+-").replace("_", "")) > MAX_INT_DIGITS:
        raise ScenarioError(f"{origin}{_where(node)}: an integer of {len(value):,} digits; numbers are limited to "
                            f"{MAX_INT_DIGITS} digits")
    if _SURROGATE.search(value):
        raise ScenarioError(f"{origin}{_where(node)}: text holds a lone surrogate ({show_char(value)}), which no "
                            f"file can store; write the character itself")


def show_char(value: str) -> str:
    found = _SURROGATE.search(value)
    return f"\\u{ord(found.group()):04x}" if found else ""


def check_nodes(root: yaml.Node, origin: str, max_nodes: int = MAX_NODES, max_depth: int = MAX_DEPTH) -> int:
    """Check a composed YAML node graph (see the module docstring); returns its expanded size in values.

    Iterative, with each distinct node's expanded size computed once, so the check costs O(distinct nodes)
    whatever the aliases would expand to.
    """
    size: dict[int, int] = {}
    on_path: set[int] = set()
    aliases = 0
    stack: list[tuple[yaml.Node, int, bool]] = [(root, 1, False)]
    while stack:
        node, depth, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            children = _children(node)
            total = 1 + sum(size[id(c)] for c in children)
            if total > max_nodes and aliases:
                raise ScenarioError(f"{origin}{_where(node)}: holds over {max_nodes:,} values once its aliases "
                                    f"are expanded; a file of this kind needs far fewer (an alias bomb?)")
            if total > max_nodes:
                raise ScenarioError(f"{origin} holds over {max_nodes:,} values; a file of this kind needs far fewer")
            size[key] = total
            continue
        if key in size:
            aliases += 1
            continue  # an alias of a node already checked: its size is known
        if key in on_path:
            raise ScenarioError(f"{origin}{_where(node)}: an alias refers to a value that contains it (a recursive "
                                f"alias); write the values out")
        if depth > max_depth:
            raise ScenarioError(f"{origin}{_where(node)}: nested more than {max_depth} levels deep")
        if isinstance(node, yaml.ScalarNode):
            _check_scalar(str(node.value), node.tag, origin, node)
            size[key] = 1
            continue
        on_path.add(key)
        stack.append((node, depth, True))
        if isinstance(node, yaml.MappingNode):
            seen: set[tuple[str, str]] = set()
            for k, _v in node.value:
                if isinstance(k, yaml.ScalarNode) and k.tag != "tag:yaml.org,2002:merge":
                    ident = (k.tag, str(k.value))
                    if ident in seen:
                        raise ScenarioError(f"{origin}{_where(k)}: the key {clean_line(repr(str(k.value)), 80)} "
                                            f"appears twice in one mapping; keep one")
                    seen.add(ident)
        for child in _children(node):
            stack.append((child, depth + 1, False))
    return size[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


#: libyaml's parser when PyYAML has it (six times faster at composing), else the pure-Python one; both safe.
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_shipped(path: str | Path) -> Any:
    """A YAML file this package ships (catalogs, preset scenarios), safe-loaded with ``SAFE_LOADER``, without the
    size and node limits user files get: ours, and read once per process. OSError and yaml.YAMLError pass on."""
    with open(path, encoding="utf-8") as fh:
        return yaml.load(fh, Loader=SAFE_LOADER)


#: Parser events that each start one value of the node graph (a key, a value, a list or a mapping); an alias
#: stands for at least one.
_VALUE_EVENTS = (yaml.ScalarEvent, yaml.MappingStartEvent, yaml.SequenceStartEvent, yaml.AliasEvent)


def _count_events(text: str, origin: str, max_nodes: int) -> None:
    """Refuse a document of more than ``max_nodes`` written values after reading only that many parser events,
    before any node is built, so a large file costs no more than a small one to refuse.

    Every counted event is at least one value of the expanded graph ``check_nodes`` counts, so a document this
    refuses would be refused there too, with the same message.
    """
    counter = SAFE_LOADER(text)
    try:
        values = 0
        while counter.check_event():
            if isinstance(counter.get_event(), _VALUE_EVENTS):
                values += 1
                if values > max_nodes:
                    raise ScenarioError(f"{origin} holds over {max_nodes:,} values; a file of this kind needs far "
                                        f"fewer")
    finally:
        counter.dispose()


def parse_yaml(text: str, origin: str = "scenario", max_nodes: int = MAX_NODES) -> Any:
    """Safe-load YAML text after checking its node graph; one-line ScenarioError naming ``origin``."""
    origin = clean_line(origin, 120)
    loader = None
    try:
        _count_events(text, origin, max_nodes)
        loader = SAFE_LOADER(text)
        node = loader.get_single_node()
        if node is None:
            return None
        check_nodes(node, origin, max_nodes)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise ScenarioError(f"{origin} is not valid YAML{where}: {problem}") from None
    except RecursionError:
        raise ScenarioError(f"{origin} is nested too deeply (over {MAX_DEPTH} levels)") from None
    except ValueError as exc:  # e.g. a timestamp out of range
        if isinstance(exc, ScenarioError):
            raise
        raise ScenarioError(f"{origin} holds a value YAML cannot read: {exc}") from None
    finally:
        if loader is not None:
            loader.dispose()


def read_yaml(path: str | Path, limit: int, what: str = "YAML file", max_nodes: int = MAX_NODES) -> Any:
    """``parse_yaml`` of a regular file of at most ``limit`` bytes."""
    return parse_yaml(read_text(path, limit, what), str(path), max_nodes)


# --- JSON ------------------------------------------------------------------------------------------------------

def _pairs(origin: str):
    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                raise ScenarioError(f"{origin}: the key {clean_line(repr(key), 80)} appears twice in one object; "
                                    f"keep one")
            out[key] = value
        return out

    return hook


def _integer(origin: str):
    def hook(text: str) -> int:
        if len(text.lstrip("-")) > MAX_INT_DIGITS:
            raise ScenarioError(f"{origin}: an integer of {len(text):,} digits; numbers are limited to "
                                f"{MAX_INT_DIGITS} digits")
        return int(text)

    return hook


def _constant(origin: str):
    def hook(name: str) -> float:
        raise ScenarioError(f"{origin}: {name} is not a JSON number; give a finite number")

    return hook


def check_json_value(value: Any, origin: str, max_depth: int = MAX_DEPTH) -> None:
    """Nesting at most ``max_depth`` and no lone surrogates, checked without recursion."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > max_depth:
            raise ScenarioError(f"{origin}: nested more than {max_depth} levels deep")
        if isinstance(item, str):
            if _SURROGATE.search(item):
                raise ScenarioError(f"{origin}: text holds a lone surrogate ({show_char(item)}), which no file can "
                                    f"store; write the character itself")
        elif isinstance(item, dict):
            stack.extend((k, depth + 1) for k in item)
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)


def parse_json(text: str | bytes, origin: str = "JSON", max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads`` refusing duplicate keys, NaN/Infinity, huge integers, deep nesting and lone surrogates."""
    import json  # here, not at the top: reading a YAML scenario does not need it

    origin = clean_line(origin, 120)
    try:
        value = json.loads(text, object_pairs_hook=_pairs(origin), parse_int=_integer(origin),
                           parse_constant=_constant(origin))
    except json.JSONDecodeError as exc:
        raise ScenarioError(f"{origin} is not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") \
            from None
    except RecursionError:
        raise ScenarioError(f"{origin} is nested too deeply (over {max_depth} levels)") from None
    except UnicodeDecodeError as exc:
        raise ScenarioError(f"{origin} is not UTF-8 text: {exc.reason}") from None
    check_json_value(value, origin, max_depth)
    return value


_JSON_SPACE = re.compile(r"[ \t\n\r]*")


def parse_json_list(text: str, origin: str = "JSON", max_items: int = 10_000, what: str = "items",
                    max_depth: int = MAX_DEPTH) -> list[Any]:
    """A JSON array decoded one item at a time (the checks of ``parse_json`` on each): more than ``max_items``
    items is refused as soon as the next one starts, before it or any later one is built (a list of a million
    empty objects would take 180 MB whole)."""
    import json

    origin = clean_line(origin, 120)
    decoder = json.JSONDecoder(object_pairs_hook=_pairs(origin), parse_int=_integer(origin),
                               parse_constant=_constant(origin))

    def invalid(at: int, msg: str) -> ScenarioError:
        line = text.count("\n", 0, at) + 1
        column = at - (text.rfind("\n", 0, at) + 1) + 1
        return ScenarioError(f"{origin} is not valid JSON at line {line}, column {column}: {msg}")

    i = _JSON_SPACE.match(text, 0).end()
    if text[i:i + 1] != "[":
        raise invalid(i, "expecting '['")
    i = _JSON_SPACE.match(text, i + 1).end()
    items: list[Any] = []
    if text[i:i + 1] == "]":
        i += 1
    else:
        while True:
            if len(items) >= max_items:
                raise ScenarioError(f"{origin} holds over {max_items:,} {what}; the limit is {max_items:,}")
            try:
                value, i = decoder.raw_decode(text, i)
            except json.JSONDecodeError as exc:
                raise invalid(exc.pos, exc.msg) from None
            except RecursionError:
                raise ScenarioError(f"{origin} is nested too deeply (over {max_depth} levels)") from None
            check_json_value(value, origin, max_depth - 1)
            items.append(value)
            i = _JSON_SPACE.match(text, i).end()
            if text[i:i + 1] == ",":
                i = _JSON_SPACE.match(text, i + 1).end()
                continue
            if text[i:i + 1] == "]":
                i += 1
                break
            raise invalid(i, "expecting ',' or ']'")
    if text[_JSON_SPACE.match(text, i).end():]:
        raise invalid(_JSON_SPACE.match(text, i).end(), "extra data")
    return items


def read_json(path: str | Path, limit: int, what: str = "JSON file") -> Any:
    """``parse_json`` of a regular file of at most ``limit`` bytes."""
    return parse_json(read_text(path, limit, what), str(path))


__all__ = ["MAX_DEPTH", "MAX_INT_DIGITS", "MAX_NODES", "check_json_value", "check_nodes", "parse_json",
           "parse_json_list",
           "parse_yaml", "read_bytes", "read_json", "read_text", "read_yaml"]
