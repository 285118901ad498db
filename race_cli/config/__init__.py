"""What a job is. Nothing here imports torch.

schema.py    the typed schema: every key, its default and its meaning
domains.py   each key's domain (type, bounds, choices, null), checked in one place
compose.py   Hydra composition of conf/ with overrides, errors explained
sweep.py     the sweep syntax, job ids and typed overrides
derive.py    settings taken from what they depend on (task, model, target) when the root leaves them null
"""
