"""Training processes die with their parent: no worker outlives the launcher that waits for it.

torchrun starts every worker in a session of its own (``start_new_session=True``, so it can ``killpg`` a
worker's children), which puts the workers outside the launcher's process group: a SIGKILL of ``mlops
train run``'s group (a CI timeout, an operator's ``kill -9 -PGID``) killed the launcher and the torchrun
agent but left the workers training, writing checkpoints nobody waits for and racing the rerun. A SIGKILL
cannot be forwarded, so the kernel has to do it: each process asks for ``PR_SET_PDEATHSIG = SIGKILL``,
delivered when its parent dies.

The chain is launcher → agent (``python -c "...lifeline import main; main(...)" <torchrun args>``, torchrun
itself after the ``prctl``) → workers (``mlops_training.worker`` calls :func:`die_with_agent` first).
Each checks that its parent is still the one that started it, since a parent dying before the ``prctl``
would otherwise go unnoticed. Linux only; elsewhere this is a no-op.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1
LAUNCHER_PID_ENV = "MLOPS_LAUNCHER_PID"
AGENT_PID_ENV = "MLOPS_AGENT_PID"


def die_with_parent(expected_parent: int | None) -> None:
    """Have the kernel SIGKILL this process when its parent exits; exit now if it already has.

    Args:
        expected_parent: the pid that started us (``None``: unknown, skip the check).
    """
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
        err = ctypes.get_errno()
        log.warning("prctl(PR_SET_PDEATHSIG) failed (%s): this process may outlive its parent", os.strerror(err))
        return
    if expected_parent is not None and os.getppid() != expected_parent:
        # Reparented between fork and prctl: the parent is gone and no signal will come.
        os.kill(os.getpid(), signal.SIGKILL)


def _pid_from_env(var: str) -> int | None:
    value = os.environ.get(var, "")
    return int(value) if value.isdigit() else None


def die_with_agent() -> None:
    """For a worker: die with the torchrun agent that started it (only when started by torchrun)."""
    if "TORCHELASTIC_RUN_ID" in os.environ or AGENT_PID_ENV in os.environ:
        die_with_parent(_pid_from_env(AGENT_PID_ENV))


# The agent's -c program: this file run as a module of its own (see agent_command).
_AGENT_CODE = ("import sys, importlib.util as u; s = u.spec_from_file_location('mlops_training_lifeline', {path!r}); "
               "m = u.module_from_spec(s); s.loader.exec_module(m); m.main(sys.argv[1:])")


def agent_command(torchrun_cmd: list[str]) -> list[str]:
    """``torchrun_cmd`` (``python -m torch.distributed.run ...``) run through this module's agent entrypoint."""
    if torchrun_cmd[1:3] != ["-m", "torch.distributed.run"]:
        raise ValueError(f"expected 'python -m torch.distributed.run ...', got {torchrun_cmd[:3]!r}")
    # -c, not -m: the package's __init__ imports this module, and running it again as __main__ makes runpy warn
    # (RuntimeWarning: 'mlops_training.lifeline' found in sys.modules) in every training's output. This file
    # alone, not through the package: its __init__ (pandas, the model package: ~0.8 s of CPU) bought the agent
    # nothing and delayed every worker's start, since torchrun starts them only once the agent has imported.
    return [torchrun_cmd[0], "-c", _AGENT_CODE.format(path=__file__), *torchrun_cmd[3:]]



def exit_without_teardown(code: int) -> None:
    """End a training process (worker or agent) with ``code`` once its work is done, skipping the interpreter's
    teardown.

    Python's exit runs the atexit handlers and then tears down every module and object it holds; in a worker
    that imported torch, Feast and MLflow that teardown alone took about 2 s of CPU per rank (measured: the
    process ran on for 14-20 s of wall time after its last atexit handler on a loaded 2-core machine), and
    nothing in it matters to anyone: the result is in ``result.json``, the process group is destroyed. What an
    ordinary exit does that does matter is kept: non-daemon threads are joined, atexit handlers run (logging
    flushes its handlers there), and stdout/stderr are flushed before ``os._exit``.
    """
    import atexit
    import contextlib
    import threading

    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed or broken pipe: nothing left to flush to
            stream.flush()
    os._exit(code)


def main(argv: list[str] | None = None) -> None:
    """torchrun, bound to the launcher's life; its workers learn its pid to bind themselves to it.

    A failed run leaves by torchrun's own exception (its error record, the ordinary exit); a finished one by
    :func:`exit_without_teardown`.
    """
    die_with_parent(_pid_from_env(LAUNCHER_PID_ENV))
    os.environ[AGENT_PID_ENV] = str(os.getpid())
    from torch.distributed.run import main as torchrun

    torchrun(sys.argv[1:] if argv is None else argv)
    exit_without_teardown(0)


if __name__ == "__main__":
    main()
