"""reveal.js, its speaker-notes plugin, a font and MathJax, fetched once from the npm registry
and inlined into each deck, so one HTML file presents with no network (no CDN at viewing time).

`fetch(cache)` runs `npm pack` for the pinned packages (a few MB, once per cache folder);
`assets(cache, math)` returns the CSS and JS text a deck's template inlines.
"""
import base64
import pathlib
import shutil
import subprocess
import tarfile
import tempfile

# npm package -> {path inside its tarball: destination under the cache folder}
VENDOR = {
    "reveal.js@5.2.1": {"package/dist/reveal.js": "reveal.js",
                        "package/dist/reveal.css": "reveal.css",
                        "package/dist/theme/white.css": "white.css",
                        "package/plugin/notes/notes.js": "notes.js",
                        "package/dist/theme/fonts/source-sans-pro/source-sans-pro-regular.woff": "sans-regular.woff",
                        "package/dist/theme/fonts/source-sans-pro/source-sans-pro-semibold.woff": "sans-semibold.woff"},
    # every TeX extension built in (no autoload from a CDN), SVG output (no font files to load)
    "mathjax@3.2.2": {"package/es5/tex-svg-full.js": "tex-svg-full.js"},
}


def _missing(cache: pathlib.Path) -> list:
    return [t for members in VENDOR.values() for t in members.values() if not (cache / t).exists()]


def fetch(cache: pathlib.Path) -> pathlib.Path:
    """Put the VENDOR files under `cache` (nothing to do when they are there already)."""
    if not _missing(cache):
        return cache
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("building the decks needs reveal.js and MathJax from the npm registry, fetched "
                           "once with npm (Node.js): install Node.js, or copy these files into "
                           f"{cache}: {', '.join(_missing(cache))} (see labkit/course/vendor.py)")
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([npm, "pack", "--silent", *VENDOR], cwd=tmp, check=True, stdout=subprocess.DEVNULL)
        for package, members in VENDOR.items():
            unpacked = pathlib.Path(tmp) / "package"
            with tarfile.open(pathlib.Path(tmp) / (package.replace("@", "-") + ".tgz")) as tar:
                tar.extractall(tmp, filter="data")
            for member, target in members.items():
                shutil.copy(pathlib.Path(tmp) / member, cache / target)
            shutil.rmtree(unpacked)
    return cache


def _font_css(cache: pathlib.Path) -> str:
    faces = []
    for weight, name in (("normal", "sans-regular.woff"), ("600", "sans-semibold.woff")):
        data = base64.b64encode((cache / name).read_bytes()).decode()
        faces.append("@font-face { font-family: 'Source Sans Pro'; font-style: normal; "
                     f"font-weight: {weight}; src: url(data:font/woff;base64,{data}) format('woff'); }}")
    return "\n".join(faces)


def _script(text: str) -> str:
    """JS text safe inside <script>...</script> (no premature end tag)."""
    return text.replace("</script", "<\\/script")


def assets(cache: pathlib.Path, math: bool) -> dict:
    """The texts a deck inlines: reveal's CSS, the white theme with its font embedded (its
    @import of font files removed), reveal.js, the notes plugin and, when `math`, MathJax."""
    theme = "\n".join(line for line in (cache / "white.css").read_text().splitlines()
                      if not line.lstrip().startswith("@import"))
    return {
        "reveal_css": (cache / "reveal.css").read_text(),
        "theme_css": _font_css(cache) + "\n" + theme,
        "reveal_js": _script((cache / "reveal.js").read_text()),
        "notes_js": _script((cache / "notes.js").read_text()),
        "mathjax_js": _script((cache / "tex-svg-full.js").read_text()) if math else "",
    }
