"""Shared pieces of the fuzz tests (issue 13): budgets, byte mutators, and the property checks.

Budget: each test runs ``ci`` examples by default (the whole directory well under a minute on
a 2-core machine, derandomized so CI is reproducible); ``POLYFS_FUZZ_EXAMPLES=N`` runs N
examples per test with fresh randomness (``scripts/fuzz.py`` sets it). No example database is
written (the repository stays clean).

The property every write-side test checks (:func:`attempt`): an operation either succeeds or
is refused with an errno polyfs maps from its own error tree, no unexpected exception reaches
the operations' catch-all (which would log a traceback and answer EIO), and a refused write
leaves every object of the store byte-identical.
"""
from __future__ import annotations

import errno
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
for _p in (HERE.parent, HERE.parent / "fs"):  # support.py, corpus.py; writeharness.py
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from hypothesis import HealthCheck, Phase, event, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.errors import InvalidArgument  # noqa: E402

ENV = "POLYFS_FUZZ_EXAMPLES"
INTERESTING_INTS = (0, 1, 2, 3, 7, 8, 15, 16, 255, 256, 4095, 4096, 65535, 65536, 2 ** 31 - 1, 2 ** 31,
                    2 ** 32 - 1, 2 ** 32, 2 ** 53, 2 ** 63 - 1, 2 ** 63, 2 ** 64 - 2, 2 ** 64 - 1)


def scaled() -> int | None:
    """Examples per test asked for by the environment, or None (the CI budget)."""
    raw = os.environ.get(ENV, "").strip()
    return max(1, int(raw)) if raw else None


def budget(ci: int) -> settings:
    """Hypothesis settings: ``ci`` examples in CI (derandomized), ``POLYFS_FUZZ_EXAMPLES`` when set.
    A failure is reported as found (shrinking a mount-sized example takes minutes) unless
    ``POLYFS_FUZZ_SHRINK=1``."""
    n = scaled()
    phases = [p for p in Phase if p is not Phase.shrink or os.environ.get("POLYFS_FUZZ_SHRINK") == "1"]
    return settings(max_examples=n or ci, deadline=None, derandomize=n is None, database=None, phases=phases,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])


# -- byte mutations ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Mutation:
    """One edit of a byte string (printed by hypothesis when an example fails)."""

    kind: str
    pos: int
    arg: Any

    def apply(self, data: bytes) -> bytes:
        n = len(data)
        pos = self.pos % (n + 1) if n else 0
        if self.kind == "flip":
            if not n:
                return data
            pos %= n
            return data[:pos] + bytes([data[pos] ^ (self.arg or 1)]) + data[pos + 1:]
        if self.kind == "truncate":
            return data[:pos]
        if self.kind == "insert":
            return data[:pos] + self.arg + data[pos:]
        if self.kind == "overwrite":
            return data[:pos] + self.arg + data[pos + len(self.arg):]
        if self.kind == "delete":
            return data[:pos] + data[pos + self.arg:]
        if self.kind == "duplicate":
            return data[:pos] + data[pos:pos + self.arg] + data[pos:]
        if self.kind == "int":  # an interesting little- or big-endian integer over the bytes at pos
            width, order, value = self.arg
            blob = (value % (1 << (8 * width))).to_bytes(width, order)
            return data[:pos] + blob + data[pos + width:]
        raise ValueError(self.kind)


def mutations(near: Callable[[int], st.SearchStrategy[int]] | None = None) -> st.SearchStrategy[Mutation]:
    """One mutation; ``near`` (a position strategy) focuses edits on part of the file."""
    pos = st.integers(0, 1 << 20) if near is None else near(0)
    return st.one_of(
        st.builds(Mutation, st.just("flip"), pos, st.integers(1, 255)),
        st.builds(Mutation, st.just("truncate"), pos, st.none()),
        st.builds(Mutation, st.just("insert"), pos, st.binary(min_size=1, max_size=64)),
        st.builds(Mutation, st.just("overwrite"), pos, st.binary(min_size=1, max_size=32)),
        st.builds(Mutation, st.just("delete"), pos, st.integers(1, 256)),
        st.builds(Mutation, st.just("duplicate"), pos, st.integers(1, 256)),
        st.builds(Mutation, st.just("int"), pos,
                  st.tuples(st.sampled_from((1, 2, 4, 8)), st.sampled_from(("little", "big")),
                            st.sampled_from(INTERESTING_INTS))),
    )


def mutate(data: bytes, edits: list[Mutation]) -> bytes:
    for m in edits:
        data = m.apply(data)
    return data


def edits(max_size: int = 4, near: Callable[[int], st.SearchStrategy[int]] | None = None) -> st.SearchStrategy:
    return st.lists(mutations(near), min_size=1, max_size=max_size)


# -- JSON mutations ----------------------------------------------------------------------------
def json_values(deep: bool = True) -> st.SearchStrategy[Any]:
    """Any JSON value, including the awkward ones: huge and non-finite numbers, odd strings."""
    scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2 ** 70), 2 ** 70),
                        st.sampled_from([10 ** 400, -(10 ** 400), 2 ** 64, 2 ** 63, -1, 0]),
                        st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
                        st.sampled_from(["", "bytes", "gzip", "regular", "array", "group", "uint8",
                                         "sharding_indexed", "\ud800", "\x00"]))
    if not deep:
        return scalars
    return st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                          st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                        max_leaves=12)


@dataclass(frozen=True)
class JsonEdit:
    """Replace (or delete, value ``DELETE``) the value at a path of keys/indexes (taken modulo)."""

    path: tuple[int, ...]
    value: Any

    def apply(self, doc: Any) -> Any:
        if not self.path:
            return self.value
        if isinstance(doc, dict) and doc:
            keys = sorted(doc)
            key = keys[self.path[0] % len(keys)]
            out = dict(doc)
            if len(self.path) == 1 and self.value is DELETE:
                del out[key]
            else:
                out[key] = JsonEdit(self.path[1:], self.value).apply(doc[key])
            return out
        if isinstance(doc, list) and doc:
            i = self.path[0] % len(doc)
            out = list(doc)
            if len(self.path) == 1 and self.value is DELETE:
                del out[i]
            else:
                out[i] = JsonEdit(self.path[1:], self.value).apply(doc[i])
            return out
        return doc if self.value is DELETE else self.value


class _Delete:
    def __repr__(self) -> str:
        return "DELETE"


DELETE = _Delete()


def json_edits() -> st.SearchStrategy[list[JsonEdit]]:
    path = st.lists(st.integers(0, 50), min_size=1, max_size=5)
    value = st.one_of(json_values(), st.just(DELETE))
    return st.lists(st.builds(JsonEdit, path.map(tuple), value), min_size=1, max_size=3)


def deep_nesting(depth: int) -> bytes:
    """A JSON document nested ``depth`` levels (Python's parser recurses per level)."""
    return b'{"zarr_format": 3, "node_type": "group", "attributes": {"x": ' + b"[" * depth + b"]" * depth + b"}}"


# -- the property -------------------------------------------------------------------------------
class Unexpected:
    """Records exceptions that reach the FUSE operations' catch-all (logged with a traceback)."""

    def __init__(self, ops: Any) -> None:
        self.seen: list[tuple[str, BaseException]] = []
        orig = ops._log_unexpected

        def hook(op: str, exc: BaseException) -> None:
            self.seen.append((op, exc))
            orig(op, exc)

        ops._log_unexpected = hook

    def check(self, what: str = "") -> None:
        if self.seen:
            op, exc = self.seen[0]
            self.seen.clear()
            raise AssertionError(f"{what}: {op} raised {type(exc).__name__}: {exc}") from exc


def attempt(fs: Any, guard: Unexpected, fn: Callable[[], Any], what: str = "", quiet: bool = False) -> int:
    """Run ``fn``; return 0 or the errno it was refused with. Asserts that nothing unexpected was
    raised, that a refused write logged one line (``quiet``: none, for a new file closed empty,
    which SEMANTICS.md says stores nothing without a word), and that a refusal left every
    object of the store (and the domain list) unchanged."""
    before = fs.state()
    with LogRecords() as logs:
        try:
            fn()
            code = 0
        except OSError as exc:
            code = exc.errno
    guard.check(what)
    if code and code not in (errno.ENOENT, errno.EEXIST) and what.startswith("writing"):
        lines = [r.getMessage() for r in logs.records]
        assert len(lines) == (0 if quiet else 1), f"{what}: refused with {len(lines)} log lines: {lines}"
        assert not quiet or code == errno.EINVAL, f"{what}: closed empty, refused with {code}"
    note_event(f"{what.split(' ')[0]}: {errno.errorcode.get(code, code) if code else 'taken'}")
    if code:
        after = fs.state()
        changed = sorted(k for k in set(before[0]) | set(after[0]) if before[0].get(k) != after[0].get(k))
        assert not changed, f"{what}: refused with {errno.errorcode.get(code, code)} but changed {changed[:5]}"
        assert before[1] == after[1], f"{what}: refused but the domain list changed"
    return code


def note_event(text: str) -> None:
    """A hypothesis statistics event (``--hypothesis-show-statistics``); nothing outside ``@given``."""
    try:
        event(text)
    except InvalidArgument:
        pass


def polyfs_errno_only(fn: Callable[[], Any]) -> Exception | None:
    """Call a pure parser: it returns, or raises a PolyfsError (returned); anything else propagates."""
    from polyfs.errors import PolyfsError

    try:
        fn()
    except PolyfsError as exc:
        return exc
    return None


class LogRecords(logging.Handler):
    """``with LogRecords() as logs:`` collects the records of the ``polyfs`` loggers (warning and
    up) — a per-example caplog (pytest's fixture is not reset between hypothesis examples)."""

    def __init__(self, level: int = logging.WARNING) -> None:
        super().__init__(level)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def __enter__(self) -> "LogRecords":
        logging.getLogger("polyfs").addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger("polyfs").removeHandler(self)

    def tracebacks(self) -> list[logging.LogRecord]:
        return [r for r in self.records if r.exc_info]
