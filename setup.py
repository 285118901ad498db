"""Ships the checkout's conf/ inside the package as race_cli/conf, so `pip install .` (or an install from a
git URL) gives a `race` that can plan: conf/ stays where Hydra users look for it in the checkout, and
race_cli/config/compose.conf_dir() finds the installed copy. Everything else is in pyproject.toml."""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


class BuildPyWithConf(build_py):
    """build_py, then conf/**/*.yaml copied to <build>/race_cli/conf/ and docs/**/*.md to <build>/race_cli/docs/
    (`race docs PAGE` reads them: the pages help texts and messages name; an editable install reads the
    checkout's conf/ and docs/ themselves)."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        for folder, pattern in (("conf", "*.yaml"), ("docs", "*.md")):
            for src in sorted((HERE / folder).rglob(pattern)):
                dst = Path(self.build_lib) / "race_cli" / folder / src.relative_to(HERE / folder)
                dst.parent.mkdir(parents=True, exist_ok=True)
                self.copy_file(str(src), str(dst))


setup(cmdclass={"build_py": BuildPyWithConf})
