"""Build one zoo policy: a fresh Qwen2 causal LM from its recipe, warm-started on the arithmetic task.

The policy is trained on exactly what `race run` will show it: `format_prompt(item, tokenizer)`
(the plain prompt, since the byte tokenizer has no chat template) followed by the completion
`" " + solution` and eos. Held-out figures: greedy accuracy (the stopping criterion) and
sampled accuracy at temperature 1, both scored by the rule reward on the 200 eval items.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from race_cli.zoo.warmstart import FitConfig, Progress, accuracy, encode_examples, fit_policy
from race_cli.zoo.tokenizer import EOS_ID, byte_tokenizer


def new_model(arch: dict[str, Any], seed: int, cls_name: str = "Qwen2ForCausalLM", **extra):
    """A randomly initialised Qwen2 model of shape `arch`, deterministic in `seed`."""
    import torch
    import transformers

    torch.manual_seed(seed)
    config = transformers.Qwen2Config(**arch, bos_token_id=EOS_ID, eos_token_id=EOS_ID, pad_token_id=EOS_ID, **extra)
    return getattr(transformers, cls_name)(config)


def completion_of(solution: str) -> str:
    """What the policy writes after the prompt's 'A:': a space, then the worked solution."""
    return " " + solution


def build_policy(recipe: dict[str, Any], out: Path, progress: Progress | None = None) -> dict:
    """Train the policy of `recipe` and save model + tokenizer into `out`; returns the measured figures."""
    from race_cli.rewards.rule import rule_reward
    from race_cli.tasks.arithmetic import ArithmeticTask
    from race_cli.zoo.recipes import sft_task_args
    from race_cli.tasks.prompting import format_prompt

    tok = byte_tokenizer()
    task = ArithmeticTask(**sft_task_args(recipe))
    train, evals = task.train_items(), task.eval_items()
    train_ex = encode_examples(tok, [format_prompt(it, tok) for it in train], [completion_of(it.solution) for it in train])
    eval_prompts = [format_prompt(it, tok) for it in evals]
    eval_ex = encode_examples(tok, eval_prompts, [completion_of(it.solution) for it in evals])
    golds = [it.answer for it in evals]
    f = dict(recipe["fit"])
    cfg = FitConfig(**{**f, "band": tuple(f.get("band", (0.2, 0.5))), "seed": recipe["seed"]})

    model = new_model(recipe["arch"], recipe["seed"])
    figures = fit_policy(model, tok, train_ex, eval_ex, eval_prompts, golds, rule_reward, cfg, progress)
    figures["sampled"] = accuracy(model, tok, eval_prompts, golds, rule_reward, cfg.max_new_tokens,
                                  temperature=1.0, seed=recipe["seed"])
    figures["in_band"] = cfg.band[0] <= figures["greedy"] <= cfg.band[1]
    figures["params"] = sum(p.numel() for p in model.parameters())
    model.generation_config.pad_token_id = EOS_ID
    model.generation_config.eos_token_id = EOS_ID
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return figures
