"""Files in and out: only regular files are read, and every output is written atomically.

Inputs come from other machines; a FIFO, socket or device planted as ``dump.json`` or a log
would hang the read (a FIFO without a writer) or fill memory (``/dev/zero``).  Outputs go to
paths a CI job chose, where a symlink planted beforehand would redirect a plain ``open("w")``
onto another file; a temporary file renamed over the target replaces the link instead.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from pytest_accuracy.errors import AccuracyInputError

__all__ = [
    "AccuracyOutputError",
    "append_regular",
    "atomic_open",
    "check_output",
    "check_regular",
    "ensure_dir",
    "folder_lock",
    "read_input_bytes",
    "read_input_text",
    "write_atomic",
]

_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
_UMASK_LOCK = threading.Lock()


class AccuracyOutputError(AccuracyInputError):
    """An output cannot be written where it was asked (its folder is a file, say).

    A subclass of AccuracyInputError so that every handler that turns input errors into a
    named, traceback-free message treats it the same way.
    """


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "a special file"


def _refuse(path: str | Path, mode: int) -> AccuracyInputError:
    return AccuracyInputError(path, f"not a regular file ({_kind(mode)}); refused without reading")


def check_regular(path: str | Path) -> os.stat_result:
    """``os.stat(path)`` (symlinks followed) or AccuracyInputError when it is no regular file.

    For files a library opens by name (pandas, numpy, tensorboard): the check comes before
    their open, so a FIFO never blocks it.  OSError (not found, ...) propagates.
    """
    info = os.stat(path)
    if not stat.S_ISREG(info.st_mode):
        raise _refuse(path, info.st_mode)
    return info


@contextlib.contextmanager
def open_regular(path: str | Path) -> Iterator[tuple[IO[bytes], os.stat_result]]:
    """A binary file object and its ``fstat``, refused unless a regular file.

    Checked by name first (a socket cannot even be opened), then opened non-blocking (a FIFO
    swapped in after the check opens at once instead of waiting for a writer) and checked
    again on the descriptor, so what is read is what was checked.
    """
    check_regular(path)
    fd = os.open(path, _READ_FLAGS)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _refuse(path, info.st_mode)
        os.set_blocking(fd, True)
        handle = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with handle:
        yield handle, info


def read_input_bytes(path: str | Path, max_bytes: int | None = None,
                     what: str = "file size") -> bytes:
    """The bytes of the regular file ``path``; past ``max_bytes`` an AccuracyInputError.

    OSError (not found, permission) propagates so callers keep their own wording.
    """
    with open_regular(path) as (handle, info):
        if max_bytes is not None and info.st_size > max_bytes:
            raise AccuracyInputError(path, f"{what}: {info.st_size} bytes, over {max_bytes}")
        # read(n) allocates n bytes up front: ask for what the file holds (and one more)
        data = handle.read() if max_bytes is None else handle.read(
            min(info.st_size, max_bytes) + 1)
    if max_bytes is not None and len(data) > max_bytes:  # grew while being read
        raise AccuracyInputError(path, f"{what}: over {max_bytes} bytes")
    return data


def read_input_text(path: str | Path, max_bytes: int | None = None,
                    what: str = "file size") -> str:
    """``read_input_bytes`` decoded as UTF-8 (UnicodeDecodeError propagates, as read_text's)."""
    return read_input_bytes(path, max_bytes, what).decode("utf-8")


# --------------------------------------------------------------------------------- outputs


def ensure_dir(path: str | Path) -> Path:
    """``mkdir -p path``, or AccuracyOutputError naming it (a file in the way, no permission)."""
    folder = Path(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise AccuracyOutputError(folder, "cannot write here: it (or a parent) is not a "
                                  "directory") from None
    except OSError as exc:
        raise AccuracyOutputError(folder, f"cannot create the folder: "
                                  f"{exc.strerror or exc}") from None
    if not folder.is_dir():
        raise AccuracyOutputError(folder, "cannot write here: not a directory")
    return folder


def check_output(path: str | Path, *, folder: bool = False) -> None:
    """AccuracyOutputError now when ``path`` cannot be written later: a parent that exists
    is no directory, or (for a file) a directory is in its place."""
    target = Path(path)
    for parent in ([target] if folder else []) + list(target.parents):
        if parent.exists() or parent.is_symlink():
            if not parent.is_dir():
                raise AccuracyOutputError(parent, "cannot write there: not a directory")
            break
    if not folder and target.is_dir():
        raise AccuracyOutputError(target, "cannot write the file: a directory is there")


def _file_mode() -> int:
    with _UMASK_LOCK:  # os.umask can only be read by setting it
        mask = os.umask(0o022)
        os.umask(mask)
    return 0o666 & ~mask


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "w", *, encoding: str | None = "utf-8",
                newline: str | None = None) -> Iterator[IO[Any]]:
    """Write ``path`` through a temporary file in its folder, renamed over it when done.

    A symlink (or anything else) planted at ``path`` is replaced, never written through;
    a failed write leaves the old file and no temporary behind.  The folder is created.
    """
    target = Path(path)
    ensure_dir(target.parent)
    if target.is_dir() and not target.is_symlink():
        raise AccuracyOutputError(target, "cannot write the file: a directory is there")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name[:40]}.", suffix=".tmp",
                                   dir=target.parent)
    except OSError as exc:
        raise AccuracyOutputError(target, f"cannot write: {exc.strerror or exc}") from None
    try:
        with _terminate_as_exit():
            binary = "b" in mode
            with os.fdopen(fd, mode, encoding=None if binary else encoding,
                           newline=None if binary else newline) as handle:
                os.fchmod(handle.fileno(), _file_mode())  # mkstemp's 0600 is for the temporary
                yield handle
            os.replace(tmp, target)
    except OSError as exc:  # a full disk, a file size limit, an I/O error: the old file stays
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise AccuracyOutputError(target, f"cannot write: {exc.strerror or exc}") from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def _terminate_as_exit() -> Iterator[None]:
    """SIGTERM (a CI job cancelled) as SystemExit while a temporary file is open, so that it
    is removed; left alone off the main thread or where the program handles SIGTERM itself."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL):
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def append_regular(path: str | Path, text: str) -> None:
    """Append ``text`` to ``path`` (created if missing), a regular file only: a FIFO, a device
    or a folder there is a named error, never a hang (opened without blocking)."""
    with contextlib.suppress(FileNotFoundError):
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise AccuracyOutputError(path, f"cannot append: not a regular file "
                                      f"({_kind(info.st_mode)})")
    flags = (os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NONBLOCK", 0)
             | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as exc:
        raise AccuracyOutputError(path, f"cannot append: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):  # swapped in since the check above
            raise AccuracyOutputError(path, f"cannot append: not a regular file "
                                      f"({_kind(info.st_mode)})")
        view = memoryview(text.encode("utf-8", "backslashreplace"))
        while view:
            view = view[os.write(fd, view):]
    except OSError as exc:
        raise AccuracyOutputError(path, f"cannot append: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


@contextlib.contextmanager
def folder_lock(folder: str | Path | None) -> Iterator[None]:
    """Hold ``folder``'s lock file while writing into it: two runs given one report folder
    write one after the other, so it ends holding one run's files, never a mix."""
    if not folder:
        yield
        return
    where = ensure_dir(folder) / ".pytest-accuracy.lock"
    try:
        fd = os.open(where, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_CLOEXEC", 0), 0o666)
    except OSError as exc:
        raise AccuracyOutputError(where, f"cannot lock the folder: {exc.strerror or exc}"
                                  ) from None
    try:
        try:
            import fcntl
        except ImportError:  # no POSIX locks (Windows): written unlocked
            yield
            return
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def write_atomic(path: str | Path, data: str | bytes, *, encoding: str = "utf-8") -> Path:
    """Write ``data`` (text or bytes) to ``path`` atomically (see ``atomic_open``)."""
    target = Path(path)
    with atomic_open(target, "wb" if isinstance(data, bytes) else "w",
                     encoding=encoding) as handle:
        handle.write(data)
    return target
