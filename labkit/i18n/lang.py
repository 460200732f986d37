"""The one language setting for what labkit prints and draws (pure: no imports beyond os).

`LABKIT_LANG` in the environment (``en``, the default, or ``zh``) is read by every process:
the notebook's kernel, the ranks on this machine (they inherit the environment), and ranks
on other machines (the Cluster passes the notebook's setting in each rank's `Init` options).
`labkit.set_lang("zh")` sets it from a notebook cell; the Chinese copies of the notebooks do
so in their first code cell.
"""
import os

LANGS = ("en", "zh")
ENV = "LABKIT_LANG"


def lang() -> str:
    """The current language: LABKIT_LANG's first two letters (``zh_CN`` -> ``zh``), ``en``
    when unset or not one of LANGS."""
    value = os.environ.get(ENV, "").strip().lower()[:2]
    return value if value in LANGS else "en"


def set_lang(code: str, figures: bool = True) -> str:
    """Print and draw in this language from now on (this process and every rank started
    after it). With figures (the default) and a language that needs its own font, matplotlib
    is set to draw with it, or this raises `MissingFont` saying which font to install."""
    code = str(code).strip().lower()
    if code[:2] not in LANGS:
        raise ValueError(f"labkit speaks {', '.join(LANGS)}; got {code!r}")
    os.environ[ENV] = code[:2]
    if figures and code[:2] == "zh":
        from labkit.i18n.fonts import use_cjk
        use_cjk()
    return code[:2]
