"""The open-file limit of a daemon process.

Every client connection, and every disk queue being written or read, holds
a file descriptor. Go's runtime (since Go 1.19, ``syscall`` package init on
Unix) raises the soft ``RLIMIT_NOFILE`` to the hard limit at start, so Go
nsqd takes as many connections as the system allows; the daemon commands
do the same through :func:`raise_nofile_limit`. An application embedding
the daemons keeps its own limit.
"""

from __future__ import annotations

__all__ = ["raise_nofile_limit"]


def raise_nofile_limit() -> tuple[int, int]:
    """Raise the soft open-file limit to the hard one (no-op where there is
    no ``resource`` module, e.g. Windows).

    Returns:
        ``(soft, hard)`` after the change (``(-1, -1)`` when unknown).
    """
    try:
        import resource
    except ImportError:
        return -1, -1
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            pass
    return resource.getrlimit(resource.RLIMIT_NOFILE)
