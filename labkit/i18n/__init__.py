"""The course in more than one language.

- `lang()`, `set_lang("zh")`: the one setting for what labkit prints and draws (``LABKIT_LANG``).
- `tr("rank {rank} died", rank=r)`: a message in that language (catalogs: ``zh.py``).
- `cells`: the translation files of notebooks and decks (``i18n/<lang>/...``), checked and applied.
- `fonts`: a font with Chinese characters for matplotlib, or a clear error.
"""
from labkit.i18n.lang import LANGS, lang, set_lang
from labkit.i18n.messages import tr, tr_fig

__all__ = ["LANGS", "lang", "set_lang", "tr", "tr_fig"]
