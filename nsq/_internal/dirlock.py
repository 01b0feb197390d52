"""An exclusive lock on a data directory, as Go nsqd's ``internal/dirlock``
(``flock(LOCK_EX|LOCK_NB)`` on the directory itself), so two daemons never
share one ``--data-path``."""

from __future__ import annotations

import os

__all__ = ["DirLock"]


class DirLock:
    """``lock()`` the directory at ``path`` (created if missing), ``unlock()`` it.

    Args:
        path: the directory.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = None

    def lock(self) -> None:
        """Take the lock.

        Raises:
            OSError: another process holds it (the text says the directory
                is in use), or the directory cannot be made or opened.
        """
        import fcntl

        os.makedirs(self.path, exist_ok=True)
        fd = os.open(self.path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise OSError(f"--data-path={self.path} in use (possibly by another instance of nsqd)") from None
        self._fd = fd

    def unlock(self) -> None:
        """Release the lock (no-op if not held)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
