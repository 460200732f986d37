"""Chinese in JupyterLab drawn with a Simplified Chinese font.

JupyterLab's page says `lang="en"`, so for a Chinese character that its Latin fonts lack,
chromium takes whichever CJK font the system offers first: on Debian that is Noto Sans CJK JP,
whose shapes of some shared characters are the Japanese ones (真, the full-width colon). Naming
the Simplified Chinese fonts at the end of JupyterLab's own font lists (after its generic
`sans-serif`, so Latin text keeps its usual font) makes Chinese text take them instead.

JupyterLab applies these font "overrides" from the user's settings only (not from an
environment's overrides.json), so `bash scripts/lab --lang zh` runs

    python -m labkit.i18n.lab_fonts            # [SETTINGS_DIR]; default: JupyterLab's own

which adds them to the user's theme settings unless the user has set fonts there already.
"""
import json
import os
import pathlib
import re
import sys

from labkit.i18n.fonts import FAMILIES

# JupyterLab 4's --jp-ui-font-family and --jp-content-font-family (theme-light/dark)
JUPYTERLAB_STACK = ('system-ui, -apple-system, blinkmacsystemfont, "Segoe UI", helvetica, arial, '
                    'sans-serif')
EMOJI = '"Apple Color Emoji", "Segoe UI Emoji", "Segoe UI Symbol"'
SETTINGS_FILE = "@jupyterlab/apputils-extension/themes.jupyterlab-settings"
KEYS = ("ui-font-family", "content-font-family")


def font_stack() -> str:
    """JupyterLab's stack with the Simplified Chinese families after its generic sans-serif."""
    chinese = ", ".join(f'"{f}"' for f in FAMILIES)
    return f"{JUPYTERLAB_STACK}, {chinese}, {EMOJI}"


def settings() -> dict:
    """The theme settings labkit adds: {"overrides": {ui-font-family, content-font-family}}."""
    return {"overrides": {k: font_stack() for k in KEYS}}


def settings_dir() -> pathlib.Path:
    """JupyterLab's user settings folder (JUPYTERLAB_SETTINGS_DIR, else under the config dir)."""
    if os.environ.get("JUPYTERLAB_SETTINGS_DIR"):
        return pathlib.Path(os.environ["JUPYTERLAB_SETTINGS_DIR"])
    from jupyter_core.paths import jupyter_config_dir
    return pathlib.Path(jupyter_config_dir()) / "lab" / "user-settings"


def write_user_settings(folder=None) -> str:
    """Add the Chinese fonts to the theme settings in `folder`; the user's other settings, and
    fonts the user chose, are kept. Returns one line saying what was done."""
    path = pathlib.Path(folder or settings_dir()) / SETTINGS_FILE
    data = {}
    if path.exists():
        text = path.read_text(encoding="utf-8")
        try:      # JupyterLab's settings files are JSON5: drop whole-line comments and trailing commas
            data = json.loads(re.sub(r",(\s*[}\]])", r"\1", re.sub(r"(?m)^\s*//.*$", "", text)))
        except ValueError:
            return f"left {path} as it is (not plain JSON): Chinese may show in a Japanese font"
    overrides = data.setdefault("overrides", {})
    if all(overrides.get(k) for k in KEYS):
        return f"kept the fonts you chose in {path}"
    for k in KEYS:
        overrides[k] = overrides.get(k) or font_stack()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return f"JupyterLab draws Chinese with {FAMILIES[0]} first ({path})"


if __name__ == "__main__":
    print("labkit: " + write_user_settings(sys.argv[1] if len(sys.argv) > 1 else None))
