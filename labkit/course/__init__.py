"""The tools that build the course, apart from what a learner's notebook imports:

- `exercises`: the learner copies of the notebooks, solutions replaced by a stub
  (`python -m labkit.exercises build notebooks build/learner`);
- `decks` and `vendor`: each deck in slides/ to one offline reveal.js file, run once
  (`python -m labkit.slides build --execute slides build/slides`; a deck itself imports only
  `labkit.slides.style()`);
- `translate`: a notebook or deck in another language, from its i18n/<lang>/<folder>/<stem>.po.
"""
