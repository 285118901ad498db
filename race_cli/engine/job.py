"""One budget-matched GRPO job, end to end: setup -> (evaluate) -> iterate -> finish.

    job = Job(cfg, job_dir, overrides); code = job.run()   # 0 done, 1 failed; RaceError = bad input

Each iteration: take B prompts (stateless draw from (seed, iteration), see setup.batch_indices),
sample G completions each, score them, update the policy mu times with the clipped GRPO loss
(grpo.py). The FLOP ledger (budget.Ledger) is charged from the real token counts and padded
shapes that ran. Before every iteration the job takes the most prompts (<= B) whose worst case
(their real lengths, max_new_tokens completions) fits what is left of budget.flops, so the
last iterations may be smaller; it stops cleanly (stop_reason "budget") when not one prompt
fits, or after budget.max_iterations ("iterations"). The planned ledger is race_cli.cost.budget's,
the same as `race plan`'s. Held-out evaluation runs at the budget fractions of eval.at: at the
start, at the first iteration boundary at or past each fraction f (FLOPs spent >= f·C) and at the
end, so every regime of a sweep is scored at the same spend (plus every eval.every iterations when
that is set); it runs on every target of eval.targets (race_cli/tasks/targets.py: each with its
items, prompt convention and grader), has its own ledger entry, per target, and is never charged
to the budget. Each evaluation point (fractions covered, iteration, FLOPs spent, per-item scores)
is kept in summary.json's `eval_points`.

Files (docs/files.md): status.json, metrics.jsonl (one line per iteration, iteration 0 = the
initial evaluation), ledger.json, summary.json, adapter/, checkpoint/ (see checkpoint.py); with
logger=tensorboard|wandb the same metric lines are mirrored there too (engine/loggers.py).
Resume: the last checkpoint is restored (weights, optimizer, scheduler, RNG states) and
metrics.jsonl is cut back to its iteration, so a killed-and-resumed CPU run ends bitwise equal
to an uninterrupted one.

Departures from TRL's trainer: prompts are drawn without replacement per epoch from (seed,
iteration); one optimizer step per update pass over the whole batch (micro-batches accumulate).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable

from race_cli import folder
from race_cli.engine import checkpoint as ckpt_io
from race_cli.engine.grpo import GrpoLoss, downsample, group_advantages, grpo_loss, trained_rows
from race_cli.engine.hf import enable_checkpointing
from race_cli.engine.logprobs import completion_logprobs
from race_cli.engine.rollout import take_rows
from race_cli.engine.rollout_lean import eval_row_seed
from race_cli.engine.sampler_gap import GapSums, gap_bound, gap_summary, gap_warning
from race_cli.engine.sampling import train_row_seed
from race_cli.errors import RaceError
from race_cli.io import append_jsonl, atomic_write_json, atomic_write_text, fsync_file, read_jsonl
from race_cli.cost.budget import PHASES, Ledger, check_fits, prompts_that_fit, reward_name, shares, with_policy
from race_cli.cost.flops import Flops, forward_flops, merged_lora_update, train_step_flops


class NanLoss(RuntimeError):
    """The loss or the gradient norm was not finite: the update is skipped and the job fails."""


def _now() -> str:
    import datetime as dt

    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def due_fractions(at: list[float], covered: set[float], spent: float, budget: float) -> list[float]:
    """The fractions of eval.at (start and end excluded) that `spent` FLOPs have reached and no
    evaluation has covered yet, smallest first: the evaluation after this iteration stands for them.

    >>> due_fractions([0, 0.25, 0.5, 1], set(), 0.3e12, 1e12)
    [0.25]
    """
    return sorted(f for f in set(float(x) for x in at) if 0 < f < 1 and f not in covered
                  and spent >= f * budget * (1 - 1e-12))


def eval_point(at: list[float], iteration: int, spent: float, budget: float, ev: dict) -> dict:
    """One entry of summary.json's eval_points: the fractions it stands for, where it was taken, scores."""
    return {"at": sorted(at), "iteration": iteration, "flops": float(spent),
            "fraction": float(spent) / budget if budget else None,
            "accuracy": dict(ev["accuracy"]), "items": ev["items"]}


@contextmanager
def eval_sampling(rollout: Any, **settings: Any):
    """Run a block with some rollout settings changed (max_new_tokens, temperature), then restore them.
    Settings a backend does not have are left alone."""
    old = {k: getattr(rollout, k) for k in settings if hasattr(rollout, k)}
    for k in old:
        setattr(rollout, k, settings[k])
    try:
        yield
    finally:
        for k, v in old.items():
            setattr(rollout, k, v)


class Job:
    """One GRPO job in `job_dir` from a composed (validated) config."""

    def __init__(self, cfg: Any, job_dir: Path, overrides: list[str], log: Callable[[str], None] | None = None):
        from omegaconf import OmegaConf

        self.cfg, self.job_dir, self.overrides = cfg, Path(job_dir), list(overrides)
        self.cfg_dict = OmegaConf.to_container(cfg, resolve=True)
        self.log = log or (lambda msg: print(msg, flush=True))
        self.job_id = self.job_dir.name
        self.metrics_path = folder.metrics_file(self.job_dir)
        from race_cli.engine.loggers import NullLogger

        self.logger = NullLogger()  # the real one opens in start_or_resume (it needs the resume step)
        self._batch: tuple[int, list[int]] | None = None  # (iteration, its training items), see batch()
        self._worst_case: dict[tuple[int, int], float] = {}  # (prompts, longest prompt) -> FLOPs, see worst_case()

    # --- setup ------------------------------------------------------------------------------

    def setup(self) -> None:
        """Device, RNGs, task, policy, rollout backend, reward, optimizer, plan; refuses impossible budgets."""
        import torch

        from race_cli.engine import setup as S

        c = self.cfg
        self.device = S.resolve_device(c.device)
        # T and the planned ledger, exactly as race plan computes them (race_cli.cost.budget); refused like the plan
        self.backend, self.budget = S.budget_plan(self.cfg_dict, self.device)
        problem = check_fits(self.budget)
        if problem:
            raise RaceError(problem)
        self.planned = self.budget.ledger()
        self.max_iterations = int(c.budget.max_iterations)
        self.dtype = S.resolve_dtype(c.model.dtype, self.device)
        S.configure_torch(c.seed, c.threads, self.device)
        from race_cli.tasks.targets import build_targets

        self.task = S.build_task(c)
        self.train_items = self.task.train_items()
        self.targets = build_targets(c, self.task)
        self.policy = S.load_policy(c, self.device, self.dtype, self.log)
        # tiny float32 LoRA policies train faster with each adapted matrix merged (flops.merged_lora_update)
        merge = merged_lora_update(self.policy.arch, self.policy.lora, dropout=float(c.lora.dropout),
                                   grad_checkpointing=bool(c.grpo.grad_checkpointing), float32=self.dtype == torch.float32)
        self.micro_batch, self.grad_checkpointing = S.resolve_micro_batch(self.cfg_dict, self.device, merged_lora=merge)
        if self.grad_checkpointing and not c.grpo.grad_checkpointing:  # the memory ledger needs it
            enable_checkpointing(self.policy.model, lora=c.lora.enabled)
        self.merge_lora = merge and not self.grad_checkpointing
        self.train_prompts = S.PromptCache(self.train_items, self.policy.tokenizer, self.task.convention)
        self.target_prompts = {t.name: S.PromptCache(t.items, self.policy.tokenizer, t.convention) for t in self.targets}
        self.rollout = S.build_rollout(c, self.policy, self.device, self.dtype, self.backend,
                                       prompts=(self.train_prompts, *self.target_prompts.values()),
                                       sync_dir=self.job_dir / ".vllm-adapter", targets=tuple(self.targets),
                                       log=self.log)
        self.reward = S.build_reward(c, S.reward_device(self.device), self.dtype,  # its own GPU when there are 2+
                                     grader=self.task.grader)
        self.ref_model = None
        if c.grpo.beta > 0 and not c.lora.enabled:  # full FT: the reference needs its own frozen copy
            import copy

            self.ref_model = copy.deepcopy(self.policy.model).eval().requires_grad_(False)
        params = [p for p in self.policy.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=c.grpo.lr, weight_decay=c.grpo.weight_decay)
        warm = c.grpo.warmup_iters
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda it: min(1.0, (it + 1) / warm) if warm > 0 else 1.0)
        # the live stop test costs iterations on the loaded model's shapes (what the ledger charges)
        self.spec = with_policy(self.budget.spec, self.policy.arch, self.policy.lora)

    def worst_case(self, iteration: int, prompts: int | None = None) -> float:
        """Model FLOPs iteration `iteration` can cost at most: its first `prompts` prompts (default B),
        max_new_tokens completions each."""
        idx = self.batch(iteration)[:prompts]
        key = (len(idx), max(len(self.train_prompts.ids(j)) for j in idx))  # all the worst case depends on
        if key not in self._worst_case:  # ledger arithmetic worth caching; a handful of distinct keys per job
            self._worst_case[key] = self.spec.worst_case(*key)
        return self._worst_case[key]

    def prompts_that_fit(self, iteration: int) -> int:
        """Prompts iteration `iteration` takes: the most (<= B) whose worst case fits what is left; 0 = stop."""
        if iteration > self.max_iterations:
            return 0
        left = float(self.cfg.budget.flops) - self.ledger.spent()
        return prompts_that_fit(left, lambda b: self.worst_case(iteration, b), self.cfg.grpo.prompts_per_iter)

    def batch(self, iteration: int) -> list[int]:
        """The training items of `iteration` (setup.batch_indices; kept for the iteration last asked about,
        which the budget check and the iteration itself both read)."""
        from race_cli.engine.setup import batch_indices

        if self._batch is None or self._batch[0] != iteration:
            self._batch = (iteration, batch_indices(self.cfg.seed, iteration, self.cfg.grpo.prompts_per_iter,
                                                    len(self.train_items)))
        return list(self._batch[1])

    # --- evaluation --------------------------------------------------------------------------

    def evaluate(self, samples: int | None = None) -> dict:
        """Every evaluation target; charged to the eval ledger only (in total and per target).

        Per item: eval.samples = k completions (greedy when k = 1 and eval.greedy, else sampled at
        the eval temperature), graded by the target's grader; its score is the fraction correct.
        Sampled completions draw common random numbers: sample s of item i from a stream keyed by
        (eval.sample_seed, target, item id, s) (rollout_lean.eval_row_seed), never from the training
        generator, so equal weights give equal completions in every job and an evaluation changes no
        training step.
        `samples` (the start's eval.start_samples) overrides k: its first eval.samples draws are the ones
        every other evaluation makes, so the start stays paired item by item.
        Returns {"accuracy": {target: mean score}, "items": {target: {"ids": [...], "scores": [...]}}}.
        """
        from race_cli.answers.graders import grade

        e = self.cfg.eval
        k = int(samples or e.samples)
        greedy = bool(e.greedy) and k == 1
        temperature = e.temperature if e.temperature is not None else self.cfg.rollout.temperature
        per_call = max(1, e.batch_size // k)  # prompts per generate call: batch_size completions
        out: dict = {"accuracy": {}, "items": {}}
        for target in self.targets:
            t0 = time.perf_counter()
            prompts, items = self.target_prompts[target.name], target.items
            cap = e.max_new_tokens or max(self.cfg.rollout.max_new_tokens, target.min_new_tokens)
            flops, scores = Flops(), []
            with eval_sampling(self.rollout, max_new_tokens=cap, temperature=temperature):
                for start in range(0, len(items), per_call):
                    idx = list(range(start, min(len(items), start + per_call)))
                    # common random numbers: sample s of item i draws from (eval.sample_seed, target, item id, s)
                    seeds = None if greedy else [eval_row_seed(e.sample_seed, target.name, items[i].id, s)
                                                 for i in idx for s in range(k)]
                    ro = self.rollout.generate([prompts.ids(i) for i in idx], group_size=k, greedy=greedy, seeds=seeds)
                    flops = flops + ro.flops
                    for j, i in enumerate(idx):  # completions of item i: rows j*k .. j*k+k-1
                        right = sum(grade(target.grader, text, items[i].answer) for text in ro.texts[j * k:(j + 1) * k])
                        scores.append(right / k)
            self.ledger.add_eval(flops, time.perf_counter() - t0, target=target.name, items=len(items))
            out["accuracy"][target.name] = sum(scores) / len(scores)
            out["items"][target.name] = {"ids": [it.id for it in items], "scores": scores}
        self.ledger.end_eval()
        return out

    def start_key(self) -> str:
        """What the start evaluation depends on, hashed (SHA-256): the starting weights' bytes, the evaluation
        settings, every target's items, answers and prompt tokens, and the backend, device type and dtype.

        LoRA's A matrices are left out while every B is zero (PEFT's initialisation): the adapted model is
        then the base model whatever A is, and A is drawn from the job's seed."""
        import hashlib
        import json

        import torch

        h = hashlib.sha256()
        sd = self.policy.model.state_dict()
        zero_b = all(not bool(v.any()) for k, v in sd.items() if "lora_B" in k)
        for name in sorted(sd):
            if zero_b and "lora_A" in name:
                continue
            t = sd[name].detach().cpu().contiguous().reshape(-1)
            h.update(f"{name}|{t.dtype}|{tuple(sd[name].shape)}".encode())
            h.update(t.view(torch.uint8).numpy().tobytes())
        c = self.cfg_dict
        settings = {"eval": {k: c["eval"].get(k) for k in ("greedy", "samples", "temperature", "max_new_tokens",
                                                            "sample_seed", "batch_size")},
                    "rollout": {k: c["rollout"][k] for k in ("temperature", "top_p", "max_new_tokens")},
                    "backend": self.backend, "device": str(self.device).split(":")[0], "dtype": str(self.dtype),
                    "targets": [[t.name, str(t.grader), t.min_new_tokens,
                                 [[it.id, str(it.answer), self.target_prompts[t.name].ids(i)]
                                  for i, it in enumerate(t.items)]] for t in self.targets]}
        if self.start_samples() is not None:  # only then: the keys of sweeps planned without it stay as they were
            settings["start_samples"] = self.start_samples()
        h.update(json.dumps(settings, sort_keys=True, default=str).encode())
        return h.hexdigest()

    def start_samples(self) -> int | None:
        """Completions per item at the start evaluation (eval.start_samples), None when it is eval.samples."""
        k0 = self.cfg_dict["eval"].get("start_samples")
        return int(k0) if k0 is not None and int(k0) != int(self.cfg.eval.samples) else None

    def _evaluate_start(self) -> dict:
        k0 = self.start_samples()
        return self.evaluate() if k0 is None else self.evaluate(k0)

    def start_evaluation(self) -> tuple[dict, str | None]:
        """The iteration-0 evaluation, once per (starting weights, evaluation settings) in a sweep.

        In a sweep folder the first job to need it evaluates and writes start-evals/<key>.json (atomically,
        under that file's lock, race_cli/lock.py); every other job of any condition starting from the same
        weights with the same evaluation reads it (and charges no evaluation). With common random numbers
        its own evaluation would give exactly the same scores; reading them saves one evaluation per job
        and gives the report one start per condition. Returns (evaluation, the key when shared, else None).
        A job trained on its own (race train --out) evaluates itself."""
        sweep = folder.sweep_of(self.job_dir)
        if sweep is None:
            return self._evaluate_start(), None
        key = self.start_key()

        def ok(ev: dict) -> bool:
            return isinstance(ev.get("accuracy"), dict) and isinstance(ev.get("items"), dict)

        ev = shared_evaluation(folder.start_eval_file(sweep, key), sweep, key, ok, self._evaluate_start,
                               {"evaluated_by": self.job_id}, self.log)
        return ev, key

    @staticmethod
    def eval_metrics(ev: dict) -> dict:
        """The metrics.jsonl keys of one evaluation: eval/<target>/accuracy."""
        return {f"eval/{name}/accuracy": acc for name, acc in ev["accuracy"].items()}

    def write_metrics(self, line: dict) -> None:
        """Append one line to metrics.jsonl (the source of truth) and mirror it to the logger.
        Not fsynced here: `save_checkpoint` makes the lines durable before the checkpoint that covers them."""
        append_jsonl(self.metrics_path, [line], durable=False)
        self.logger.log(line)

    # --- one GRPO iteration ----------------------------------------------------------------

    def update(self, ro: Any, advantages) -> dict:
        """mu clipped-GRPO passes over the rollout batch; returns loss stats and the FLOPs that ran.

        No forward the math does not need: the old policy's log-probs are the first pass's own,
        detached (before any optimizer step the current policy IS the old one), so mu > 1 costs
        mu train steps and nothing more; the reference forward runs once (beta > 0). Rows are
        sorted by length before they are cut into micro-batches, and each micro-batch is cut to
        its own longest prompt and completion, so it runs no padding columns that only other
        micro-batches need. With beta = 0, rows whose advantage is exactly 0 (groups of equal rewards) run
        no pass (`grpo.skip_zero_advantage`; grpo.trained_rows): their gradient is exactly 0 and the loss
        keeps the whole batch's normalisers, so loss and gradient are the full batch's; only the rows that
        ran are charged (`rows` in the result). An iteration with no such row runs nothing.
        Where the rollout carries the engine's own log-probabilities (vLLM), the first pass's are compared
        with them token by token (`gap`, engine/sampler_gap.py): no forward is added.
        """
        import torch

        g, model, dev = self.cfg.grpo, self.policy.model, self.device
        seq = [p + c for p, c in zip(ro.prompt_lens, ro.completion_lens)]
        N, P = len(seq), ro.prompt_ids.size(1)
        # the loss normalisers are the whole batch's (every row's completion tokens, every row), whichever rows run
        total_tokens = float(ro.completion_mask.sum().item())
        # rows whose gradient is exactly 0 (advantage 0, beta = 0) run no pass at all (grpo.trained_rows)
        keep = trained_rows(advantages, beta=g.beta, skip_zero_advantage=g.skip_zero_advantage).tolist()
        if not any(keep):  # every group uninformative: no pass, no optimizer step, no weight changes
            self.scheduler_step()
            return {"loss": 0.0, "clip_frac": 0.0, "kl": None, "flops": Flops(), "rows": 0, "gap": GapSums()}
        # rows in order of length (a stable sort: ties keep rollout order), so each micro-batch pads only to
        # rows like its own; the loss is a sum over rows, normalised by batch totals: the order changes rounding only
        order = sorted((i for i in range(N) if keep[i]), key=seq.__getitem__)
        n_rows = len(order)
        mb = min(self.micro_batch, n_rows)  # micro-batches are cut after the filter
        perm = torch.tensor(order)
        seq = [seq[i] for i in order]
        plens, clens = [ro.prompt_lens[i] for i in order], [ro.completion_lens[i] for i in order]
        comp = ro.completion_ids[perm].to(dev)  # [N, C]
        mask = ro.completion_mask[perm].to(dev)  # [N, C]
        ids = torch.cat([ro.prompt_ids[perm].to(dev), comp], dim=1)  # [N, P+C]
        attn = torch.cat([ro.prompt_mask[perm].to(dev), mask.long()], dim=1)  # [N, P+C]
        adv = advantages[perm].to(dev)  # [N]
        sampled = None if ro.sampler_logprobs is None else ro.sampler_logprobs[perm].to(dev)  # [N, C] the engine's
        gap = GapSums()
        chunks = [slice(s, min(n_rows, s + mb)) for s in range(0, n_rows, mb)]
        # per micro-batch: (rows, longest prompt p_s, longest completion c_s); columns P-p_s .. P+c_s-1 run
        cuts = [(s, max(plens[s]), max(max(clens[s]), 1)) for s in chunks]
        arch, lora, T = self.policy.arch, self.policy.lora, self.cfg.rollout.temperature

        def logprobs(m: Any, s: slice, p_s: int, c_s: int, merge: bool = False):  # [n, c_s]
            cols = slice(P - p_s, P + c_s)
            return completion_logprobs(m, ids[s, cols], attn[s, cols], comp[s, :c_s], T, merge_lora=merge)

        def shape(s: slice, p_s: int, c_s: int) -> dict:  # the real and padded shapes one micro-batch runs
            # rows re-packed to start at column 0: the body runs the longest real row; the head only real completion tokens
            return dict(padded_len=max(seq[s]), logit_positions=sum(clens[s]), executed_logit_positions=sum(clens[s]))

        flops = Flops()
        ref = None
        if g.beta > 0:  # the reference: the base with the adapter disabled (no second copy for LoRA)
            with torch.no_grad():
                if self.ref_model is None:
                    with model.disable_adapter():
                        ref = [logprobs(model, *cut) for cut in cuts]
                else:
                    ref = [logprobs(self.ref_model, *cut) for cut in cuts]
            flops = flops + sum((forward_flops(arch, seq[s], **shape(s, p_s, c_s)) for s, p_s, c_s in cuts), Flops())
        old: list = []  # the first pass's log-probs, detached: the old policy of every pass
        losses, kls, clips = [], [], []
        for _ in range(g.updates_per_batch):
            self.optimizer.zero_grad(set_to_none=True)
            loss_sum, kl_sum, clip_sum = 0.0, 0.0, 0.0
            for k, (s, p_s, c_s) in enumerate(cuts):
                logp = logprobs(model, s, p_s, c_s, self.merge_lora)  # [n, c_s]
                if len(old) == k:
                    old.append(logp.detach())
                    if sampled is not None:  # sampled = trained? the engine's log-probs against the first pass's
                        gap.add(sampled[s, :c_s], logp, mask[s, :c_s])
                out: GrpoLoss = grpo_loss(logp, old[k], adv[s], mask[s, :c_s], clip_eps=g.clip_eps, beta=g.beta,
                                          ref_logp=None if ref is None else ref[k], loss_agg=g.loss_agg,
                                          num_tokens=total_tokens, num_seqs=N)  # whole-batch normalisers
                if not torch.isfinite(out.loss):
                    raise NanLoss(f"the GRPO loss is {out.loss.item()} at iteration {self.iteration + 1}")
                out.loss.backward()
                flops = flops + train_step_flops(arch, seq[s], lora=lora, grad_checkpointing=self.grad_checkpointing,
                                                 merged_lora=self.merge_lora, **shape(s, p_s, c_s))
                loss_sum += out.loss.item()
                clip_sum += out.clip_frac * out.tokens
                kl_sum += (out.kl or 0.0) * out.tokens
            params = [p for p in model.parameters() if p.requires_grad]
            if g.max_grad_norm > 0:
                norm = torch.nn.utils.clip_grad_norm_(params, g.max_grad_norm)
                if not torch.isfinite(norm):
                    raise NanLoss(f"the gradient norm is {norm.item()} at iteration {self.iteration + 1}")
            self.optimizer.step()
            losses.append(loss_sum)
            clips.append(clip_sum / max(total_tokens, 1.0))
            kls.append(kl_sum / max(total_tokens, 1.0))
        self.scheduler_step()
        self.rollout.sync(model)
        return {"loss": sum(losses) / len(losses), "clip_frac": sum(clips) / len(clips),
                "kl": (sum(kls) / len(kls)) if ref is not None else None, "flops": flops, "rows": n_rows, "gap": gap}

    def scheduler_step(self) -> None:
        """Advance the lr schedule one iteration (warm-up counts iterations, updated or not)."""
        import warnings

        with warnings.catch_warnings():  # an iteration with no update pass steps the schedule before any optimizer step
            warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step\\(\\)` before")
            self.scheduler.step()

    def iterate(self, iteration: int, prompts: int | None = None) -> dict:
        """One GRPO iteration on the first `prompts` prompts of its batch (default all B); charges the
        ledger, returns the metrics line (without eval)."""
        import torch

        c, led = self.cfg, self.ledger
        t_start = time.perf_counter()
        idx = self.batch(iteration)[:prompts]
        G = c.grpo.group_size
        m = c.grpo.update_group_size or G  # rollout down-sampling: the update keeps m of each group's G
        items = [self.train_items[j] for j in idx for _ in range(G)]  # [B*G], groups consecutive
        # an engine whose generator is not checkpointed (vLLM's lives in its own process) samples each row from its
        # own seed, so a resumed job draws what the uninterrupted one did
        seeds = ([train_row_seed(c.seed, iteration, r) for r in range(len(idx) * G)]
                 if getattr(self.rollout, "seeds_training_rows", False) else None)
        ro = self.rollout.generate([self.train_prompts.ids(j) for j in idx], group_size=G, greedy=False, seeds=seeds)
        if hasattr(self.rollout, "yield_gpu"):
            self.rollout.yield_gpu()  # vLLM sleeps: reward and update get its memory (evaluation never sleeps)
        t_rollout = time.perf_counter() - t_start
        rr = self.reward(items, ro.texts)  # every one of the G completions is scored (and charged)
        rewards = torch.tensor(rr.rewards, dtype=torch.float32)  # [B*G]
        t0 = time.perf_counter()
        kept, kept_rewards = ro, rewards
        if m < G:  # the m completions the rule keeps; advantages are computed within the kept m (as PODS)
            rows = downsample(rewards, G, m, rule=c.grpo.downsample)  # [B*m]
            kept, kept_rewards = take_rows(ro, rows.tolist()), rewards[rows]
        adv = group_advantages(kept_rewards, m, scale=c.grpo.scale_rewards)
        up = self.update(kept, adv.advantages)
        t_update = time.perf_counter() - t0
        secs = {"rollout": t_rollout, "update": t_update, "reward": rr.seconds}
        for phase, f in (("rollout", ro.flops), ("update", up["flops"]), ("reward", rr.flops)):
            led.add(phase, f, secs[phase])
        led.seconds["total"] += time.perf_counter() - t_start
        led.rows["total"] += len(kept.completion_lens)  # rows offered to the update (B*m; B*G without down-sampling)
        led.rows["trained"] += up["rows"]
        tp, tc = sum(ro.prompt_lens), sum(ro.completion_lens)
        led.tokens["prompt"] += tp
        led.tokens["completion"] += tc
        led.iterations, led.prompts = iteration, led.prompts + len(idx)
        cum = led.model_flops()
        gap = up["gap"].metrics()  # sampled = trained, where the engine returned its log-probabilities
        if gap:
            totals = self.state.setdefault("sampler_gap", {"sums": GapSums().to_json(), "over": 0})
            totals["sums"] = GapSums.from_json(totals["sums"]).merge(up["gap"]).to_json()
            totals["over"] += int(gap["rollout/logp_gap_mean"] > gap_bound(self.dtype))
        return {"iteration": iteration, "train/reward_mean": rewards.mean().item(),
                "train/reward_std": rewards.std(unbiased=False).item(), "train/frac_zero_std_groups": adv.frac_zero_std,
                "train/kl": up["kl"], "train/clip_frac": up["clip_frac"], "train/loss": up["loss"],
                "train/completion_len": tc / len(ro.completion_lens),
                "train/trained_rows": up["rows"] / len(kept.completion_lens),
                **{f"flops/{p}": cum[p] for p in PHASES}, "flops/total": sum(cum.values()),
                **{f"time/{p}": secs[p] for p in PHASES}, "tokens/prompt": tp, "tokens/completion": tc, **gap}

    # --- files -------------------------------------------------------------------------------

    def spent(self) -> float:
        return self.ledger.spent()

    def ledger_json(self) -> dict:
        return {"convention": "model", "budget_flops": float(self.cfg.budget.flops), "rollout_backend": self.backend,
                "planned": self.planned, "actual": self.ledger.actual(), "eval": self.ledger.eval_json()}

    def summary_json(self, stop_reason: str) -> dict:
        c, led = self.cfg, self.ledger
        flops = led.model_flops()
        secs = {p: led.seconds[p] for p in PHASES}
        secs |= {"eval": led.eval_seconds, "total": led.seconds["total"] + led.eval_seconds}
        final, first = self.state["eval_last"], self.state["eval_initial"]
        return {"job_id": self.job_id, "state": "done", "stop_reason": stop_reason,
                "condition": {"model": c.model.name, "budget_flops": float(c.budget.flops),
                              "reward": reward_name(self.cfg_dict), "task": c.task.name},
                "knobs": {"group_size": c.grpo.group_size, "updates_per_batch": c.grpo.updates_per_batch,
                          "update_group_size": c.grpo.update_group_size or c.grpo.group_size,
                          "prompts_per_iter": c.grpo.prompts_per_iter, "iterations": led.iterations},
                "seed": c.seed, "overrides": self.overrides,
                "targets": [t.name for t in self.targets],
                "eval": dict(final["accuracy"]), "eval_initial": dict(first["accuracy"]),
                "eval_items": final["items"], "eval_items_initial": first["items"],
                "eval_points": self.state.get("eval_points", []), "shares": led.shares(),
                "informative_share": led.informative_share(),
                "planned_shares": shares(self.planned["flops"]),
                "flops": flops | {"total": sum(flops.values())}, "seconds": secs,
                "sampler_gap": self.sampler_gap()}

    def sampler_gap(self) -> dict | None:
        """summary.json's sampled-vs-trained record (engine/sampler_gap.gap_summary); None without engine log-probs."""
        totals = self.state.get("sampler_gap")
        if not totals:
            return None
        return gap_summary(GapSums.from_json(totals["sums"]), totals["over"], self.dtype)

    def set_status(self, **fields: Any) -> None:
        from race_cli.status import update_status

        update_status(self.job_dir, **fields)

    def save_checkpoint(self) -> None:
        fsync_file(self.metrics_path)  # the lines this checkpoint covers are durable before it is
        state = dict(self.state, iteration=self.iteration, ledger=self.ledger.to_json())
        ckpt_io.save(self.job_dir, model=self.policy.model, optimizer=self.optimizer, scheduler=self.scheduler,
                     state=state)

    # --- the job ------------------------------------------------------------------------------

    def start_or_resume(self) -> None:
        """Restore the last checkpoint (cutting metrics.jsonl back to it), or start fresh with an evaluation."""
        from race_cli.engine.loggers import make_logger

        found = ckpt_io.find(self.job_dir)
        ledger = None
        if found is not None:  # checked (iteration, ledger against metrics.jsonl and the budget) before anything changes
            rows = self._metrics_for_resume()
            ledger = ckpt_io.check_resume(
                found, rows, budget=float(self.cfg.budget.flops), max_iterations=self.max_iterations,
                prompts_per_iter=int(self.cfg.grpo.prompts_per_iter), group_size=int(self.cfg.grpo.group_size),
                least_cost_per_prompt=lambda n: self.spec.cost(1, prompt_len=n, completion_len=1)["rollout"].model)
            # the rollout only: zero-advantage rows skip the update (grpo.skip_zero_advantage), so an
            # iteration of equal rewards charges no update FLOPs and the least a prompt costs is its sampling
        self.logger = make_logger(self.cfg.logger, self.job_dir, self.cfg_dict, job_id=self.job_id,
                                  resume_step=None if found is None else int(found.state["iteration"]))
        if found is not None:
            ckpt_io.restore(found, model=self.policy.model, optimizer=self.optimizer, scheduler=self.scheduler)
            self.rollout.sync(self.policy.model)
            self.iteration = int(found.state["iteration"])
            self.ledger = ledger
            self.state = {k: v for k, v in found.state.items() if k not in ("iteration", "ledger")}
            keep = [r for r in rows if r.get("iteration", 0) <= self.iteration]
            atomic_write_text(self.metrics_path, "".join(_line(r) for r in keep))
            self.log(f"resumed from checkpoint at iteration {self.iteration} ({len(rows) - len(keep)} metric lines dropped)")
            return
        self.iteration, self.ledger = 0, Ledger()
        if self.metrics_path.exists():
            self.metrics_path.unlink()
        ev, shared = self.start_evaluation()
        budget = float(self.cfg.budget.flops)
        start = eval_point([0.0], 0, 0.0, budget, ev) | {"start_key": shared}  # one start per (weights, eval settings)
        self.state = {"eval_initial": ev, "eval_last": ev, "eval_points": [start]}
        self.write_metrics({"iteration": 0, **{f"flops/{p}": 0.0 for p in PHASES}, "flops/total": 0.0,
                            "budget/fraction": 0.0, "budget/eval_at": 0.0, **self.eval_metrics(ev)})
        self.log(("initial eval (shared start): " if shared else "initial eval: ") + ", ".join(f"{t.name} {ev['accuracy'][t.name]:.3f} on {len(t.items)} items"
                                             for t in self.targets))

    def _metrics_for_resume(self) -> list[dict]:
        """metrics.jsonl's lines, for checking a checkpoint against; unreadable = a corrupt job folder."""
        if not self.metrics_path.exists():
            return []
        try:
            rows = read_jsonl(self.metrics_path)
        except (OSError, ValueError) as exc:
            raise ckpt_io.CorruptCheckpoint(
                f"{self.metrics_path} cannot be read ({type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}),"
                " so the checkpoint cannot be checked against it; nothing was changed. Move the job folder aside and "
                "rerun it into a fresh one.") from None
        if not all(isinstance(r, dict) and type(r.get("iteration", 0)) is int for r in rows):
            raise ckpt_io.CorruptCheckpoint(f"{self.metrics_path} holds lines that are not metric lines (a JSON object "
                                            "with an integer iteration); nothing was changed. Move the job folder "
                                            "aside and rerun it into a fresh one.")
        return rows

    def train(self) -> str:
        """Iterate until the budget or the iteration cap stops the job; returns the stop reason.

        Each iteration takes the most prompts (<= B) whose worst case fits what is left of the
        budget (race_cli.cost.budget): full iterations first, then smaller ones at the end.
        """
        c = self.cfg
        budget = float(c.budget.flops)
        prompts = self.prompts_that_fit(self.iteration + 1)
        while prompts:
            i = self.iteration + 1
            line = self.iterate(i, prompts)
            self.iteration = i
            prompts = self.prompts_that_fit(i + 1)
            last = prompts == 0
            points = self.state.setdefault("eval_points", [])
            covered = {f for pt in points for f in pt["at"]}
            due = due_fractions(list(c.eval.at), covered, self.spent(), budget)
            if last and i < self.max_iterations:  # the budget is spent (not the iteration cap): fraction 1
                due.append(1.0)
            if due or last or (c.eval.every and i % c.eval.every == 0):
                ev = self.evaluate()
                self.state["eval_last"] = ev
                points.append(eval_point(due, i, self.spent(), budget, ev))
                line.update(self.eval_metrics(ev))
                line["budget/fraction"] = self.spent() / budget
                if due:
                    line["budget/eval_at"] = max(due)
            self.write_metrics(line)
            checkpoint = i % c.checkpoint.every == 0 or last
            # atomic every iteration, durable (fsync) at checkpoints: a resume cuts metrics back to the
            # checkpoint and rewrites the ledger, so nothing after it needs to survive a power loss
            atomic_write_json(folder.ledger_file(self.job_dir), self.ledger_json(), durable=checkpoint)
            self.log(f"iter {i}: reward {line['train/reward_mean']:.3f} loss {line['train/loss']:+.4f} "
                     f"len {line['train/completion_len']:.1f} flops {line['flops/total']:.3g}/{budget:.3g}"
                     + "".join(f" {k[5:-9]} {v:.3f}" for k, v in line.items() if k.startswith("eval/")))
            if checkpoint:
                self.save_checkpoint()
        return "iterations" if self.iteration >= self.max_iterations else "budget"

    def run(self) -> int:
        """The whole job; returns 0 (done), 1 (failed) or 2 (a checkpoint in the folder is invalid). Bad input
        raises RaceError after marking the status.

        The job folder's lock (`.job.lock`, race_cli/lock.py) is held throughout: a second process
        training the same folder is refused before it writes anything. SIGTERM (a scheduler, kill)
        stops the job as Ctrl-C does: status `interrupted`, the last checkpoint kept, and the
        `Stopped` exception propagates to the CLI, which exits 128 + the signal number.
        """
        from race_cli.lock import JobLock

        self.job_dir.mkdir(parents=True, exist_ok=True)
        folder.refuse_links_in(self.job_dir)  # nothing written through a planted link (docs/security.md)
        with JobLock(self.job_dir, say=self.log), _sigterm_as_stop():
            return self._run_locked()

    def _run_locked(self) -> int:
        from race_cli.status import read_status, write_status

        prior = read_status(self.job_dir)
        fields: dict[str, Any] = dict(job_id=self.job_id, state="running", pid=os.getpid(), host=socket.gethostname())
        # under race run the pool counts attempts (begin_attempt); a job started by hand counts its own
        if not os.environ.get("RACE_POOL_ATTEMPT"):
            fields |= dict(started=_now(), attempts=int(prior.get("attempts") or 0) + 1)
        for stale in ("error", "stop_reason", "finished", "exit_code"):
            prior.pop(stale, None)
        write_status(self.job_dir, prior | fields)
        try:
            self.setup()
            self.set_status(device=self.device)
            self.start_or_resume()
            stop = self.train()
            final = ckpt_io.find(self.job_dir)
            if final is None or int(final.state["iteration"]) != self.iteration:
                self.save_checkpoint()
                final = ckpt_io.find(self.job_dir)
            ckpt_io.publish_adapter(final.path, self.job_dir)
            atomic_write_json(folder.ledger_file(self.job_dir), self.ledger_json())
            atomic_write_json(folder.summary_file(self.job_dir), self.summary_json(stop))
        except RaceError as exc:
            self.set_status(state="failed", stop_reason="error", error=str(exc).splitlines()[0], finished=_now(),
                            exit_code=2)
            raise
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM through _sigterm_as_stop
            signum = getattr(exc, "signum", signal.SIGINT)
            self.set_status(state="interrupted", stop_reason="signal", finished=_now(), exit_code=128 + signum,
                            error=f"stopped by {signal.Signals(signum).name}; rerun the same command to resume "
                                  "from the last checkpoint")
            self.log(f"stopped by {signal.Signals(signum).name}: status interrupted, the last checkpoint is kept")
            raise
        except NanLoss as exc:
            return self._failed("nan_loss", f"{exc}; the update was not applied and the last good checkpoint was kept")
        except ckpt_io.CorruptCheckpoint as exc:
            return self._failed("error", str(exc), trace=False, code=2)  # what a file in the folder got wrong
        except OSError as exc:
            return self._failed("error", self._os_error(exc), trace=False)
        except Exception as exc:  # noqa: BLE001 - any crash becomes a failed status with a one-line reason
            return self._failed("error", f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        finally:
            self.logger.close()
            close = getattr(getattr(self, "rollout", None), "close", None)
            if close is not None:  # vLLM: its adapter sync folder goes on every exit path
                close()
        self.set_status(state="done", stop_reason=stop, finished=_now(), exit_code=0)
        warning = gap_warning(self.sampler_gap())
        if warning:
            self.log(warning)
        first, last = self.state["eval_initial"]["accuracy"], self.state["eval_last"]["accuracy"]
        self.log(f"done ({stop}): {self.iteration} iterations, {self.spent():.3g} FLOPs, accuracy "
                 + ", ".join(f"{name} {first[name]:.3f} -> {last[name]:.3f}" for name in last))
        return 0

    def _os_error(self, exc: OSError) -> str:
        """One line for a file-system error while the job ran: what, where, what to do; it claims a
        checkpoint is intact only when there is one."""
        import errno

        where = exc.filename or self.job_dir
        have = (self.job_dir / ckpt_io.NAME / "state.json").is_file()
        kept = ("files already written, including the last complete checkpoint, are intact" if have else
                "files already written are intact (the job has no checkpoint yet)")
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            from race_cli.io import disk_full_message

            return disk_full_message(exc, where, kept, then=": the job resumes from its last checkpoint")
        if exc.errno == errno.ELOOP:
            return (f"{where} is a symbolic link: race never writes through links in a job folder; {kept}. Remove "
                    "the link, then rerun.")
        return f"{type(exc).__name__}: {exc} (while writing to {self.job_dir}; {kept})"

    def _failed(self, reason: str, message: str, trace: bool = True, code: int = 1) -> int:
        import traceback

        if trace:
            self.log(traceback.format_exc())
        self.log(f"error: {message}")
        self.set_status(state="failed", stop_reason=reason, error=message.splitlines()[0], finished=_now(), exit_code=code)
        return code


class Stopped(KeyboardInterrupt):
    """A stop signal other than Ctrl-C (SIGTERM), raised where the job is, like KeyboardInterrupt."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def _sigterm_as_stop():
    """While the job runs, SIGTERM raises Stopped (a KeyboardInterrupt) instead of killing at once,
    so the job closes its status as `interrupted` and atomic writes in progress are rolled back."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_term(signum: int, frame: object) -> None:
        raise Stopped(signum)

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _line(row: dict) -> str:
    import json

    from race_cli.io import _jsonable

    return json.dumps(_jsonable(row)) + "\n"


def shared_evaluation(path: Path, sweep: Path, key: str, ok: Callable[[dict], bool], evaluate: Callable[[], dict],
                      fields: dict, log: Callable[[str], None]) -> dict:
    """An evaluation made once per sweep and read by every other job that needs it: `path` (under the sweep's
    start-evals/) holds {"key": key, **fields, "eval": ...}. The first job to need it evaluates and writes it
    atomically under that file's lock (race_cli/lock.py); the others wait for the file and read it. A file
    that is absent, torn, of another key or failing `ok` is evaluated again. With common random numbers every
    job would get exactly the same scores, so reading them saves one evaluation per job."""
    from race_cli.io import LinkRefused, atomic_write_json, inside, read_json
    from race_cli.lock import FileLock, LockBusy

    try:
        inside(path, sweep)  # start-evals/ linked elsewhere would read (and write) another sweep's file
    except LinkRefused as exc:
        raise RaceError(f"{exc.filename} is a symbolic link: race writes start-evals/ itself and never follows "
                        "links in a sweep (docs/security.md). Remove the link, then rerun.") from None
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise RaceError(f"{path} is not a plain file (a folder, a link or a device where race writes the start "
                        "evaluation it shares between jobs). Remove it, then rerun: the start is evaluated again.")
    path.parent.mkdir(parents=True, exist_ok=True)

    def cached() -> dict | None:
        """The shared evaluation, or None when absent, torn or not the shape race writes (evaluated again)."""
        try:
            data = read_json(path)
        except (OSError, ValueError):
            return None
        ev = data.get("eval") if isinstance(data, dict) and data.get("key") == key else None
        return ev if isinstance(ev, dict) and ok(ev) else None

    lock = FileLock(path.with_name(path.name + ".lock"), say=log)
    while (hit := cached()) is None:
        try:
            lock.acquire()
            break
        except LockBusy:  # another job is evaluating it right now: wait for its file
            time.sleep(0.2)
    if hit is not None:
        return hit
    try:
        if (hit := cached()) is not None:  # written between our check and our lock
            return hit
        ev = evaluate()
        atomic_write_json(path, {"key": key, **fields, "eval": ev})
        log(f"shared evaluation written for the sweep's other jobs: {path.name}")
        return ev
    finally:
        lock.release()
