"""Reading files named by a caller: only regular files, never more than a size cap, and over MCP only under
the roots the operator allows.

An assistant driven by untrusted text can put any path into a tool argument, so a path from MCP is trusted no
further than the allowed roots: the client's MCP roots when it offers them, else VLLM_TUNE_FILE_ROOTS
(os.pathsep-separated), else the working directory and the results directory. The MCP wrapper
(server/registry.py) sets the roots for the duration of a call; with none set (the CLI, where the operator types
the path) any regular file may be read. Either way a read never blocks on a FIFO, never reads a device, and
stops at the cap while reading, since st_size says nothing for /dev/zero or /proc files.

A path outside the roots gets the same one line whether or not it exists, so a caller learns nothing about
the rest of the file system.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from vllm_tune.tools.errors import BadInputError

ENV_FILE_ROOTS = "VLLM_TUNE_FILE_ROOTS"
_CHUNK = 1024 * 1024


@dataclass(frozen=True)
class FileRoots:
    """Folders (resolved) a caller may read under, and where that list came from (shown in errors)."""

    roots: tuple[Path, ...]
    source: str

    def contains(self, real: Path) -> bool:
        return any(real == root or real.is_relative_to(root) for root in self.roots)


_ACTIVE: ContextVar[FileRoots | None] = ContextVar("vllm_tune_file_roots", default=None)


def _real(path: str | Path) -> Path:
    return Path(os.path.realpath(Path(path).expanduser()))


def roots_from_env() -> FileRoots:
    """VLLM_TUNE_FILE_ROOTS, else the working directory and the results directory."""
    raw = os.environ.get(ENV_FILE_ROOTS, "")
    given = [p for p in raw.split(os.pathsep) if p.strip()]
    if given:
        return FileRoots(tuple(_real(p.strip()) for p in given), ENV_FILE_ROOTS)
    from vllm_tune.tools.bench.store import results_dir

    return FileRoots((_real(Path.cwd()), _real(results_dir())),
                     "the working directory and the results directory by default; VLLM_TUNE_FILE_ROOTS changes them")


def roots_from_uris(uris: Sequence[str]) -> FileRoots | None:
    """The client's MCP roots (file:// URIs) and the operator's results directory, where our own runs are
    saved; None when the client offers no usable root."""
    paths = []
    for uri in uris:
        parsed = urlparse(str(uri))
        if parsed.scheme == "file" and parsed.path:
            paths.append(_real(unquote(parsed.path)))
    if not paths:
        return None
    from vllm_tune.tools.bench.store import results_dir

    return FileRoots((*paths, _real(results_dir())), "the client's MCP roots and the results directory")


@contextlib.contextmanager
def confined(roots: FileRoots) -> Iterator[None]:
    """Within this block (and threads started from it), every read goes through `roots`."""
    token = _ACTIVE.set(roots)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def active_roots() -> FileRoots | None:
    return _ACTIVE.get()


def _outside(path: str | Path, what: str, roots: FileRoots) -> BadInputError:
    # The same words whether the path exists or not, is a file or a folder.
    return BadInputError(f"{what} {str(path)!r} is not under the allowed file roots ({roots.source})")


def allowed(path: str | Path, what: str = "file") -> Path:
    """The resolved path when the active roots allow it (always, outside MCP); one generic line otherwise.
    Call it before probing a path (exists, is_dir), so that a probe never answers for a path outside."""
    real = _real(path)
    roots = _ACTIVE.get()
    if roots is not None and not roots.contains(real):
        raise _outside(path, what, roots)
    return real


def is_allowed(path: str | Path) -> bool:
    roots = _ACTIVE.get()
    return roots is None or roots.contains(_real(path))


def regular_file(path: str | Path, what: str = "file") -> Path:
    """Check, without opening it, that a path the caller gave is an allowed regular file: for refusing a bad
    file argument before any work (or load) starts; the read itself still checks again."""
    real = allowed(path, what)
    try:
        mode = os.stat(real).st_mode
    except OSError as exc:
        raise BadInputError(f"cannot read {what} {str(path)!r}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(mode):
        raise BadInputError(f"{what} {str(path)!r} is not a regular file")
    return real


def _megabytes(n: int) -> str:
    return f"{n / (1024 * 1024):g} MiB"


def read_bytes(path: str | Path, *, limit: int, what: str = "file") -> bytes:
    """The bytes of a regular file, at most `limit` of them (more is an error), one clear line on failure."""
    real = allowed(path, what)
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below as not a regular file.
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise BadInputError(f"cannot read {what} {str(path)!r}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb", buffering=0) as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise BadInputError(f"{what} {str(path)!r} is not a regular file")
        roots = _ACTIVE.get()
        opened = Path(f"/proc/self/fd/{fd}")
        if roots is not None and opened.exists():
            # A component swapped for a symlink between the check and the open would show here.
            with contextlib.suppress(OSError):
                if not roots.contains(Path(os.readlink(opened))):
                    raise _outside(path, what, roots)
        chunks: list[bytes] = []
        size = 0
        while True:
            try:
                chunk = fh.read(min(_CHUNK, limit + 1 - size))
            except OSError as exc:
                raise BadInputError(f"cannot read {what} {str(path)!r}: {exc.strerror or exc}") from None
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise BadInputError(f"{what} {str(path)!r} is larger than {_megabytes(limit)}, too large for one")
    return b"".join(chunks)


def read_text(path: str | Path, *, limit: int, what: str = "file", errors: str = "strict") -> str:
    """read_bytes decoded as UTF-8; a file that is not UTF-8 is one clear line (errors='replace' to accept it)."""
    data = read_bytes(path, limit=limit, what=what)
    try:
        return data.decode("utf-8", errors=errors)
    except UnicodeDecodeError:
        raise BadInputError(f"{what} {str(path)!r} is not UTF-8 text") from None
