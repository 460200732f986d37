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


def moved(old: str, new: str, modules: dict = None):
    """(__getattr__, __dir__) for a package renamed from `old` to `new`, kept importable for one
    release: importing `old` warns once (DeprecationWarning, naming the new place), `old.NAME`
    is `new.NAME`, and `import old.sub` gives the module `new.sub` itself (the same object, so
    classes and module state are shared). `modules` maps an old submodule name to its new
    dotted name where it changed too ({"draw": "labkit.throughput.plots"}).

        # in labkit/doctor/__init__.py
        __getattr__, __dir__ = moved(__name__, "labkit.pitfalls", {"pitfalls": "labkit.pitfalls.detectors"})
    """
    import importlib.abc
    import importlib.util
    import warnings

    modules = dict(modules or {})
    warnings.warn(f"{old} is now {new}; the old name goes in the next release", DeprecationWarning,
                  stacklevel=3)

    def target(fullname: str) -> str:
        sub = fullname[len(old) + 1:]
        head, _, rest = sub.partition(".")
        base = modules.get(head, f"{new}.{head}")
        return f"{base}.{rest}" if rest else base

    class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, fullname, path=None, target_module=None):
            if not fullname.startswith(old + "."):
                return None
            if importlib.util.find_spec(target(fullname)) is None:
                return None
            return importlib.util.spec_from_loader(fullname, self)

        def create_module(self, spec):
            return None

        def exec_module(self, module):
            # the import system returns whatever sys.modules holds under the name afterwards
            sys.modules[module.__name__] = importlib.import_module(target(module.__name__))

    if not any(isinstance(f, _Alias) and getattr(f, "old", None) == old for f in sys.meta_path):
        finder = _Alias()
        finder.old = old
        sys.meta_path.insert(0, finder)

    def __getattr__(name: str):
        if name in modules:
            return importlib.import_module(modules[name])
        try:
            return getattr(importlib.import_module(new), name)
        except AttributeError:
            pass
        try:
            return importlib.import_module(f"{new}.{name}")
        except ModuleNotFoundError:
            raise AttributeError(f"module {old!r} has no attribute {name!r}") from None

    def __dir__():
        return sorted({*dir(importlib.import_module(new)), *modules})

    return __getattr__, __dir__
