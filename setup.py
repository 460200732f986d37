"""The package's build: pyproject.toml says everything else; this adds the compiled catalogs.

`build_py` compiles each labkit/locale/<lang>/LC_MESSAGES/labkit.po into labkit.mo in the built
package (the wheel), which the standard library's gettext reads at run time; a .mo is never
committed (scripts/setup builds one in place for the editable install: python -m labkit.i18n mo).
"""
import importlib.util
import pathlib

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = pathlib.Path(__file__).resolve().parent


def _mo_module():
    """labkit/i18n/mo.py alone (standard library only: the build does not import labkit)."""
    spec = importlib.util.spec_from_file_location("labkit_mo", HERE / "labkit" / "i18n" / "mo.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class BuildPyWithCatalogs(build_py):
    def run(self):
        super().run()
        built = _mo_module().build_all(HERE / "labkit" / "locale", pathlib.Path(self.build_lib) / "labkit" / "locale")
        for mo in built:
            print(f"compiled {mo}")


setup(cmdclass={"build_py": BuildPyWithCatalogs})
