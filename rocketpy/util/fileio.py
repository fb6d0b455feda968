"""Crash-safe file writes: a reader sees the old content or the new, never a mix."""

from __future__ import annotations

import os
import tempfile


def write_atomically(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace the file at ``path`` with ``data`` atomically and durably.

    Writes a temporary file in the same directory, fsyncs it, renames it over
    ``path`` and fsyncs the directory, so a crash leaves either the old or the
    new file. Missing parent directories are created. Blocking: call it from a
    thread pool when it sits on a hot path.

    :param path: the file to replace.
    :param data: its new content.
    :raises OSError: when the write fails; ``path`` is then left untouched.
    """
    target = os.fspath(path)
    directory = os.path.dirname(target) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(target) + ".", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as tmp_file:
            tmp_file.write(data)
            tmp_file.flush()
            os.fsync(tmp_file.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    _fsync_directory(directory)


def read_if_exists(path: str | os.PathLike[str]) -> bytes | None:
    """The content of the file at ``path``, or None when there is no such file."""
    try:
        with open(path, "rb") as source:
            return source.read()
    except FileNotFoundError:
        return None


def _fsync_directory(directory: str) -> None:
    # Makes the rename durable; some platforms cannot open a directory.
    try:
        dir_fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)
