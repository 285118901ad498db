"""Pure answer readers and graders, below both tasks/ and rewards/ (they import only race_cli.errors):

number.py   extract_answer, normalize_number, answers_match: the `#### N` numeric check
math.py     MATH-style final answers: \\boxed{...}, LaTeX normalisation, symbolic equivalence
graders.py  the graders by name (number, math), math-verify looked up lazily, once
"""
