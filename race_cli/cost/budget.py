"""The budget: what one GRPO iteration costs, how many the budget buys, and the live ledger.

Pure (no torch, no I/O): `race plan` and the job (`race_cli.engine`) both call it, so the plan
and the job cannot disagree. The flow of one job's budget (docs/design.md "The budget"):

    cfg + backend --iteration_spec--> IterationSpec --solve--> BudgetPlan (T, planned ledger)
    at run time:  spent, worst case of the next prompts --prompts_that_fit--> run b prompts or stop

One rule, used by the plan and the job alike:

- An iteration takes B = grpo.prompts_per_iter prompts x G completions, all scored; the update
  runs on B x m of them (grpo.update_group_size m <= G, rollout down-sampling; m = G by default),
  so rollout and reward are charged for G and the update for m. The plan costs it at
  the expected lengths (task.prompt_tokens, rollout.expected_completion_tokens), through
  `race_cli.cost.flops.iteration_flops` (model-convention FLOPs).
- T: as many full iterations as fit C = budget.flops, at most budget.max_iterations; then,
  unless the cap was reached, one last smaller iteration with the most prompts (< B) that fit
  what is left, so a job with few iterations still spends its whole budget. A budget that
  does not buy one full iteration is refused (`check_fits`).
- Live, before each iteration the job takes the most prompts (<= B) whose worst case (their
  real prompt lengths, max_new_tokens completions) fits what is left of C; it stops when not
  one prompt fits (stop reason "budget") or after budget.max_iterations ("iterations").

The update fraction is called `p` everywhere (p = learning FLOPs / training FLOPs).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from race_cli.errors import RaceError
from race_cli.cost.flops import Arch, Flops, Lora, iteration_flops

PHASES = ("rollout", "update", "reward")  # the three phases charged to the budget
SHARE_NAMES = {"rollout": "search", "update": "learning", "reward": "feedback"}  # phase -> share name
BACKENDS = ("hf", "lean", "vllm")


# --- choices the plan and the job must make alike ------------------------------------------------


def resolve_backend(requested: str, *, on_gpu: bool, vllm_installed: bool, lora: bool = True) -> str:
    """The rollout backend a job samples with: `auto` -> vllm on a GPU with vLLM installed (and a LoRA
    policy: vLLM takes adapters, not a full copy of the weights after every update), else lean.

    `hf`, `lean` and `vllm` are taken as given (whether vLLM can run is checked when the job
    builds it). The backend decides the rollout's cost: lean (engine/rollout_lean.py) and vLLM
    prefill each prompt once per group, vLLM runs unpadded kernels, HF `generate` pads and
    prefills every row.
    """
    if requested == "auto":
        return "vllm" if (on_gpu and vllm_installed and lora) else "lean"
    if requested in BACKENDS:
        return requested
    raise RaceError(f"rollout.backend={requested!r} is unknown: expected auto, lean, hf or vllm.")


def job_backend(cfg: Mapping, *, on_gpu: bool, vllm_installed: bool) -> str:
    """`resolve_backend` for a composed job config (its rollout.backend and lora.enabled): what the plan,
    the memory plan and the job all call, with the machine's answers (race_cli.machine) as arguments."""
    return resolve_backend(cfg["rollout"]["backend"], on_gpu=on_gpu, vllm_installed=vllm_installed,
                           lora=bool(cfg["lora"]["enabled"]))


def reward_name(cfg: Mapping) -> str:
    """The reward system's one name in plans, summaries, reports, CSV columns and plots: `rule`, or the
    reward model's name, which the shipped configs set to their config group option (reward=prm-7b: `prm-7b`)."""
    r = cfg["reward"]
    return "rule" if r["type"] == "rule" else str((r.get("model") or {}).get("name", "?"))


# Names sweeps wrote before the reward systems had one name each: `prm:<reward model name>`, with the
# shipped models named tiny-prm and qwen2.5-math-prm-7b (also what a job planned then and resumed now
# writes: its saved config keeps the old model name). A report reads them as today's names.
LEGACY_REWARD_NAMES = {"prm:tiny-prm": "prm", "prm:qwen2.5-math-prm-7b": "prm-7b", "tiny-prm": "prm",
                       "qwen2.5-math-prm-7b": "prm-7b"}


def reward_label(text: Any) -> Any:
    """A reward name as a sweep folder holds it, in today's form (old `prm:<name>` ones mapped or unprefixed)."""
    if not isinstance(text, str):
        return text
    return LEGACY_REWARD_NAMES.get(text, text[4:] if text.startswith("prm:") else text)


def reward_head(cfg: Mapping) -> str:
    """The head the reward model runs at every position: `classifier` (num_labels outputs) or `token` (LM head)."""
    return "classifier" if (cfg["reward"].get("model") or {}).get("format") == "classifier" else "token"


def completion_estimate(cfg: Mapping) -> float:
    """Planned mean completion length: rollout.expected_completion_tokens, else max_new_tokens."""
    ect = cfg["rollout"].get("expected_completion_tokens")
    return float(ect if ect is not None else cfg["rollout"]["max_new_tokens"])


# --- one iteration ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class IterationSpec:
    """Everything the cost of one GRPO iteration depends on, but the lengths of its prompts and completions."""

    policy: Arch
    lora: Lora | None  # None = full fine-tuning
    prompts: int  # B, prompts of a full iteration
    group_size: int  # G
    updates_per_batch: int  # mu
    beta: float  # > 0 adds the reference forward
    grad_checkpointing: bool
    share_prefix: bool  # the backend prefills a group's prompt once (lean, vLLM)
    padded: bool  # its kernels run on padded rows (HF, lean; not vLLM): the executed convention
    reward: Arch | None  # None = rule reward (0 FLOPs)
    reward_head: str  # classifier | token
    prompt_tokens: float  # planned mean prompt length
    completion_tokens: float  # planned mean completion length
    max_new_tokens: int  # the completion cap: the worst case
    trained_share: float = 1.0  # planned share of rows the update runs on (informative_share)
    update_group_size: int | None = None  # m: completions per prompt the update keeps (None = G)

    def cost(self, prompts: int | None = None, *, prompt_len: float | None = None,
             completion_len: float | None = None, trained_share: float | None = None) -> dict[str, Flops]:
        """FLOPs per phase of one iteration of `prompts` prompts (default B) at these lengths and this share of
        rows updated on (default: planned)."""
        return iteration_flops(
            self.policy, prompts=self.prompts if prompts is None else prompts, group_size=self.group_size,
            prompt_len=self.prompt_tokens if prompt_len is None else prompt_len,
            completion_len=self.completion_tokens if completion_len is None else completion_len,
            updates_per_batch=self.updates_per_batch, lora=self.lora, beta=self.beta,
            grad_checkpointing=self.grad_checkpointing, share_prefix=self.share_prefix, padded=self.padded,
            reward=self.reward, reward_head=self.reward_head,
            trained_share=self.trained_share if trained_share is None else trained_share,
            update_group_size=self.update_group_size)

    def worst_case(self, prompts: int, longest_prompt: float) -> float:
        """Model FLOPs `prompts` prompts of at most `longest_prompt` tokens can cost: every completion at the cap,
        every row updated on (so the live stop rule keeps the job within budget whatever the rewards)."""
        return total(self.cost(prompts, prompt_len=longest_prompt, completion_len=self.max_new_tokens,
                               trained_share=1.0))


def iteration_spec(cfg: Mapping, backend: str) -> IterationSpec:
    """The iteration of a composed config (plain dict) sampled with `backend` (hf | vllm, see resolve_backend)."""
    if backend not in BACKENDS:
        raise RaceError(f"backend {backend!r} is not resolved: expected hf, lean or vllm (resolve_backend turns auto into one).")
    g, lc, r = cfg["grpo"], cfg["lora"], cfg["reward"]
    lora = Lora(r=lc["r"], target_modules=tuple(lc["target_modules"])) if lc["enabled"] else None
    return IterationSpec(
        policy=Arch.from_config(cfg["model"]["arch"]), lora=lora, prompts=g["prompts_per_iter"],
        group_size=g["group_size"], updates_per_batch=g["updates_per_batch"], beta=g["beta"],
        grad_checkpointing=g["grad_checkpointing"], share_prefix=backend in ("lean", "vllm"), padded=backend != "vllm",
        reward=Arch.from_config(r["model"]["arch"]) if r["type"] == "prm" else None, reward_head=reward_head(cfg),
        prompt_tokens=float(cfg["task"]["prompt_tokens"]), completion_tokens=completion_estimate(cfg),
        max_new_tokens=int(cfg["rollout"]["max_new_tokens"]), trained_share=informative_share(cfg),
        update_group_size=None if g.get("update_group_size") is None else int(g["update_group_size"]))


# Measured share of the rows the update ran on (nonzero advantage: ledger rows.trained / rows.total) on the
# default grid (conf/grid/tiny.yaml: G=4, arithmetic, mu 1/2/4 x 2 seeds): what the plan assumes when
# grpo.expected_informative_share is null, per (reward type, model), else per reward type (the mean over its
# regimes). `race plan --informative-from SWEEP` reads a finished sweep's own, per regime.
INFORMATIVE_SHARE = {"rule": 0.44, "prm": 0.76}
INFORMATIVE_SHARE_BY_MODEL = {("rule", "tiny-s"): 0.37, ("rule", "tiny-m"): 0.50,  # mu 1/2/4: 0.378/0.370/0.364,
                              ("prm", "tiny-s"): 0.78, ("prm", "tiny-m"): 0.74}  # 0.523/0.484/0.506; prm 0.73-0.78


def informative_share(cfg: Mapping) -> float:
    """Planned share of the rows the update runs on: 1 when every row runs (beta > 0, or skipping off),
    else grpo.expected_informative_share, else the measured default of the reward type."""
    g = cfg["grpo"]
    if float(g["beta"]) > 0 or not g.get("skip_zero_advantage", True):
        return 1.0
    if g.get("expected_informative_share") is not None:
        return float(g["expected_informative_share"])
    kind = "rule" if cfg["reward"]["type"] == "rule" else "prm"
    return INFORMATIVE_SHARE_BY_MODEL.get((kind, cfg["model"]["name"]), INFORMATIVE_SHARE[kind])


def total(per_phase: Mapping[str, Flops]) -> float:
    """Model-convention FLOPs of all phases."""
    return sum(per_phase[p].model for p in PHASES)


# --- the solver ------------------------------------------------------------------------------------


def prompts_that_fit(remaining: float, cost_of: Callable[[int], float], most: int) -> int:
    """The largest b in 0..most with cost_of(b) <= remaining; cost_of must grow with b (bisection).
    One call when all `most` fit (every iteration but the last few)."""
    if cost_of(most) <= remaining:
        return most
    lo, hi = 0, most - 1  # cost_of(lo) fits (0 prompts cost nothing); find the last b that fits
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if cost_of(mid) <= remaining:
            lo = mid
        else:
            hi = mid - 1
    return lo


@dataclass(frozen=True)
class BudgetPlan:
    """The planned ledger of one job: T iterations, the last one with `last_prompts` prompts."""

    budget: float  # C
    full_iterations: int  # iterations of B prompts
    last_prompts: int  # prompts of one extra, smaller last iteration (0 = none)
    capped: bool  # T was cut at budget.max_iterations: the job will not spend C
    per_iteration: dict[str, Flops]  # one full iteration, per phase
    last_iteration: dict[str, Flops]  # the smaller last iteration (zeros when none)
    spec: IterationSpec

    @property
    def iterations(self) -> int:
        """T, the smaller last iteration included."""
        return self.full_iterations + (1 if self.last_prompts else 0)

    @property
    def prompts(self) -> int:
        return self.full_iterations * self.spec.prompts + self.last_prompts

    def flops(self) -> dict[str, Flops]:
        """Planned FLOPs of all T iterations, per phase."""
        return {p: self.per_iteration[p] * self.full_iterations + self.last_iteration[p] for p in PHASES}

    def ledger(self) -> dict[str, Any]:
        """The `planned` section of ledger.json (docs/files.md): model and executed FLOPs, tokens."""
        fl = self.flops()
        model = {p: fl[p].model for p in PHASES}
        executed = {p: fl[p].executed for p in PHASES}
        seqs = self.prompts * self.spec.group_size
        return {"iterations": self.iterations, "prompts": self.prompts, "last_iteration_prompts": self.last_prompts,
                "flops": model | {"total": sum(model.values())},
                "executed_flops": executed | {"total": sum(executed.values())},
                "tokens": {"prompt": seqs * self.spec.prompt_tokens, "completion": seqs * self.spec.completion_tokens}}


def solve(spec: IterationSpec, budget: float, max_iterations: int) -> BudgetPlan:
    """T for budget C: full iterations while they fit (at most max_iterations), then the most prompts that fit."""
    full_cost = spec.cost()
    per = total(full_cost)
    if per <= 0:
        raise RaceError("An iteration was planned at 0 FLOPs: the model architecture looks empty.")
    n = int(math.floor(budget / per))
    while n > 0 and n * per > budget:  # float rounding at the boundary
        n -= 1
    capped = n >= max_iterations
    n = min(n, max_iterations)
    b = 0
    if not capped and n >= 1:
        left = budget - n * per
        b = prompts_that_fit(left, lambda k: total(spec.cost(k)), spec.prompts - 1)
    last = spec.cost(b) if b else {p: Flops() for p in PHASES}
    return BudgetPlan(budget=float(budget), full_iterations=n, last_prompts=b, capped=capped,
                      per_iteration=full_cost, last_iteration=last, spec=spec)


def plan_budget(cfg: Mapping, backend: str) -> BudgetPlan:
    """The budget plan of a composed config (plain dict) whose rollouts run on `backend`."""
    return solve(iteration_spec(cfg, backend), float(cfg["budget"]["flops"]), int(cfg["budget"]["max_iterations"]))


def check_fits(plan: BudgetPlan) -> str | None:
    """The problem when the budget does not buy one full iteration (None when it does)."""
    if plan.full_iterations >= 1:
        return None
    per, c, s = total(plan.per_iteration), plan.budget, plan.spec
    return (f"budget.flops={c:.3g} is smaller than one iteration ({per:.3g} FLOPs: B={s.prompts} prompts x "
            f"G={s.group_size} completions of ~{s.completion_tokens:g} tokens, mu={s.updates_per_batch}), short by "
            f"{per - c:.3g} ({per / c:.1f}x the budget). Raise budget.flops or shrink grpo.prompts_per_iter / "
            "grpo.group_size / rollout.expected_completion_tokens.")


# --- shares ----------------------------------------------------------------------------------------


def shares(flops: Mapping[str, float]) -> dict[str, float]:
    """Fractions of the training FLOPs per phase: search, learning, feedback and p (= learning).

    `flops` maps phases to model FLOPs (a `total` key is ignored). With no FLOPs spent the
    shares are undefined: NaN (written as null in JSON).
    """
    spent = sum(float(flops.get(p) or 0.0) for p in PHASES)
    if spent <= 0:
        out = {SHARE_NAMES[p]: math.nan for p in PHASES}
    else:
        out = {SHARE_NAMES[p]: float(flops.get(p) or 0.0) / spent for p in PHASES}
    return out | {"p": out["learning"]}


# --- the live ledger -------------------------------------------------------------------------------


def _zeros() -> dict[str, Flops]:
    return {p: Flops() for p in PHASES}


@dataclass
class Ledger:
    """What a job has spent so far: FLOPs (model and executed), seconds and tokens per phase, evaluation apart."""

    iterations: int = 0
    prompts: int = 0  # prompts trained on (B per full iteration, fewer in the last ones)
    flops: dict[str, Flops] = field(default_factory=_zeros)
    seconds: dict[str, float] = field(default_factory=lambda: {p: 0.0 for p in PHASES} | {"total": 0.0})
    tokens: dict[str, int] = field(default_factory=lambda: {"prompt": 0, "completion": 0})
    rows: dict[str, int] = field(default_factory=lambda: {"total": 0, "trained": 0})  # sequences sampled / updated on
    eval_flops: Flops = field(default_factory=Flops)  # held-out evaluation: recorded, never charged
    eval_seconds: float = 0.0
    eval_runs: int = 0
    eval_targets: dict[str, dict] = field(default_factory=dict)  # per target: flops, executed_flops, seconds, items

    def add(self, phase: str, flops: Flops, seconds: float) -> None:
        """Charge one phase of the current iteration."""
        if phase not in PHASES:
            raise RaceError(f"phase {phase!r} is unknown: expected one of {', '.join(PHASES)}.")
        self.flops[phase] = self.flops[phase] + flops
        self.seconds[phase] += seconds

    def add_eval(self, flops: Flops, seconds: float, target: str | None = None, items: int = 0) -> None:
        """Record evaluation work (never charged); with `target`, also in that target's own sums."""
        self.eval_flops = self.eval_flops + flops
        self.eval_seconds += seconds
        if target is not None:
            mine = self.eval_targets.setdefault(target, {"flops": 0.0, "executed_flops": 0.0, "seconds": 0.0,
                                                         "items": items})
            mine["flops"] += flops.model
            mine["executed_flops"] += flops.executed
            mine["seconds"] += seconds

    def end_eval(self) -> None:
        """One evaluation point (every target) is complete."""
        self.eval_runs += 1

    def spent(self) -> float:
        """Model-convention FLOPs charged to the budget so far."""
        return total(self.flops)

    def model_flops(self) -> dict[str, float]:
        return {p: self.flops[p].model for p in PHASES}

    def shares(self) -> dict[str, float]:
        return shares(self.model_flops())

    def informative_share(self) -> float | None:
        """Share of the sampled rows the update ran on (nonzero advantage, or all with beta > 0); None before any."""
        return self.rows["trained"] / self.rows["total"] if self.rows["total"] else None

    def actual(self) -> dict[str, Any]:
        """The `actual` section of ledger.json (docs/files.md)."""
        model, executed = self.model_flops(), {p: self.flops[p].executed for p in PHASES}
        return {"iterations": self.iterations, "prompts": self.prompts, "flops": model | {"total": sum(model.values())},
                "executed_flops": executed | {"total": sum(executed.values())},
                "tokens": dict(self.tokens), "rows": dict(self.rows), "seconds": dict(self.seconds)}

    def eval_json(self) -> dict[str, Any]:
        return {"flops": self.eval_flops.model, "executed_flops": self.eval_flops.executed,
                "seconds": self.eval_seconds, "runs": self.eval_runs,
                "targets": {t: dict(v) for t, v in self.eval_targets.items()}}

    def to_json(self) -> dict[str, Any]:
        """Everything, exactly (the checkpoint keeps it so a resumed job continues the same sums)."""
        return {"iterations": self.iterations, "prompts": self.prompts,
                "flops": {p: self.flops[p].to_dict() for p in PHASES},
                "seconds": dict(self.seconds), "tokens": dict(self.tokens), "rows": dict(self.rows),
                "eval": {"flops": self.eval_flops.to_dict(), "seconds": self.eval_seconds, "runs": self.eval_runs,
                         "targets": {t: dict(v) for t, v in self.eval_targets.items()}}}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Ledger":
        ev = d["eval"]
        return cls(iterations=int(d["iterations"]), prompts=int(d.get("prompts", 0)), flops={p: Flops(**d["flops"][p]) for p in PHASES},
                   seconds={k: float(v) for k, v in d["seconds"].items()},
                   tokens={k: int(v) for k, v in d["tokens"].items()},
                   rows={k: int(v) for k, v in (d.get("rows") or {"total": 0, "trained": 0}).items()}, eval_flops=Flops(**ev["flops"]),
                   eval_seconds=float(ev["seconds"]), eval_runs=int(ev["runs"]),
                   eval_targets={t: dict(v) for t, v in (ev.get("targets") or {}).items()})


def with_policy(spec: IterationSpec, policy: Arch, lora: Lora | None) -> IterationSpec:
    """The same iteration on the loaded model's shapes (the live ledger charges what really ran)."""
    return replace(spec, policy=policy, lora=lora)
