"""The Chinese catalog: English message (the key, format fields included) -> Chinese message
with the same fields. Terms as in docs/glossary.md. `pass`, `FAIL`, `ok:`, `MISS:` and checker
names are never in a message here: they are printed around it, in English, for programs."""

MESSAGES = {
}
