"""The compiled catalog: a .po file as GNU gettext's binary .mo, which the standard library's
`gettext` reads (pure, standard library only: the package's build imports this file alone).

    python -m labkit.i18n mo          # labkit/locale/<lang>/LC_MESSAGES/labkit.mo from each .po

What goes in is what `msgfmt` puts in: the header and every translated entry that is neither
fuzzy nor obsolete; a context as ``context\\x04msgid``, a plural as ``msgid\\x00msgid_plural``
with its forms joined by ``\\x00``. The header also carries ``X-Labkit-Source: sha256 of the
.po``, so that a .mo built from another version of its .po is seen as stale (`is_current`) and
labkit reads the .po itself instead (labkit.i18n.messages.load). The .mo is built, never
committed: by the package's build (setup.py, into the wheel) and by scripts/setup (in place).
"""
import ast
import hashlib
import pathlib
import struct

SOURCE_KEY = "X-Labkit-Source"


def _entries(text: str):
    """(flags, msgctxt, msgid, msgid_plural, {index: msgstr}) of each live entry of a .po text."""
    entry, field, flags, out = {}, None, set(), []

    def flush():
        nonlocal entry, field, flags
        if "msgid" in entry:
            out.append((flags, entry.get("msgctxt"), entry["msgid"], entry.get("msgid_plural"),
                        entry.get("msgstr", {})))
        entry, field, flags = {}, None, set()

    for line in text.splitlines():
        line = line.strip()
        if not line:
            flush()
            continue
        if line.startswith("#"):
            if line.startswith("#~") or line.startswith("#|"):
                continue                        # obsolete entries, previous msgids
            if line.startswith("#,"):
                if "msgid" in entry:
                    flush()
                flags |= {f.strip() for f in line[2:].split(",")}
            continue
        if line.startswith('"'):
            value = ast.literal_eval(line)
            if isinstance(field, tuple):
                entry["msgstr"][field[1]] += value
            else:
                entry[field] += value
            continue
        key, _, rest = line.partition(" ")
        value = ast.literal_eval(rest)
        if key in ("msgctxt",) and "msgid" in entry:
            flush()
        if key.startswith("msgstr"):
            index = int(key[7:-1]) if key.startswith("msgstr[") else 0
            entry.setdefault("msgstr", {})[index] = value
            field = ("msgstr", index)
        else:
            entry[key] = value
            field = key
    flush()
    return out


def source_hash(po_bytes: bytes) -> str:
    return hashlib.sha256(po_bytes).hexdigest()


def compile_po(po_path, mo_path=None) -> bytes:
    """The .mo of the .po at `po_path` (written to `mo_path` when given)."""
    raw = pathlib.Path(po_path).read_bytes()
    messages = {}
    for flags, ctx, msgid, plural, strs in _entries(raw.decode("utf-8")):
        forms = [strs[i] for i in sorted(strs)]
        if "fuzzy" in flags and msgid:
            continue
        if not msgid:                           # the header, with the source's hash
            header = "".join(ln + "\n" for ln in forms[0].splitlines()
                             if not ln.startswith(SOURCE_KEY + ":"))
            messages[b""] = (header + f"{SOURCE_KEY}: sha256 {source_hash(raw)}\n").encode("utf-8")
            continue
        if not forms or not all(forms):
            continue                            # untranslated: gettext falls back to the English
        key = (ctx + "\x04" if ctx is not None else "") + msgid + ("\x00" + plural if plural else "")
        messages[key.encode("utf-8")] = "\x00".join(forms).encode("utf-8")
    keys = sorted(messages)
    ids = strs = b""
    offsets = []
    for k in keys:
        offsets.append((len(k), len(ids), len(messages[k]), len(strs)))
        ids += k + b"\0"
        strs += messages[k] + b"\0"
    start = 7 * 4 + 16 * len(keys)              # header, then the two tables, then the strings
    koffsets, voffsets = [], []
    for klen, kpos, vlen, vpos in offsets:
        koffsets += [klen, start + kpos]
        voffsets += [vlen, start + len(ids) + vpos]
    out = (struct.pack("Iiiiiii", 0x950412de, 0, len(keys), 7 * 4, 7 * 4 + 8 * len(keys), 0, 0)
           + struct.pack(f"{len(koffsets)}i", *koffsets) + struct.pack(f"{len(voffsets)}i", *voffsets)
           + ids + strs)
    if mo_path is not None:
        mo_path = pathlib.Path(mo_path)
        mo_path.parent.mkdir(parents=True, exist_ok=True)
        mo_path.write_bytes(out)
    return out


def is_current(mo_info: dict, po_path) -> bool:
    """Whether a .mo (its header, as gettext's info()) was built from the .po as it is now."""
    want = mo_info.get(SOURCE_KEY.lower(), "")
    return want == f"sha256 {source_hash(pathlib.Path(po_path).read_bytes())}"


def build_all(locale: pathlib.Path, out: pathlib.Path = None) -> list:
    """Compile every <lang>/LC_MESSAGES/*.po under `locale` into the same place under `out`
    (default: beside it); returns the .mo files written."""
    out = out or locale
    written = []
    for po in sorted(locale.glob("*/LC_MESSAGES/*.po")):
        mo = out / po.relative_to(locale).with_suffix(".mo")
        compile_po(po, mo)
        written.append(mo)
    return written
