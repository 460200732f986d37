"""Where the course's files are, for a notebook or a script (layer 5: pure, no torch)."""
import pathlib


def example(name: str) -> pathlib.Path:
    """The script `examples/<name>` of the course: looked for from the current folder upwards
    (a notebook runs in `notebooks/` or `build/learner/`), then beside the labkit package (an
    editable install). Works for a clone with labkit installed any way."""
    here = pathlib.Path.cwd().resolve()
    pkg_root = pathlib.Path(__file__).resolve().parents[1]
    for folder in [here, *here.parents, pkg_root]:
        candidate = folder / "examples" / name
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"examples/{name} was not found above {here} nor beside labkit "
                            f"({pkg_root}): run the notebook from the course's folder")
