"""One browser session's process, on textual-serve's ``AppService``.

textual-serve (https://github.com/Textualize/textual-serve,
``src/textual_serve/app_service.py``) runs a shell command string with the
server's environment. Each session here runs an argv (no shell) with its
own environment (:class:`~nsq.tui.serve.sessions.Session`), which needs
these private members of ``AppService`` (checked against textual-serve
1.1.x; pin it in the packaging):

- ``_build_environment(width, height)``: extended with the session's variables;
- ``_open_app_process(width, height)``: replaced, to spawn the argv with
  :func:`asyncio.create_subprocess_exec`;
- ``_process`` and ``_stdin``: set as the original sets them (the rest of
  ``AppService`` reads them).

:mod:`nsq.tui.serve.server` also uses ``Server._process_messages`` (the
browser-message loop) and ``AppService._process`` (to kill a stuck process).
"""

from __future__ import annotations

import asyncio
import shlex
from typing import Any

from nsq.tui.serve.sessions import Session

__all__ = ["session_service_class"]


def session_service_class() -> type:
    """The ``AppService`` subclass for a :class:`Session` (textual-serve is
    imported here, when a server is made)."""
    from textual_serve.app_service import AppService

    class SessionService(AppService):
        """textual-serve's AppService, spawning an argv (no shell) with a
        per-session environment."""

        def __init__(self, session: Session, **kwargs: Any) -> None:
            super().__init__(shlex.join(session.argv), **kwargs)
            self.session = session

        def _build_environment(self, width: int = 80, height: int = 24) -> dict[str, str]:
            env = super()._build_environment(width=width, height=height)
            for key, value in self.session.env.items():
                if value is None:
                    env.pop(key, None)
                else:
                    env[key] = value
            return env

        async def _open_app_process(self, width: int = 80, height: int = 24) -> Any:
            self._process = process = await asyncio.create_subprocess_exec(
                *self.session.argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env=self._build_environment(width=width, height=height))
            self._stdin = process.stdin
            return process

    return SessionService
