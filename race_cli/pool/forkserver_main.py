"""The fork server's own process (`python -m race_cli.pool.forkserver_main`): see forkserver.py.

The pool never imports this module (it runs it), so the server may import the CLI that imports
the pool: a forked job runs `race_cli.cli.main()` with `race train --job-dir DIR`, the same code
a fresh `python -m race_cli train --job-dir DIR` runs.
"""

from __future__ import annotations

import json
import os
import select
import sys
from typing import Any

from race_cli.pool.local import _preexec

# what a job imports before its first iteration (python -X importtime on race train); a module
# that is not installed is skipped (the job then imports what it needs, or says what is missing)
PRELOAD = ("torch", "transformers", "transformers.models.qwen2.modeling_qwen2", "peft",
           "race_cli.engine.job", "race_cli.engine.setup", "race_cli.cli")


def _send(fd: int, msg: dict[str, Any]) -> None:
    os.write(fd, (json.dumps(msg) + "\n").encode())


def serve() -> None:
    """The server's main loop: preload, say ready, fork a job per request, report exits."""
    import gc
    import importlib

    proto_out = os.dup(1)  # the pipe to the pool; fd 1 becomes stderr, so a stray print cannot corrupt it
    os.dup2(2, 1)
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    gc.collect()
    gc.freeze()  # the preloaded heap stays out of the children's collections (no copy-on-write of it)
    _send(proto_out, {"ready": True})
    children: set[int] = set()
    buf = b""
    while True:
        readable, _, _ = select.select([0], [], [], 0.05)
        if readable:
            chunk = os.read(0, 1 << 16)
            if not chunk:  # the pool closed the pipe: the run is over
                return
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                pid = _fork_job(json.loads(line), keep_closed=(0, proto_out))
                children.add(pid)
                _send(proto_out, {"started": pid})
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            children.discard(pid)
            _send(proto_out, {"exited": pid, "rc": os.waitstatus_to_exitcode(status)})


def _fork_job(req: dict[str, Any], keep_closed: tuple[int, ...]) -> int:
    """Fork one job; in the child, become `race train --job-dir DIR` and never return."""
    server = os.getpid()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        os.setsid()
        _preexec(server, ())()  # the pool's own child set-up: die with the server (PR_SET_PDEATHSIG)
        for fd in keep_closed:
            os.close(fd)
        log = os.open(req["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.environ.clear()
        os.environ.update(req["env"])
        os.chdir(req["cwd"])
        code = _run_train(req["job_dir"])
    except BaseException:  # noqa: BLE001 - the child must end in os._exit, whatever happened
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code)


def _run_train(job_dir: str) -> int:
    """`race train --job-dir DIR` in this process; its exit code (exit handlers run, as at a normal exit)."""
    import atexit

    from race_cli.cli import main

    sys.argv = ["race", "train", "--job-dir", job_dir]
    code = 0
    try:
        main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if not isinstance(exc.code, (int, type(None))):
            print(exc.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - as the interpreter would: traceback, exit 1
        import traceback

        traceback.print_exc()
        code = 1
    try:
        atexit._run_exitfuncs()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    return code


if __name__ == "__main__":
    serve()
