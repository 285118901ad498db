"""The local pool: every job of a sweep as its own process, on GPUs or CPU workers, longest first.

Slots are GPU groups (`--gpus-per-job` GPUs each, the child sees only its own through
CUDA_VISIBLE_DEVICES) or, without GPUs, CPU workers (the cores divided among them: the child
gets OMP_NUM_THREADS / MKL_NUM_THREADS / RACE_THREADS). Jobs go out longest planned first
(LPT list scheduling: makespan <= 4/3 of the optimum, and in practice close to the lower bound
max(longest job, total work / slots)); a slot that frees takes the next job at once.

Each child: stdout+stderr appended to its log.txt, its own session (Ctrl-C on the terminal
reaches only `race run`, which then stops the children itself), and a parent-death signal so
that a `race run` killed with SIGKILL takes its children with it (nothing keeps writing into a
folder the rerun resumes). Status records: race_cli.status.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from race_cli import folder, machine
from race_cli.cost.flops import too_big_for_cpu
from race_cli.errors import RaceError
from race_cli import status as st

JobCommand = Callable[[Path], list[str]]


# --- the job command ---------------------------------------------------------------------------

def package_root() -> str:
    """The folder holding race_cli/, put on the child's PYTHONPATH so `-m race_cli` always imports."""
    return str(Path(__file__).resolve().parent.parent.parent)


def default_job_command(job_dir: Path) -> list[str]:
    """`python -m race_cli train --job-dir DIR` (tests pass their own command to run_main instead)."""
    return [sys.executable, "-m", "race_cli", "train", "--job-dir", str(job_dir)]


def child_env(extra: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    env.update(extra)
    root = package_root()
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in paths:
        env["PYTHONPATH"] = os.pathsep.join([root] + paths)
    env["PYTHONUNBUFFERED"] = "1"  # the log shows progress as it happens
    env["RACE_POOL_ATTEMPT"] = "1"  # the pool counts attempts in status.json; the job must not count again
    return env


# --- slots: GPU groups or CPU workers --------------------------------------------------------

@dataclass(frozen=True)
class Slot:
    name: str  # what status.json records as device: "cuda:0,1" or "cpu"
    env: dict[str, str] = field(default_factory=dict)  # set in the child


def refuse_cpu_for_big_models(configs: Sequence[dict], *, gpus: Sequence[str], allow_cpu: bool) -> None:
    """RaceError (exit 2) when no GPU is visible and a job loads a hub-sized model, unless allow_cpu."""
    if gpus or allow_cpu:
        return
    big = too_big_for_cpu(configs)
    if big:
        raise RaceError(f"No GPU is visible here, and this sweep loads hub-sized models ({', '.join(big)}): "
                        "CPU workers would take days per job. Run it on a GPU machine (or --launcher slurm), "
                        "or pass --allow-cpu to run it on CPU anyway.")


# A job given GPUs (a GPU slot here, a SLURM task with GPUs) has their ids here too: device=auto then runs on
# them or fails naming torch and the driver (engine/setup.resolve_device), never falls back to the CPU.
GPU_SLOT_ENV = "RACE_GPU_SLOT"
VLLM_PORT_STRIDE = 100  # ports between two slots' VLLM_PORT: vLLM scans upward from it for each port it opens


def gpu_slots(gpus: Sequence[str], gpus_per_job: int, vllm_port: str | None = None) -> list[Slot]:
    """Consecutive groups of `gpus_per_job` GPUs; GPUs left over (fewer than a group) stay unused.

    `vllm_port` (the environment's VLLM_PORT): each slot gets its own, VLLM_PORT_STRIDE apart.
    vLLM starts every port search at VLLM_PORT and only test-binds a port before its TCPStore
    binds it for real (vllm/utils get_open_port; 0.10's single-GPU executor rendezvouses over
    tcp://ip:that port), so engines starting at once on one box would otherwise all pick the
    same port. Unset, vLLM lets the kernel choose (bind to port 0) and nothing is needed.
    """
    groups = [list(gpus[i:i + gpus_per_job]) for i in range(0, len(gpus) - gpus_per_job + 1, gpus_per_job)]
    base = int(vllm_port) if vllm_port and vllm_port.strip().isdigit() else None
    return [Slot(name="cuda:" + ",".join(g), env={"CUDA_VISIBLE_DEVICES": ",".join(g), GPU_SLOT_ENV: ",".join(g)}
                 | ({"VLLM_PORT": str(base + k * VLLM_PORT_STRIDE)} if base is not None else {}))
            for k, g in enumerate(groups)]


def cpu_slots(workers: int, cores: int) -> list[Slot]:
    """`workers` CPU slots sharing `cores`: each child gets cores // workers torch threads (>= 1).

    OpenMP's wait policy is left alone: its waiting threads spin, which is fastest while the pool has the
    cores to itself and slow when another multi-threaded run shares them (docs/measurements/code.md)."""
    threads = str(max(1, cores // max(1, workers)))
    env = {"CUDA_VISIBLE_DEVICES": "", GPU_SLOT_ENV: "", "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads,
           "RACE_THREADS": threads}
    return [Slot(name="cpu", env=env) for _ in range(workers)]


def default_workers(cores: int, n_jobs: int) -> int:
    """One single-thread worker per core (tiny models keep one thread busier than two share:
    docs/measurements/code.md), no more than jobs."""
    return max(1, min(cores, n_jobs))


def make_slots(*, gpus: Sequence[str], gpus_per_job: int, workers: int | None, n_jobs: int,
               cores: int | None = None) -> list[Slot]:
    cores = cores or machine.cpu_cores()
    if gpus:
        if gpus_per_job > 1 and any(g.startswith("MIG-") for g in gpus):
            raise RaceError(f"--gpus-per-job {gpus_per_job}: the visible GPUs are MIG devices, and a process can use "
                            "only one MIG device. Use --gpus-per-job 1, or whole GPUs (MIG off).")
        if gpus_per_job > len(gpus):
            raise RaceError(f"--gpus-per-job {gpus_per_job} is more than the {len(gpus)} GPUs visible here "
                            f"({','.join(gpus)}). Lower --gpus-per-job, or set CUDA_VISIBLE_DEVICES.")
        return gpu_slots(gpus, gpus_per_job, os.environ.get("VLLM_PORT"))
    return cpu_slots(workers or default_workers(cores, n_jobs), cores)


# --- order: longest planned job first ----------------------------------------------------------

def planned_cost(row: dict[str, Any]) -> float:
    """A job's planned size: its planned seconds when the plan has them, else its planned FLOPs."""
    for key in ("planned_seconds", "planned_flops_total"):
        v = row.get(key)
        if isinstance(v, (int, float)):
            return float(v)
    return 0.0


def longest_first(job_ids: Sequence[str], plan_rows: dict[str, dict]) -> list[str]:
    """LPT order. Budget-matched jobs tie on FLOPs; among them more iterations run first (each
    iteration has a fixed cost, which dominates small models); other ties keep the plan's order."""
    def iterations(row: dict[str, Any]) -> float:
        v = row.get("iterations")
        return float(v) if isinstance(v, (int, float)) else 0.0

    return sorted(job_ids, key=lambda j: (-planned_cost(plan_rows.get(j, {})), -iterations(plan_rows.get(j, {}))))


# --- one child process -------------------------------------------------------------------------

_libc = None


def _load_libc():
    """libc for prctl, loaded in the parent (nothing may be imported between fork and exec)."""
    global _libc
    if _libc is None and sys.platform.startswith("linux"):
        import ctypes

        try:
            _libc = ctypes.CDLL(None, use_errno=True)
        except OSError:
            _libc = False
    return _libc or None


def _preexec(parent_pid: int, ignore: tuple[int, ...]) -> Callable[[], None]:
    libc = _load_libc()

    def fn() -> None:
        for sig in ignore:  # an ignored signal stays ignored across exec
            signal.signal(sig, signal.SIG_IGN)
        if libc is not None:
            libc.prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG: die with the parent
            if os.getppid() != parent_pid:  # the parent died before prctl took effect
                os._exit(1)

    return fn


def spawn(job_dir: Path, argv: list[str], env: dict[str, str], *, header: str,
          ignore_signals: tuple[int, ...] = (), server: Any = None) -> Any:
    """Start one job: its own session, stdout+stderr appended to log.txt, dies with its parent.

    With `server` (a forkserver.ForkServer; only for the default job command) the job is forked
    from it instead of exec'd: the same job, without a fresh interpreter's imports.
    """
    from race_cli.io import open_append

    log_path = folder.log_file(job_dir)
    with open_append(log_path) as log:  # never through a link planted as log.txt
        log.write(header.encode())
        log.flush()
        if server is not None:
            return server.spawn(job_dir, log_path, env)
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True, cwd=os.getcwd(),
                                preexec_fn=_preexec(os.getpid(), ignore_signals))


def attempt_header(status: dict[str, Any], argv: list[str]) -> str:
    return (f"\n===== race run: attempt {status['attempts']} on {status['host']} ({status['device']}) "
            f"at {status['started']}: {' '.join(shlex.quote(a) for a in argv)}\n")


def terminate(procs: Sequence[subprocess.Popen], grace_s: float,
              hurry: Callable[[], bool] = lambda: False) -> None:
    """SIGTERM each child's process group, wait up to `grace_s` (less once `hurry()`), then SIGKILL."""
    _signal_alive(procs, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and not hurry() and any(p.poll() is None for p in procs):
        time.sleep(0.05)
    for p in _signal_alive(procs, signal.SIGKILL):
        p.wait()


def _signal_alive(procs: Sequence[subprocess.Popen], sig: int) -> list[subprocess.Popen]:
    """Send `sig` to the process group of every child still running; return those children."""
    alive = [p for p in procs if p.poll() is None]
    for p in alive:
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            pass
    return alive


# --- the pool ---------------------------------------------------------------------------------

@dataclass
class Running:
    job_id: str
    proc: subprocess.Popen
    slot: Slot
    started: float  # time.monotonic()


class LocalPool:
    """Run `job_ids` of `sweep_dir` on `slots`; `run()` returns job_id -> final state.

    SIGINT / SIGTERM (first one): stop every child (SIGTERM, then SIGKILL after `grace_s`), mark
    them interrupted, and return; `self.stopped_by` holds the signal. A second one kills at once.
    """

    def __init__(self, sweep_dir: Path, job_ids: Sequence[str], slots: Sequence[Slot], *,
                 plan_rows: dict[str, dict] | None = None, job_command: JobCommand = default_job_command,
                 display=None, grace_s: float = 10.0, poll_s: float = 0.05):
        if not slots:
            raise RaceError("No slot to run jobs on (no GPU group and no CPU worker). Check --workers / --gpus-per-job.")
        self.sweep_dir = Path(sweep_dir)
        self.plan_rows = plan_rows or {}
        self.queue = longest_first(job_ids, self.plan_rows)
        self.slots = list(slots)
        self.job_command = job_command
        self.display = display
        self.grace_s = grace_s
        self.poll_s = poll_s
        self.running: list[Running] = []
        self.results: dict[str, str] = {}
        self.stopped_by: int | None = None
        self._signals = 0
        self._server: Any = None  # forkserver.ForkServer, started with the first CPU job
        self._use_server = True  # False once the server failed: later jobs start as fresh interpreters

    # signals: only flags here; the loop does the work
    def _on_signal(self, signum: int, frame: object) -> None:
        self._signals += 1  # a second signal cuts the grace period short (see terminate)
        self.stopped_by = self.stopped_by or signum

    def _event(self, kind: str, job_id: str, info: dict[str, Any]) -> None:
        if self.display is not None:
            self.display.event(kind, job_id, info)

    def _server_for(self, slot: Slot) -> Any:
        """The fork server for this slot's jobs, or None: only CPU slots running the real engine, and
        only while the server works (one that failed to start, to fork or died is not asked again)."""
        from race_cli.pool import forkserver

        if (not self._use_server or slot.name != "cpu" or self.job_command is not default_job_command
                or not forkserver.enabled()):
            return None
        if self._server is None:
            self._server = forkserver.ForkServer(child_env(slot.env), preexec_fn=_preexec(os.getpid(), ()))
        return self._server if self._server.alive() else None

    def _launch(self, job_id: str, slot: Slot) -> None:
        job_dir = folder.job_dir(self.sweep_dir, job_id)
        argv = self.job_command(job_dir)
        status = st.begin_attempt(job_dir, device=slot.name)
        header = attempt_header(status, argv)
        try:
            server = self._server_for(slot)
            try:
                proc = spawn(job_dir, argv, child_env(slot.env), header=header, server=server)
            except OSError as exc:
                if server is None:
                    raise
                self._use_server = False  # this job and every later one start as a fresh interpreter
                proc = spawn(job_dir, argv, child_env(slot.env), header=f"(fork server: {exc}; a fresh interpreter)\n")
        except OSError as exc:  # command not found, not executable
            status = st.update_status(job_dir, state="failed", exit_code=127, finished=st.now_iso(),
                                      error=f"could not start {argv[0]}: {exc}", stop_reason="error")
            self.results[job_id] = "failed"
            self._event("failed", job_id, status)
            self.slots.append(slot)
            return
        st.update_status(job_dir, pid=proc.pid)  # the child needs > 0.1 s of imports before its own write
        self.running.append(Running(job_id, proc, slot, time.monotonic()))
        self._event("started", job_id, status)

    def _finish(self, r: Running, stopped: bool) -> None:
        job_dir = folder.job_dir(self.sweep_dir, r.job_id)
        status = st.end_attempt(job_dir, r.proc.returncode, stopped=stopped)
        self.results[r.job_id] = status["state"]
        status["seconds"] = time.monotonic() - r.started
        self._event(status["state"], r.job_id, status)

    def run(self) -> dict[str, str]:
        import threading

        handlers = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                handlers[sig] = signal.signal(sig, self._on_signal)
        try:
            self._loop()
        finally:
            if self._server is not None:  # no job of it is running now
                self._server.close()
            for sig, h in handlers.items():
                signal.signal(sig, h)
        return self.results

    def _loop(self) -> None:
        free = list(self.slots)
        self.slots = free  # _launch gives a slot back when the start failed
        while (self.queue or self.running) and self.stopped_by is None:
            while free and self.queue and self.stopped_by is None:
                self._launch(self.queue.pop(0), free.pop(0))
            reaped = False
            for r in list(self.running):
                if r.proc.poll() is not None:
                    self.running.remove(r)
                    self._finish(r, stopped=False)
                    free.append(r.slot)
                    reaped = True
            if self.display is not None:
                self.display.tick(self.running)
            if not reaped:
                time.sleep(self.poll_s)
        if self.stopped_by is not None and self.running:
            if self.display is not None:
                self.display.note(f"stopping {len(self.running)} running job(s) "
                                  f"({signal.Signals(self.stopped_by).name}); the rerun resumes them")
            terminate([r.proc for r in self.running], self.grace_s, hurry=lambda: self._signals > 1)
            for r in self.running:
                self._finish(r, stopped=True)
            self.running = []
