"""Tasks: training prompts, held-out evaluation items and gold answers.

base.py        the one small interface every task implements
arithmetic.py  the synthetic multi-step arithmetic task of the embedded default
gsm8k.py       GSM8K (shipped copy, a local path or the hub)
math500.py     MATH-500 as an evaluation target
jsonl.py       any question/answer dataset from a JSONL file or a hub id (task=jsonl)
targets.py     tasks and evaluation targets by name
prompting.py   an item's prompt text (chat or plain) and a completion's reasoning steps
checks.py      what a job will need, checked before any runs: the tokenizer, the task's rows, the targets
"""
