"""The GRPO engine behind `race train`: one budget-matched job end to end.

grpo.py        pure advantage / loss functions (tensors in, tensors out)
rollout.py     sampling backends (HF generate, vLLM) and what they cost
setup.py       building device, task, prompts, reward, policy and the plan from a config
checkpoint.py  atomic checkpoints and resume
job.py         the job loop: rollout -> reward -> update, ledger, evaluation, files
command.py     `train_main`, what `race train` calls
"""
