"""One exception type for mistakes a person can fix, so the CLI prints them and exits 2."""

from __future__ import annotations


class RaceError(Exception):
    """Bad input: the message says what was wrong, what was expected, and what to try.

    Several problems can be reported at once (litgpt habit: validate everything up front).
    """

    exit_code = 2

    def __init__(self, *problems: str):
        self.problems = [p for p in problems if p]
        super().__init__("\n".join(self.problems))
