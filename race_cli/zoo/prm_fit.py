"""Build the zoo's process reward model: a causal LM verifier, calibrated on correct and corrupted steps.

The tiny PRM uses the `logprob` format of `race_cli.rewards.prm`: a step's feature is the lowest
teacher-forced log-probability of any completion token up to the step's end, read by a causal LM
that knows the arithmetic; its score is sigmoid(scale * feature + bias). The LM starts from tiny-s
and is trained `sft_steps` further on correct solutions (a stronger model than the policy it
judges); scale and bias are fitted by logistic regression on the steps of correct and corrupted
solutions of training questions. The PRM reads the completion in the policy's own prompt layout
(`template`), so the prompt's tokens are as expected.

Corrupted solutions: one line wrong — a step's result off by ±1, ±2, ±10, ±20 or a random value,
later steps computed consistently from the wrong value, or only the final `#### N` line. Label 1
= "every step so far is correct": lines before the error 1, the erroneous line and all after 0.

Why not a classifier head: a token-classification head on tiny-s's body stays at the step-position
baseline, while the same LM's calibrated log-probs in the policy's prompt layout separate correct
from corrupted steps well (docs/measurements/code.md).
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

from race_cli.tasks.arithmetic import Step, solve
from race_cli.zoo.warmstart import Progress
from race_cli.zoo.tokenizer import EOS_ID

OFFSETS = (1, 2, 10, 20)  # off-by sizes of an injected error, either sign; plus "random"


def solution_lines(steps: list[Step], final: int) -> list[str]:
    return [f"{a}{op}{b}={r}" for a, op, b, r in steps] + [f"#### {final}"]


def corrupt(steps: list[Step], rng: random.Random) -> tuple[list[str], int]:
    """Solution lines with one injected error, and the index of the first wrong line.

    The wrong line is any step or the final answer line; later steps start from the wrong value.
    """
    k = rng.randrange(len(steps) + 1)
    right = steps[k][3] if k < len(steps) else steps[-1][3]
    kind = rng.choice(OFFSETS + ("random",))
    wrong = right
    while wrong == right:
        wrong = rng.randint(-120, 220) if kind == "random" else right + rng.choice((-1, 1)) * kind
    if k == len(steps):
        return solution_lines(steps, wrong), k
    out = list(steps[:k]) + [(steps[k][0], steps[k][1], steps[k][2], wrong)]
    value = wrong
    for _, op, b, _ in steps[k + 1 :]:
        r = value + b if op == "+" else value - b
        out.append((value, op, b, r))
        value = r
    return solution_lines(out, value), k


def make_examples(questions: list[str], rng: random.Random, corrupt_frac: float) -> list[tuple[str, str, list[int]]]:
    """(question, completion, per-line labels) for each question, a `corrupt_frac` share corrupted."""
    out = []
    for q in questions:
        steps = solve(q)
        if rng.random() < corrupt_frac:
            lines, k = corrupt(steps, rng)
            labels = [1 if i < k else 0 for i in range(len(lines))]
        else:
            lines, labels = solution_lines(steps, steps[-1][3]), [1] * (len(steps) + 1)
        out.append((q, " " + "\n".join(lines), labels))
    return out


def auc(scores: list[float], labels: list[int]) -> float:
    """Area under the ROC curve (Mann-Whitney U with tied scores given their average rank)."""
    order = sorted(range(len(scores)), key=lambda i: scores[i])
    ranks = [0.0] * len(scores)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and scores[order[j + 1]] == scores[order[i]]:
            j += 1
        for t in range(i, j + 1):
            ranks[order[t]] = (i + j) / 2 + 1  # 1-based average rank of the tie group
        i = j + 1
    pos = sum(labels)
    neg = len(labels) - pos
    if pos == 0 or neg == 0:
        raise ValueError("AUC needs both positive and negative labels")
    return (sum(r for r, y in zip(ranks, labels) if y) - pos * (pos + 1) / 2) / (pos * neg)


def heldout_auc(scorer, examples: list[tuple[str, str, list[int]]]) -> float:
    """Step-level AUC of `scorer` (a ProcessRewardModel) on labelled examples."""
    scores = scorer.score([q for q, _, _ in examples], [c for _, c, _ in examples])
    flat_s, flat_y = [], []
    for s, (_, _, y) in zip(scores, examples):
        if len(s) != len(y):
            raise AssertionError(f"PRM read {len(s)} steps where the example has {len(y)} lines")
        flat_s += s
        flat_y += y
    return auc(flat_s, flat_y)


def heldout_examples(recipe: dict[str, Any]) -> list[tuple[str, str, list[int]]]:
    """The PRM's held-out set: evaluation questions (never trained on), corrupted with seed + 1."""
    from race_cli.tasks.arithmetic import ArithmeticTask
    from race_cli.zoo.recipes import sft_task_args

    task = ArithmeticTask(**sft_task_args(recipe))
    questions = [it.question for it in task.eval_items()]
    questions = questions * max(1, recipe["fit"]["num_heldout"] // len(questions))
    return make_examples(questions, random.Random(recipe["seed"] + 1), recipe["fit"]["corrupt_frac"])


def fit_calibration(features: list[float], labels: list[int], iters: int = 50) -> dict[str, float]:
    """Logistic regression P(label 1) = sigmoid(scale * feature + bias) by Newton's method (2 parameters)."""
    import numpy as np

    x = np.asarray(features, float)
    y = np.asarray(labels, float)
    X = np.stack([x, np.ones_like(x)], axis=1)  # [n, 2]
    w = np.zeros(2)
    for _ in range(iters):
        p = 1.0 / (1.0 + np.exp(-(X @ w)))
        grad = X.T @ (p - y)
        hess = X.T @ (X * (p * (1 - p))[:, None]) + 1e-6 * np.eye(2)
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-9:
            break
    return {"scale": float(w[0]), "bias": float(w[1])}


def build_prm(recipe: dict[str, Any], base_dir: Path, out: Path, progress: Progress | None = None) -> dict:
    """Train the verifier LM from the policy in `base_dir`, fit its calibration, save it into `out`."""
    import torch
    from transformers import AutoModelForCausalLM

    from race_cli.rewards.prm import ProcessRewardModel
    from race_cli.rewards.rule import rule_reward
    from race_cli.tasks.arithmetic import ArithmeticTask
    from race_cli.zoo.recipes import sft_task_args
    from race_cli.tasks.prompting import format_prompt
    from race_cli.zoo.warmstart import FitConfig, encode_examples, fit_policy
    from race_cli.zoo.policy import completion_of
    from race_cli.zoo.tokenizer import byte_tokenizer

    f, seed = recipe["fit"], recipe["seed"]
    t0 = time.perf_counter()
    tok = byte_tokenizer()
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(base_dir)

    # --- a stronger verifier: more supervised steps on correct solutions (another data order)
    task = ArithmeticTask(**sft_task_args(recipe, offset=1))
    train, evals = task.train_items(), task.eval_items()
    train_ex = encode_examples(tok, [format_prompt(it, tok) for it in train], [completion_of(it.solution) for it in train])
    eval_prompts = [format_prompt(it, tok) for it in evals]
    eval_ex = encode_examples(tok, eval_prompts, [completion_of(it.solution) for it in evals])
    cfg = FitConfig(batch_size=f["batch_size"], lr=f["lr"], warmup_steps=f["warmup_steps"], max_steps=f["sft_steps"],
                    stop_at=2.0, monitor_every=f["sft_steps"] + 1, seed=seed + 1)  # stop_at > 1: run every step
    sft = fit_policy(model, tok, train_ex, eval_ex, eval_prompts, [it.answer for it in evals], rule_reward, cfg, progress)

    # --- calibration on training questions' steps, held-out AUC on evaluation questions
    from race_cli.zoo.recipes import policy_template

    template = policy_template() if recipe.get("template") == "policy" else recipe.get("template") or None
    scorer = ProcessRewardModel(model, tok, format="logprob", batch_size=256,
                                **({"template": template} if template else {}))
    calib = make_examples([it.question for it in train[: f["calib_examples"]]], random.Random(seed), f["corrupt_frac"])
    feats = scorer.features([q for q, _, _ in calib], [c for _, c, _ in calib])
    flat_f = [v for row in feats for v in row]
    flat_y = [v for _, _, y in calib for v in y]
    model.config.prm_calibration = fit_calibration(flat_f, flat_y)
    model.config.prm_format = "logprob"
    model.config.prm_template = scorer.template
    heldout = heldout_examples(recipe)
    score = heldout_auc(scorer, heldout)
    model.generation_config.pad_token_id = EOS_ID
    model.generation_config.eos_token_id = EOS_ID
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return {"steps": sft["steps"], "loss": sft["loss"], "greedy": sft["greedy"], "first_losses": sft["first_losses"], "auc": score,
            "calibration": model.config.prm_calibration, "calibration_auc": auc(flat_f, flat_y),
            "heldout_steps": sum(len(y) for _, _, y in heldout), "params": sum(p.numel() for p in model.parameters()),
            "fit_seconds": round(time.perf_counter() - t0, 1), "meets_target": score >= f["target_auc"],
            "input_format": {"format": "logprob", "template": scorer.template, "separator": scorer.separator,
                             "completion": "' ' + solution lines joined by '\\n'",
                             "read_at": "each step's '\\n' and the last character"}}
