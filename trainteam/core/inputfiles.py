"""Bounded reading of the files and YAML a person hands trainteam (task files, workflow specs, configs).

Every input is read as an adversary could write it, so the work it causes is bounded before
it starts: a file is ``stat``-ed before it is opened (a FIFO is never opened, ``/dev/zero``
never read), at most ``max_bytes + 1`` bytes are read, and the text must be UTF-8. YAML is
composed with a nesting limit checked while composing (so ``[[[[…`` 100k deep stops after
64 levels, long before Python's recursion limit), and its node graph is measured *expanded*
— each alias counted at the full size of what it names, memoized per node — before any
Python object is built, so a 723-byte "billion laughs" bomb is refused in milliseconds.

Why not a library: PyYAML (6.0) has no alias, size or depth limit — its maintainers point
out that aliases are shared references, so loading is cheap and only walking the result
explodes (yaml/pyyaml#235, open since 2018); its C loader composes recursively, so it is not
used here for composing. The Python projects that bound it do so inside their own loaders:
OmegaConf caps expanded nodes (omry/omegaconf#1296), cfn-lint counts the alias-resolved nodes
with memoization by identity (aws-cloudformation/cfn-lint#4670) — the approach taken here;
neither is a drop-in safe_load. So this module keeps ``yaml.safe_load`` semantics (libyaml's
scanner and parser when present, PyYAML's composer and SafeConstructor) and adds the bounds.

A leaf module: stdlib, yaml and ``trainteam.core.errors`` only (agents, workflows and the CLI use it).
"""

from __future__ import annotations

import codecs
import errno
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from trainteam.core.errors import BadInput

if TYPE_CHECKING:  # the composer _Bounds hooks into (mixed in before it in the loaders below)
    from yaml.composer import Composer as _ComposerHooks
else:
    _ComposerHooks = object

MAX_BYTES = 1 << 20
MAX_DEPTH = 64
MAX_NODES = 100_000
MAX_SCALAR_CHARS = 1 << 20
MAX_EXPANDED_CHARS = 8 << 20  # scalars repeated by aliases: 8x the largest file read by default


def _shown(path: Path | str) -> str:
    """The path as one printable line (a name may hold a newline)."""
    s = str(path)
    return s if s.isprintable() else ascii(s)


# ------------------------------------------------------------------ files
def _check_kind(path: Path, what: str, st: os.stat_result) -> None:
    if stat.S_ISDIR(st.st_mode):
        raise BadInput(f"{_shown(path)}: {what} is a folder, expected a file")
    if not stat.S_ISREG(st.st_mode):
        raise BadInput(f"{_shown(path)}: {what} is not a regular file (a device, FIFO or socket)")


def _os_error(path: Path, what: str, exc: OSError) -> BadInput:
    shown = _shown(path)
    if exc.errno == errno.ENOENT:
        return BadInput(f"{shown}: {what} not found")
    if exc.errno == errno.ELOOP:
        return BadInput(f"{shown}: {what} is a symlink loop")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return BadInput(f"{shown}: {what} is not readable (permission denied)")
    if exc.errno == errno.EISDIR:
        return BadInput(f"{shown}: {what} is a folder, expected a file")
    return BadInput(f"{shown}: {what} cannot be read ({exc.strerror or exc.__class__.__name__})")


def _read_bytes(path: Path, what: str, max_bytes: int) -> bytes:
    try:
        _check_kind(path, what, os.stat(path))  # before opening: a FIFO would block, /dev/zero never ends
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise _os_error(path, what, exc) from None
    except ValueError:  # a NUL byte in the name
        raise BadInput(f"{_shown(path)}: {what} is not a valid path") from None
    try:
        _check_kind(path, what, os.fstat(fd))  # the file opened is the file checked
        chunks, left = [], max_bytes + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as exc:
        raise _os_error(path, what, exc) from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > max_bytes:
        raise BadInput(f"{_shown(path)}: {what} is larger than {max_bytes:,} bytes")
    return data


def _looks_utf16(data: bytes) -> bool:
    """Mostly-ASCII UTF-16 without a BOM: NUL in every other byte."""
    even, odd = data[0::2], data[1::2]
    return len(data) >= 2 and max(even.count(0), odd.count(0)) >= len(data) // 4


def _decode(data: bytes, path: Path, what: str) -> str:
    shown = _shown(path)
    if data.startswith((codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)):
        raise BadInput(f"{shown}: {what} is UTF-32; save it as UTF-8")
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) or (b"\x00" in data and _looks_utf16(data)):
        raise BadInput(f"{shown}: {what} is UTF-16; save it as UTF-8")
    if b"\x00" in data:
        raise BadInput(f"{shown}: {what} holds NUL bytes at offset {data.index(0)}; it is not a text file")
    try:
        return data.decode("utf-8-sig")  # a UTF-8 BOM is fine
    except UnicodeDecodeError as exc:
        raise BadInput(
            f"{shown}: {what} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); save it as UTF-8"
        ) from None


def read_text(path: Path, what: str, max_bytes: int = MAX_BYTES) -> str:
    """The UTF-8 text of a regular file of at most ``max_bytes``; anything else is a one-line
    ``BadInput`` naming ``what`` and the path (missing, a folder, a symlink loop, a device or
    FIFO, too large, not UTF-8, unreadable)."""
    path = Path(path)
    return _decode(_read_bytes(path, what, max_bytes), path, what)


# ------------------------------------------------------------------- YAML
class _Limit(Exception):
    """A bound was passed while composing: ``message`` and the 1-based line."""

    def __init__(self, message: str, line: int | None):
        super().__init__(message)
        self.message, self.line = message, line


def _line(mark: Any) -> int | None:
    return mark.line + 1 if mark is not None else None


_MERGE_TAG = "tag:yaml.org,2002:merge"


def _duplicate_key(node: yaml.MappingNode) -> tuple[str, int | None, int | None] | None:
    """The first key a mapping writes twice, and the lines of both: PyYAML keeps the last silently,
    so a person's second ``learning_rate:`` would quietly win. Keys are compared as written and
    resolved (``1`` and ``"1"`` differ, as they do once loaded); merge keys (``<<``) are left to
    YAML's own rule, where a written key overrides a merged one."""
    seen: dict[tuple[str, str], int | None] = {}
    for key, _ in node.value:
        if not isinstance(key, yaml.ScalarNode) or key.tag == _MERGE_TAG:
            continue
        ident = (key.tag, key.value)
        if ident in seen:
            return key.value, seen[ident], _line(key.start_mark)
        seen[ident] = _line(key.start_mark)
    return None


class _Bounds(_ComposerHooks):
    """Composer hooks that stop past MAX_DEPTH levels, MAX_NODES written nodes or a scalar over
    MAX_SCALAR_CHARS, and at a key a mapping writes twice, while composing (before Python recursion
    or memory grows)."""

    _depth = 0
    _written = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            return super().compose_node(parent, index)
        self._depth += 1
        self._written += 1
        if self._depth > MAX_DEPTH:
            raise _Limit(f"nested deeper than {MAX_DEPTH} levels", _line(self.peek_event().start_mark))
        if self._written > MAX_NODES:
            raise _Limit(f"more than {MAX_NODES:,} nodes", _line(self.peek_event().start_mark))
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def compose_mapping_node(self, anchor: Any) -> Any:
        node = super().compose_mapping_node(anchor)
        dup = _duplicate_key(node)
        if dup is not None:
            key, first, again = dup
            shown = key if len(key) <= 60 and key.isprintable() else ascii(key[:60])
            raise _Limit(f"key {shown!r} is given twice (lines {first} and {again}); keep one", None)
        return node

    def compose_scalar_node(self, anchor: Any) -> Any:
        node = super().compose_scalar_node(anchor)
        if len(node.value) > MAX_SCALAR_CHARS:
            raise _Limit(f"a value longer than {MAX_SCALAR_CHARS:,} characters", _line(node.start_mark))
        return node


class _PyLoader(_Bounds, yaml.SafeLoader):
    """Pure-Python scanning: ~6 s for a 1 MiB scalar, so only where libyaml is missing."""


if yaml.__with_libyaml__:
    from yaml.composer import Composer
    from yaml.cyaml import CParser

    class _CLoader(_Bounds, Composer, CParser, yaml.constructor.SafeConstructor, yaml.resolver.Resolver):
        """libyaml's scanner and parser (events), Python's composer (bounded above): composition
        is where depth and aliases are, and the C composer recurses without a limit."""

        def __init__(self, stream: str):
            CParser.__init__(self, stream)
            yaml.constructor.SafeConstructor.__init__(self)
            yaml.resolver.Resolver.__init__(self)
            Composer.__init__(self)

    _Loader: type = _CLoader
else:
    _Loader = _PyLoader


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _check_expanded(root: yaml.Node) -> None:
    """Size, depth and characters of the document with every alias expanded, computed once
    per node (an alias is the same node object as its anchor) without recursion."""
    size: dict[int, tuple[int, int, int]] = {}  # id -> (nodes, depth, scalar chars)
    open_: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            kids = [size[id(c)] for c in _children(node)]
            nodes = 1 + sum(k[0] for k in kids)
            depth = 1 + max((k[1] for k in kids), default=0)
            chars = len(node.value) if isinstance(node, yaml.ScalarNode) else sum(k[2] for k in kids)
            if nodes > MAX_NODES:
                raise _Limit(
                    f"aliases expand it to more than {MAX_NODES:,} nodes (an alias bomb?)", _line(node.start_mark)
                )
            if depth > MAX_DEPTH:
                raise _Limit(f"aliases nest it deeper than {MAX_DEPTH} levels", _line(node.start_mark))
            if chars > MAX_EXPANDED_CHARS:
                raise _Limit(f"aliases repeat its text past {MAX_EXPANDED_CHARS:,} characters", _line(node.start_mark))
            size[key] = (nodes, depth, chars)
            open_.discard(key)
            continue
        if key in size:
            continue
        if key in open_:
            raise _Limit("an alias refers to the collection it is in (a recursive alias)", _line(node.start_mark))
        open_.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in _children(node) if id(c) not in size)


def _yaml_problem(exc: yaml.YAMLError, text: str) -> tuple[str, int | None]:
    if isinstance(exc, yaml.reader.ReaderError):
        return f"unacceptable character #x{exc.character:04x}", text.count("\n", 0, exc.position) + 1
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        return (exc.problem or exc.context or "invalid YAML").strip(), _line(mark)
    first = (str(exc).splitlines() or [exc.__class__.__name__])[0]
    return first.strip(), None


def _one_line(source: str, problem: str, line: int | None) -> BadInput:
    problem = " ".join(problem.split()) or "invalid YAML"
    return BadInput(f"{source}: not valid YAML ({problem}" + (f", line {line})" if line else ")"))


def load_yaml(text: str, source: str) -> Any:
    """``yaml.safe_load(text)`` with limits: nesting ≤ MAX_DEPTH, expanded size ≤ MAX_NODES nodes,
    scalars ≤ MAX_SCALAR_CHARS, no key twice in one mapping. Any failure is one ``BadInput`` line
    naming ``source``."""
    loader = None
    try:
        loader = _Loader(text)  # the reader refuses unprintable characters here
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expanded(node)
        return loader.construct_document(node)
    except _Limit as exc:
        where = f" (line {exc.line})" if exc.line else ""
        raise BadInput(f"{source}: YAML refused: {exc.message}{where}") from None
    except yaml.YAMLError as exc:
        problem, line = _yaml_problem(exc, text)
        line = min(line, text.count("\n") + 1) if line else None  # libyaml marks the end one line on
        if "maximum nesting depth" in problem:  # libyaml's own limit (1000), met while scanning ahead
            raise BadInput(f"{source}: YAML refused: nested deeper than {MAX_DEPTH} levels (line {line})") from None
        raise _one_line(source, problem, line) from None
    except (ValueError, OverflowError, TypeError, RecursionError) as exc:  # e.g. a timestamp 2024-13-45
        raise _one_line(source, str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__, None) from None
    finally:
        if loader is not None:
            loader.dispose()


def load_yaml_file(path: Path, what: str, max_bytes: int = MAX_BYTES) -> Any:
    """``load_yaml(read_text(path, what, max_bytes), path)``."""
    return load_yaml(read_text(path, what, max_bytes), _shown(path))
