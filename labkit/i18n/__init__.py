"""The course in more than one language.

- `lang()`, `set_lang("zh")`: the one setting for what labkit prints and draws (``LABKIT_LANG``,
  a chain of languages ending in English: `lang.chain`).
- `tr("rank {rank} died", rank=r)`, `trn(singular, plural, n)`, `trc(context, text)`, `N_(text)`:
  a message in that language (`tr_join(items, "; ")`: a list joined in it) (gettext catalogs: ``labkit/locale/<lang>/LC_MESSAGES/labkit.po``).
- `cells`: the translations of notebooks and decks (``i18n/<lang>/<folder>/<stem>.po``), checked
  and applied; `po`: the store itself, its templates and their update (Babel, polib).
- `fonts`: a font with Chinese characters for matplotlib, or a clear error.
"""
from labkit.i18n.lang import LANGS, lang, set_lang
from labkit.i18n.messages import N_, ShownName, tr, tr_fig, tr_join, trc, trn

__all__ = ["LANGS", "lang", "set_lang", "tr", "tr_fig", "tr_join", "trc", "trn", "N_", "ShownName"]
