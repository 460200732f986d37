"""Build the instructor decks in slides/ into reveal.js HTML that presents offline.

    python -m labkit.slides build slides build/slides            # as committed (no outputs)
    python -m labkit.slides build --execute slides build/slides  # run the cells first (needs ranks)

A deck is a notebook whose cells carry `slideshow.slide_type` metadata. nbconvert's reveal
template links reveal.js, require.js, jQuery and MathJax from CDNs; here they are copied next
to the HTML (from the npm registry, once, into <dst>/vendor), so the deck works in a lecture
hall without a network.
"""
import argparse
import pathlib
import shutil
import subprocess
import sys
import tarfile
import tempfile

# Figures in a deck must stay readable from the back of a room: at 1280 x 720, figure text at
# least 16 px. A deck's first code cell calls style(); the browser test checks each figure's
# displayed scale against these numbers (MIN_FONT_PT at DPI, shrunk or grown by the page).
DPI = 100
MIN_FONT_PT = 14          # the smallest text style() allows (tick labels, legend)
FIGSIZE = (10.0, 4.2)     # inches: 1000 x 420 px at DPI, fits a slide under a title


def style() -> None:
    """Matplotlib settings for slides: large text, one size of figure, PNG at DPI.

    Library plots that set an explicit fontsize below MIN_FONT_PT defeat this: keep them at
    or above it (or scale them from rcParams)."""
    import matplotlib
    matplotlib.rcParams.update({
        "figure.figsize": FIGSIZE, "figure.dpi": DPI, "savefig.dpi": DPI,
        "font.size": 16, "axes.titlesize": 18, "axes.labelsize": 16,
        "xtick.labelsize": MIN_FONT_PT, "ytick.labelsize": MIN_FONT_PT,
        "legend.fontsize": MIN_FONT_PT, "legend.title_fontsize": MIN_FONT_PT,
        "figure.titlesize": 18, "lines.linewidth": 2.5,
    })

# npm package -> {path inside its tarball: destination under vendor/}
VENDOR = {
    "reveal.js@4.0.2": {"package/dist": "reveal.js/dist",       # the version nbconvert's template targets
                        "package/plugin": "reveal.js/plugin"},
    "requirejs@2.3.6": {"package/require.js": "require.js"},
    "jquery@3.5.1": {"package/dist/jquery.min.js": "jquery.min.js"},
    "mathjax@2.7.7": {"package": "mathjax"},                    # formulas (the bubble, 2(N-1)/N ...)
}


def fetch_vendor(vendor: pathlib.Path) -> None:
    """Put reveal.js, require.js, jQuery and MathJax under `vendor` (skipped when there)."""
    if all((vendor / target).exists() for members in VENDOR.values() for target in members.values()):
        return
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("building the decks needs reveal.js, fetched once with npm (Node.js); "
                           "install Node.js, or copy reveal.js 4.0.2 to " + str(vendor / "reveal.js"))
    vendor.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([npm, "pack", "--silent", *VENDOR], cwd=tmp, check=True, stdout=subprocess.DEVNULL)
        for package, members in VENDOR.items():
            with tarfile.open(pathlib.Path(tmp) / (package.replace("@", "-") + ".tgz")) as tar:
                tar.extractall(tmp, filter="data")
            for member, target in members.items():
                src, dst = pathlib.Path(tmp) / member, vendor / target
                if src.is_dir():
                    shutil.copytree(src, dst, dirs_exist_ok=True)
                else:
                    shutil.copy(src, dst)
            shutil.rmtree(pathlib.Path(tmp) / "package")


def build(src: pathlib.Path, dst: pathlib.Path, execute: bool = False, timeout: int = 300) -> list:
    import nbformat
    from nbconvert import SlidesExporter
    from nbconvert.preprocessors import ExecutePreprocessor

    fetch_vendor(dst / "vendor")
    exporter = SlidesExporter(reveal_url_prefix="vendor/reveal.js", require_js_url="vendor/require.js",
                              jquery_url="vendor/jquery.min.js", reveal_theme="simple",
                              mathjax_url="vendor/mathjax/MathJax.js?config=TeX-AMS_CHTML-full,Safe",
                              reveal_scroll=True)
    written = []
    for path in sorted(src.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        if execute:
            ExecutePreprocessor(timeout=timeout, kernel_name="labkit", allow_errors=True).preprocess(
                nb, {"metadata": {"path": str(src.parent / "notebooks")}})
        html, _ = exporter.from_notebook_node(nb)
        out = dst / (path.stem + ".slides.html")
        out.write_text(html)
        written.append(out)
    return written


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m labkit.slides")
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="write reveal.js HTML decks that present offline")
    b.add_argument("--execute", action="store_true", help="run every cell first (starts ranks)")
    b.add_argument("src", type=pathlib.Path)
    b.add_argument("dst", type=pathlib.Path)
    args = p.parse_args(argv)
    args.dst.mkdir(parents=True, exist_ok=True)
    for out in build(args.src, args.dst, args.execute):
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
