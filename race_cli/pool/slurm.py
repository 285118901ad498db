"""`race run --launcher slurm`: the grid as one SLURM job array through submitit, requeued on preemption.

Each array task runs one job by its id (`SlurmTask(job_id)`): the same child process, log.txt and
status.json records as the local pool. On preemption or time-out SLURM (through submitit) sends
USR2; `SlurmTask.checkpoint` stops the child (SIGTERM, then SIGKILL), marks the job interrupted and
returns a DelayedSubmission, so submitit requeues the task and the job resumes from its checkpoint/.
The child ignores USR2 itself (an ignored signal stays ignored across exec), so only the task
decides. A scancel (SIGTERM to every process of the task) marks the job interrupted too.

`race run --launcher slurm` again on the same sweep submits only jobs not done (failed ones with
--retry-failed) and not still queued or running: the SLURM ids of earlier submissions are kept in
<sweep>/.submitit/submitted.json and checked with squeue. Needs submitit (pip install race-cli[slurm]).
"""

from __future__ import annotations

import math
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from race_cli import folder
from race_cli.errors import RaceError
from race_cli.io import atomic_write_json, read_json
from race_cli import status as st

SUBMITIT_DIR = ".submitit"
SUBMITTED = "submitted.json"  # job_id -> SLURM job id of its latest submission
PLACEHOLDER = "{job_dir}"
INTERRUPTED_STATES = ("CANCELLED", "TIMEOUT", "PREEMPTED", "DEADLINE", "REQUEUED")  # scheduler stopped it


class SlurmTask:
    """One array task: run job `job_id` of `sweep_dir` with `argv_template` ({job_dir} substituted).

    Picklable (submitit sends it to the node); the running child is dropped when pickled.
    """

    def __init__(self, sweep_dir: str, argv_template: list[str], grace_s: float = 30.0):
        self.sweep_dir = str(sweep_dir)
        self.argv_template = list(argv_template)
        self.grace_s = grace_s
        self._proc: subprocess.Popen | None = None
        self._closed = False

    def __getstate__(self) -> dict[str, Any]:
        return {"sweep_dir": self.sweep_dir, "argv_template": self.argv_template, "grace_s": self.grace_s}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)

    def job_dir(self, job_id: str) -> Path:
        return folder.job_dir(self.sweep_dir, job_id)

    def __call__(self, job_id: str) -> dict[str, Any]:
        from race_cli.pool.local import GPU_SLOT_ENV, attempt_header, child_env, spawn

        job_dir = self.job_dir(job_id)
        current = st.read_status(job_dir)
        if current["state"] == "done":  # a requeue after the job had finished: nothing to do
            return current
        cvd = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        status = st.begin_attempt(job_dir, device=f"cuda:{cvd}" if cvd else "cpu",
                                  slurm_job_id=_slurm_task_id())
        threads = os.environ.get("SLURM_CPUS_PER_TASK", "1")
        env = child_env({"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, "RACE_THREADS": threads,
                         GPU_SLOT_ENV: cvd})  # a task given GPUs runs on them or fails (no silent CPU)
        argv = [a.replace(PLACEHOLDER, str(job_dir)) for a in self.argv_template]
        self._closed = False
        self._proc = spawn(job_dir, argv, env, header=attempt_header(status, argv),
                           ignore_signals=(signal.SIGUSR2,))
        st.update_status(job_dir, pid=self._proc.pid)
        # Poll, not wait(): a USR2 lands in checkpoint() from here, and wait() would hold the
        # Popen lock that checkpoint() needs to reap the child.
        while self._proc.poll() is None and not self._closed:
            time.sleep(0.2)
        rc = self._proc.returncode
        if self._closed:
            return st.read_status(job_dir)
        self._closed = True
        stopped = rc in (-signal.SIGTERM, -signal.SIGINT)  # scancel / the scheduler, not the job
        return st.end_attempt(job_dir, rc, stopped=stopped)

    def checkpoint(self, job_id: str):
        """Preempted or timed out: stop the child, mark it interrupted, requeue this same task."""
        import submitit

        proc = self._proc
        if proc is not None and not self._closed:
            self._closed = True
            rc = stop_and_reap(proc, self.grace_s)
            st.end_attempt(self.job_dir(job_id), rc, stopped=True)
        return submitit.helpers.DelayedSubmission(SlurmTask(self.sweep_dir, self.argv_template, self.grace_s), job_id)


def _reap(proc: subprocess.Popen, timeout: float) -> int | None:
    """The child's exit code once it has exited (within `timeout`), reaped with os.waitpid directly:
    from a signal handler, Popen's own lock may be held by the interrupted frame."""
    deadline = time.monotonic() + timeout
    while True:
        if proc.returncode is not None:
            return proc.returncode
        try:
            pid, sts = os.waitpid(proc.pid, os.WNOHANG)
        except ChildProcessError:  # reaped meanwhile by the interrupted poll()
            return proc.returncode
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(sts)
            return proc.returncode
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.05)


def stop_and_reap(proc: subprocess.Popen, grace_s: float) -> int:
    """SIGTERM the child's process group, SIGKILL it after `grace_s`; returns the exit code."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 30.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        rc = _reap(proc, wait_s)
        if rc is not None:
            return rc
    return -int(signal.SIGKILL)


def _slurm_task_id() -> str | None:
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    return f"{array}_{task}" if array and task else os.environ.get("SLURM_JOB_ID")


# --- bookkeeping of submissions ----------------------------------------------------------------

def submitted(sweep: Path) -> dict[str, str]:
    path = Path(sweep) / SUBMITIT_DIR / SUBMITTED
    try:
        return dict(read_json(path))
    except (OSError, ValueError, TypeError):
        return {}


def slurm_queue() -> dict[str, str] | None:
    """Task id -> state of everything squeue still lists (arrays expanded); None without squeue."""
    if shutil.which("squeue") is None:
        return None
    try:
        out = subprocess.run(["squeue", "-h", "-r", "-o", "%i %T"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return dict(line.split(None, 1) for line in out.stdout.splitlines() if len(line.split(None, 1)) == 2)


def live_jobs(sweep: Path, job_ids: Sequence[str], settle_s: float = 300.0) -> dict[str, str]:
    """job_id -> SLURM id for the jobs of `job_ids` still queued or running on SLURM.

    A job whose status.json already says done is not live: its task only returns to submitit
    after that, and squeue can still list it RUNNING for a moment.
    Tasks still COMPLETING (a cancel in progress: their processes may still write) are waited
    for, up to `settle_s`, so that a resubmission never overlaps the task it replaces.
    """
    ids = set(job_ids)
    subs = {j: s for j, s in submitted(sweep).items() if j in ids}
    if not subs:
        return {}
    deadline = time.monotonic() + settle_s
    while True:
        queue = slurm_queue() or {}
        mine = {j: s for j, s in subs.items()  # status.json is read only for the tasks squeue lists
                if s in queue and st.read_status(folder.job_dir(sweep, j))["state"] != "done"}
        if not any(queue[s] == "COMPLETING" for s in mine.values()) or time.monotonic() > deadline:
            return mine
        time.sleep(1.0)


def refuse_if_live_on_slurm(sweep: Path, job_ids: Sequence[str]) -> None:
    live = live_jobs(sweep, job_ids)
    if live:
        ids = sorted(set(live.values()))
        raise RaceError(f"{len(live)} job(s) of {sweep} are still queued or running on SLURM "
                        f"({', '.join(ids[:5])}{' ...' if len(ids) > 5 else ''}). Running them here too would "
                        "make two processes write one job folder. Wait for them (race run --launcher slurm "
                        f"--sweep-dir {sweep}) or cancel them (scancel), then rerun.")


# --- resources per task --------------------------------------------------------------------------

CPUS_PER_GPU = 8  # data loading, tokenising, the rule reward and vLLM's scheduler per GPU
BASE_MEM_GB = 16  # Python, CUDA context, tokenizers, the task's data
BASE_MEM_GB_CPU = 4  # a CPU-only task: Python, torch, tokenizers, the task's data


def _params(node: dict | None) -> float:
    from race_cli.cost.flops import Arch

    if not node or not node.get("arch"):
        return 0.0
    arch = Arch.from_config(node["arch"])
    return float(arch.n_body + 2 * arch.n_head)


def task_memory_gb(configs: Sequence[dict], base_gb: int = BASE_MEM_GB) -> int:
    """Host memory one task needs, GB, for the largest job of the sweep (bf16 weights, 2 bytes each):

        base_gb + 3 x policy weights (loading, the trainer's copy, vLLM's sleep offload to CPU)
                + 2 x reward-model weights (loading, the model)
    """
    worst = 0.0
    for cfg in configs:
        policy = _params(cfg.get("model")) * 2 / 1e9
        reward = _params((cfg.get("reward") or {}).get("model")) * 2 / 1e9
        worst = max(worst, 3 * policy + 2 * reward)
    return int(math.ceil(base_gb + worst))


def task_resources(configs: Sequence[dict], *, gpus_per_job: int, cpus_per_task: int | None,
                   mem_gb: int | None) -> dict[str, int]:
    """submitit's cpus_per_task and mem_gb: what was asked, else sized from the GPUs and the plan's models.

    A CPU-only task asks for the torch threads its jobs are configured with (`threads`, 0 -> 1):
    asking for more than a node has leaves the array pending forever (SLURM: PartitionConfig).
    """
    if gpus_per_job:
        cpus = cpus_per_task or CPUS_PER_GPU * gpus_per_job
        return {"cpus_per_task": cpus, "mem_gb": mem_gb or task_memory_gb(configs)}
    threads = max((int(c.get("threads") or 0) for c in configs), default=0)
    return {"cpus_per_task": cpus_per_task or max(threads, 1),
            "mem_gb": mem_gb or task_memory_gb(configs, base_gb=BASE_MEM_GB_CPU)}


# --- submit and wait -------------------------------------------------------------------------

def run_slurm(sweep: Path, rows: dict[str, dict], *, retry_failed: bool, partition: str | None, time_min: int,
              gpus_per_job: int, array_parallelism: int | None, setup: Sequence[str], cpus_per_task: int | None,
              wait: bool, job_command: Callable[[Path], list[str]], say=print, poll_s: float = 2.0,
              mem_gb: int | None = None) -> int | None:
    """Submit what is not done as one job array, then (unless not `wait`) follow it to the end.

    Returns an exit code to stop with (130 on Ctrl-C while waiting, 0 after --no-wait), or None
    when every task has ended and the caller should summarise the sweep.
    """
    try:
        import submitit
    except ImportError:
        raise RaceError("--launcher slurm needs submitit: pip install 'race-cli[slurm]' (or pip install submitit).") from None
    if shutil.which("sbatch") is None:
        raise RaceError("--launcher slurm: sbatch is not on PATH here. Run race run on a SLURM login node, "
                        "or use the local pool (--launcher local).")
    from race_cli.pool.local import longest_first, package_root
    from race_cli.lock import SweepLock

    sweep = Path(sweep).resolve()
    logs = sweep / SUBMITIT_DIR
    with SweepLock(sweep, say=say, reenter=True):  # a race's run_main holds it already
        states = st.read_states(sweep, list(rows))
        live = live_jobs(sweep, list(rows))  # ids of plan.json only (checked)
        if not live:
            st.sweep_temp_files(sweep)
        st.adopt_orphans(sweep, {j: s for j, s in states.items() if j not in live})
        states = st.read_states(sweep, list(rows))
        todo = [j for j in st.select_jobs(states, retry_failed) if j not in live]
        if live:
            say(f"{len(live)} job(s) still queued or running on SLURM from an earlier submission: not resubmitted")
        handles: dict[str, Any] = {j: submitit.SlurmJob(folder=logs / "%j", job_id=s) for j, s in live.items()}
        if todo:
            template = job_command(Path(PLACEHOLDER))
            executor = submitit.AutoExecutor(folder=logs / "%j", cluster="slurm")
            configs = [folder.job_config_data(folder.job_dir(sweep, j)) for j in todo]
            resources = task_resources(configs, gpus_per_job=gpus_per_job, cpus_per_task=cpus_per_task, mem_gb=mem_gb)
            params: dict[str, Any] = {
                "timeout_min": time_min, **resources, "name": f"race-{sweep.name}",
                "slurm_array_parallelism": array_parallelism or len(todo),
                "slurm_setup": [f"export PYTHONPATH={package_root()}${{PYTHONPATH:+:$PYTHONPATH}}", *setup],
            }
            if partition:
                params["slurm_partition"] = partition
            if gpus_per_job:
                params["gpus_per_node"] = gpus_per_job
            executor.update_parameters(**params)
            order = longest_first(todo, rows)
            jobs = executor.map_array(SlurmTask(str(sweep), template), order)
            record = submitted(sweep)
            record.update({j: job.job_id for j, job in zip(order, jobs)})
            atomic_write_json(logs / SUBMITTED, record)
            handles.update(zip(order, jobs))
            say(f"submitted {len(order)} job(s) as SLURM array {jobs[0].job_id.split('_')[0]} "
                f"(partition {partition or 'default'}, {time_min} min, {gpus_per_job} GPU(s), "
                f"{resources['cpus_per_task']} CPU(s), {resources['mem_gb']} GB per task)")
        elif not live:
            say("nothing to submit: every job is done" + ("" if retry_failed else " or failed (--retry-failed reruns failed ones)"))
            return None
        if not wait:
            say(f"not waiting (--no-wait). Follow with squeue; rerun race run --launcher slurm --sweep-dir {sweep} "
                "to wait, or to resubmit what did not finish.")
            return 0
        try:
            wait_for(sweep, handles, say=say, poll_s=poll_s)
        except KeyboardInterrupt:
            say(f"stopped waiting; the tasks keep running on SLURM. race run --launcher slurm --sweep-dir {sweep} "
                "waits again (scancel stops them).")
            return 130
    return None


def wait_for(sweep: Path, handles: dict[str, Any], *, say=print, poll_s: float = 2.0) -> None:
    """Follow every task to its end; close status.json for tasks SLURM ended before the job could."""
    pending = dict(handles)
    while pending:
        for job_id, job in list(pending.items()):
            if not job.done():
                continue
            del pending[job_id]
            error = ""
            try:
                job.result()
            except Exception as exc:  # noqa: BLE001 - reported through status.json
                error = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
            status = close_from_slurm(folder.job_dir(sweep, job_id), job.state, error)
            extra = f": {status.get('error')}" if status["state"] != "done" else ""
            say(f"[{time.strftime('%H:%M:%S')}] {status['state']:<11} {job_id} (SLURM {job.job_id}, "
                f"{job.state}){extra}")
        if pending:
            time.sleep(poll_s)


def close_from_slurm(job_dir: Path, slurm_state: str, error: str) -> dict[str, Any]:
    """A task SLURM ended while status.json still says pending/running: interrupted when the scheduler
    stopped it (cancel, time-out, preemption), else failed; with the SLURM state and the log tail."""
    status = st.read_status(job_dir)
    if status["state"] not in ("running", "pending"):
        return status
    stopped = any(slurm_state.upper().startswith(s) for s in INTERRUPTED_STATES)
    return st.update_status(job_dir, state="interrupted" if stopped else "failed", finished=st.now_iso(),
                            stop_reason="signal" if stopped else "error",
                            error=f"SLURM task ended {slurm_state}" + (f": {error}" if error else ""),
                            log_tail=st.log_tail(folder.log_file(job_dir)))
