"""Build the zoo's process reward model: a policy's body plus a 2-label head, fitted on corrupted solutions.

Training data: arithmetic solutions written as the policy writes them (`" " + solution`), half
of them corrupted in one line: a step's result off by ±1, ±2, ±10, ±20 or a random value, with
the later steps computed consistently from the wrong value (or only the final `#### N` line
wrong). Label 1 = "every step so far is correct": lines before the error 1, the erroneous line
and all after it 0.

The text and the read-out positions come from `race_cli.rewards.prm.ProcessRewardModel.encode`
with its default settings (template "{question}\\n{completion}", separator "\\n", no step tag,
read at each step's newline and at the completion's last character), i.e. exactly what the
scoring code feeds the model during `race run`. Held-out step-level AUC is measured through
`ProcessRewardModel.score` on questions from the evaluation set.

Known limitation (measured): a PRM trained from scratch for a minute learns only the step position
(AUC ~0.67, ../shared/notes/tiny-zoo-trial.md), and warm-starting from tiny-s's body does not fix it
within a few hundred steps either (~0.69), nor do dense per-token labels, two fresh layers stacked on
the body (`extra_layers`), or the policy's own prompt layout as template: all plateau at 0.67-0.69,
while tiny-s's own teacher-forced log-probs separate the same steps at AUC 0.92. recipe.json records
`meets_target` against the recipe's `target_auc`.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

from race_cli.tasks.arithmetic import Step, solve
from race_cli.zoo.fit import Progress
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


def stacked_classifier(base_dir: Path, num_labels: int, extra_layers: int):
    """A token classifier: the policy's embeddings and layers, then `extra_layers` fresh layers, then the head.

    The policy's last layer holds its next-token prediction at every position, but a classifier
    read at a step's newline only sees earlier positions through the *next* layer's attention:
    the fresh layers are where "the digit written here is not the one predicted before it" can
    be computed and gathered at the newline. Their output projections (o_proj, down_proj) start
    at zero, so the stacked model starts as the policy body (residual identity).
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, Qwen2ForTokenClassification

    base = AutoModelForCausalLM.from_pretrained(base_dir)
    config = AutoConfig.from_pretrained(base_dir)
    config.num_hidden_layers += extra_layers
    config.num_labels = num_labels
    config.architectures = ["Qwen2ForTokenClassification"]
    if hasattr(config, "layer_types") and config.layer_types is not None:
        config.layer_types = [config.layer_types[0]] * config.num_hidden_layers
    model = Qwen2ForTokenClassification(config)
    missing, unexpected = model.model.load_state_dict(base.model.state_dict(), strict=False)
    fresh = {f"layers.{i}." for i in range(config.num_hidden_layers - extra_layers, config.num_hidden_layers)}
    if unexpected or any(not any(k.startswith(f) for f in fresh) for k in missing):
        raise AssertionError(f"policy body did not load: missing {missing}, unexpected {unexpected}")
    with torch.no_grad():
        for layer in model.model.layers[config.num_hidden_layers - extra_layers:]:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
    return model


def heldout_examples(recipe: dict[str, Any]) -> list[tuple[str, str, list[int]]]:
    """The PRM's held-out set: evaluation questions (never trained on), corrupted with seed + 1."""
    from race_cli.tasks.arithmetic import ArithmeticTask

    task = ArithmeticTask(seed=recipe["seed"], **recipe["task"])
    questions = [it.question for it in task.eval_items()]
    questions = questions * max(1, recipe["fit"]["num_heldout"] // len(questions))
    return make_examples(questions, random.Random(recipe["seed"] + 1), recipe["fit"]["corrupt_frac"])


def build_prm(recipe: dict[str, Any], base_dir: Path, out: Path, progress: Progress | None = None) -> dict:
    """Fit the PRM of `recipe` starting from the policy saved in `base_dir`; save it into `out`."""
    import torch
    import torch.nn.functional as F

    from race_cli.rewards.prm import ProcessRewardModel
    from race_cli.tasks.arithmetic import ArithmeticTask
    from race_cli.zoo.tokenizer import byte_tokenizer

    f, seed = recipe["fit"], recipe["seed"]
    tok = byte_tokenizer()
    torch.manual_seed(seed)
    model = stacked_classifier(base_dir, recipe["num_labels"], recipe.get("extra_layers", 0))
    model.config.id2label, model.config.label2id = {0: "wrong", 1: "correct"}, {"wrong": 0, "correct": 1}
    template = {"template": recipe["template"]} if recipe.get("template") else {}  # None: the scoring code's default
    scorer = ProcessRewardModel(model, tok, format="classifier", batch_size=256, **template)

    task = ArithmeticTask(seed=seed, **recipe["task"])
    rng = random.Random(seed)
    train = make_examples([it.question for it in task.train_items()], rng, f["corrupt_frac"])
    heldout = heldout_examples(recipe)
    encoded = []
    for q, c, y in train:
        ids, pos = scorer.encode(q, c)
        if len(pos) != len(y):
            raise AssertionError(f"PRM encode read {len(pos)} steps in {c!r}, expected {len(y)}")
        encoded.append((ids, pos, y))

    opt = torch.optim.AdamW(model.parameters(), lr=f["lr"], betas=(0.9, 0.98), weight_decay=0.0)
    t0, order, history, step, loss_ema = time.perf_counter(), [], [], 0, float("nan")
    score = heldout_auc(scorer, heldout)
    history.append({"step": 0, "auc": round(score, 4)})
    while step < f["max_steps"] and score < f["stop_auc"]:
        step += 1
        if len(order) < f["batch_size"]:
            order += rng.sample(range(len(encoded)), len(encoded))
        batch, order = [encoded[i] for i in order[: f["batch_size"]]], order[f["batch_size"] :]
        for g in opt.param_groups:
            g["lr"] = f["lr"] * min(1.0, step / max(1, f["warmup_steps"]))
        T = max(len(ids) for ids, _, _ in batch)
        ids = torch.full((len(batch), T), EOS_ID, dtype=torch.long)  # right padding: causal, no mask needed
        rows, cols, labels = [], [], []
        for r, (seq, pos, y) in enumerate(batch):
            ids[r, : len(seq)] = torch.tensor(seq)
            rows += [r] * len(pos)
            cols += pos
            labels += y
        model.train()
        logits = model(input_ids=ids).logits[torch.tensor(rows), torch.tensor(cols)]  # [n_steps, 2]
        loss = F.cross_entropy(logits.float(), torch.tensor(labels))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss_ema = loss.item() if loss_ema != loss_ema else 0.9 * loss_ema + 0.1 * loss.item()
        if step % f["monitor_every"] == 0:
            score = heldout_auc(scorer, heldout)
            history.append({"step": step, "loss": round(loss_ema, 4), "auc": round(score, 4),
                            "seconds": round(time.perf_counter() - t0, 1)})
        if progress is not None:
            progress(step, {"loss": loss_ema, "auc": score})
    model.eval()
    score = heldout_auc(scorer, heldout)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return {"steps": step, "loss": round(loss_ema, 4), "auc": score, "history": history,
            "heldout_steps": sum(len(y) for _, _, y in heldout), "params": sum(p.numel() for p in model.parameters()),
            "fit_seconds": round(time.perf_counter() - t0, 1), "meets_target": score >= f["target_auc"],
            "input_format": {"template": scorer.template, "separator": scorer.separator, "step_tag": scorer.step_tag,
                             "completion": "' ' + solution lines joined by '\\n'", "read_at": "each step's '\\n' and the last character"}}
