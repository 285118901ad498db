"""What a job is: the typed schema (schema.py), Hydra composition (compose.py) and the sweep syntax,
job ids and typed overrides (sweep.py). Nothing here imports torch."""
