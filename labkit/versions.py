"""The torch release the course is tested on, and one line when another one runs it (layer 1).

CI installs torch 2.13.0 (scripts/setup) and tests nothing else, so that is the one release
the README claims. `Cluster(...)` calls `notice_once()` when it starts: on another release it
prints one line, once per process, saying so (a notice, not an error: most of the course may
still work). Pure: the installed version is read from the package's metadata, torch is not
imported.
"""
import sys

from labkit.i18n import tr

TESTED_TORCH = "2.13.0"
_said = []


def installed_torch():
    """The installed torch's version, e.g. '2.13.0+cpu' (None when torch is not installed)."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("torch")
    except PackageNotFoundError:
        return None


def torch_notice(found):
    """The line to show for torch release `found` ('2.13.0+cpu' and '2.13.0' are the tested
    release, local build tags aside), or None when it is the tested one or unknown."""
    if found is None or found.split("+")[0] == TESTED_TORCH:
        return None
    return tr("labkit: this is torch {found}; the course is tested on torch {tested} only. Most "
              "of it may still work; if something fails, try torch {tested} first "
              "(bash scripts/setup installs it).", found=found, tested=TESTED_TORCH)


def notice_once(file=None) -> None:
    """Print `torch_notice(installed_torch())` the first time it is called in this process."""
    if _said:
        return
    _said.append(True)
    line = torch_notice(installed_torch())
    if line:
        print(line, file=file or sys.stderr)
