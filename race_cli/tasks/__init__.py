"""Tasks: training prompts, held-out evaluation items and gold answers (see base.py)."""
