"""Wrong and right answers to every exercise, each wrong one with the words its checker must say.

Each module holds, for one exercise, RIGHT = [(name, fn)] that must pass and
WRONG = [(name, fn, words, kind)] where `words` must appear in the checker's line and `kind`
says what the learner's code really does to the ranks: "clean" (the ranks are kept),
"hang" or "crash" (the ranks are replaced, and the next run still works). The functions live
in importable modules so the ranks receive them by reference (as a learner's would by value).
"""
