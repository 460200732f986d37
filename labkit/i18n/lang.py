"""The one language setting for what labkit prints and draws (pure: no imports beyond os, sys).

`LABKIT_LANG` in the environment (``en``, the default, or ``zh``) is read by every process:
the notebook's kernel, the ranks on this machine (they inherit the environment), and ranks
on other machines (the Cluster passes the notebook's setting in each rank's `Init` options).
`labkit.set_lang("zh")` sets it from a notebook cell; the Chinese copies of the notebooks do
so in their first code cell.

A setting is a chain of languages, tried in turn, ending in English (`chain`): ``zh_CN`` ->
zh_CN, zh, en. Simplified Chinese is not offered for Traditional (``zh_TW``, ``zh_HK``,
``zh_MO``, ``zh_Hant``): there the chain skips ``zh``, and labkit says once, on stderr, that it
has no translation in that language and prints English.
"""
import os
import sys

LANGS = ("en", "zh")
ENV = "LABKIT_LANG"
NAMES = {"zh": "Simplified Chinese", "zh_TW": "Traditional Chinese", "zh_HK": "Traditional Chinese",
         "zh_MO": "Traditional Chinese", "zh_Hant": "Traditional Chinese"}
_NOT_ZH = ("zh_tw", "zh_hk", "zh_mo", "zh_hant")     # Traditional: Simplified is not a fallback
_said = set()


def chain(value: str) -> list:
    """The languages a setting asks for, most specific first, ending in "en"
    (``"zh-CN"`` -> ["zh_CN", "zh", "en"]; ``"zh_TW"`` -> ["zh_TW", "en"])."""
    value = value.strip().replace("-", "_").split(".")[0].split("@")[0]
    if not value:
        return ["en"]
    parts = value.split("_")
    code = "_".join([parts[0].lower()] + [p if len(p) == 4 else p.upper() for p in parts[1:]])
    out = [code]
    if "_" in code and not any(code.lower().startswith(t) for t in _NOT_ZH):
        out.append(parts[0].lower())
    if out[-1] != "en":
        out.append("en")
    return list(dict.fromkeys(out))


def resolve(value: str) -> tuple:
    """(the language labkit speaks for this setting, the languages asked for that labkit has no
    translation in: empty where it speaks the one asked for, or its region's: ``zh_CN`` -> zh)."""
    asked = chain(value)
    code = next(c for c in asked if c in LANGS or c == "en")
    if code == asked[0] or asked[0].startswith(code + "_"):
        return code, []
    return code, asked[:asked.index(code)]


def lang() -> str:
    """The current language: the first of LABKIT_LANG's chain that labkit speaks (``zh_CN`` ->
    ``zh``), ``en`` when unset; for one it does not speak (``zh_TW``, ``fr``) English, said once."""
    value = os.environ.get(ENV, "")
    code, missing = resolve(value)
    if missing and value not in _said:
        _said.add(value)
        name = NAMES.get(missing[0], missing[0])
        print(f"labkit: {ENV}={value}: no {name} ({missing[0]}) translation; printing {code}"
              f" (labkit speaks {', '.join(LANGS)}; a translator starts one with `pybabel init`,"
              " README, Translations)", file=sys.stderr)
    return code


def set_lang(code: str, figures: bool = True) -> str:
    """Print and draw in this language from now on (this process and every rank started
    after it). With figures (the default) and a language that needs its own font, matplotlib
    is set to draw with it, or this raises `MissingFont` saying which font to install."""
    got, missing = resolve(str(code))
    if missing:
        raise ValueError(f"labkit speaks {', '.join(LANGS)}; it has no {NAMES.get(missing[0], missing[0])} "
                         f"({missing[0]}) translation (got {code!r})")
    os.environ[ENV] = got
    if figures and got == "zh":
        from labkit.i18n.fonts import use_cjk
        use_cjk()
    return got
