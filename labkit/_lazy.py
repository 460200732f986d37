"""Names of a package that load on first use, so importing the package stays light (pure).

    # in labkit/comm/__init__.py
    from labkit._lazy import lazy
    __getattr__, __dir__ = lazy(__name__, {"ring_all_reduce": "ring_fast", ...},
                                submodules={"formulas", "traffic", ...})

`names` maps a public name to the submodule that defines it; `submodules` are returned as
modules (`on_disk=True`: every module and subpackage found in the folder, none registered).
A name is imported once: the value is then stored in the package, so later look-ups do not
come back here. Anything else is an AttributeError that names the package.
"""
import importlib
import sys


def lazy(package: str, names: dict, submodules=(), on_disk: bool = False):
    """(__getattr__, __dir__) for the package named `package` (pass `__name__`)."""

    def found() -> set:
        mods = set(submodules)
        if on_disk:
            import pkgutil                        # here: at the top it costs `import labkit` 9 ms
            path = sys.modules[package].__path__
            mods |= {m.name for m in pkgutil.iter_modules(path) if not m.name.startswith("_")}
        return mods

    def __getattr__(name: str):
        if name in names:
            value = getattr(importlib.import_module(f"{package}.{names[name]}"), name)
            setattr(sys.modules[package], name, value)
            return value
        if name in found():
            return importlib.import_module(f"{package}.{name}")
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__():
        return sorted({*vars(sys.modules[package]), *names, *found()})

    return __getattr__, __dir__
