"""Ships the checkout's conf/ inside the package as race_cli/conf, so `pip install .` (or an install from a
git URL) gives a `race` that can plan: conf/ stays where Hydra users look for it in the checkout, and
race_cli/config/compose.conf_dir() finds the installed copy. Everything else is in pyproject.toml."""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


class BuildPyWithConf(build_py):
    """build_py, then conf/**/*.yaml copied to <build>/race_cli/conf/ (an editable install reads conf/ itself)."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        for src in sorted((HERE / "conf").rglob("*.yaml")):
            dst = Path(self.build_lib) / "race_cli" / "conf" / src.relative_to(HERE / "conf")
            dst.parent.mkdir(parents=True, exist_ok=True)
            self.copy_file(str(src), str(dst))


setup(cmdclass={"build_py": BuildPyWithConf})
