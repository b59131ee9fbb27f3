"""Web workers die with the ``txmsg serve`` process that started them.

Granian's workers are processes of their own: after a kill -9 of serve's main process
they went on answering on its port, and a new serve bound beside them. ``txmsg serve``
names itself in ``PARENT_PID_ENV`` (inherited by the workers), and each worker asks the
kernel for SIGKILL when its parent dies (Linux ``prctl(PR_SET_PDEATHSIG)``).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PARENT_PID_ENV = "TXMSG_SERVE_PID"
_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """In a worker of ``txmsg serve`` on Linux: be killed when serve's process dies."""
    parent = os.environ.get(PARENT_PID_ENV)
    if parent is None or not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != int(parent):  # it died before the prctl: nobody will signal us
        os.kill(os.getpid(), signal.SIGKILL)
