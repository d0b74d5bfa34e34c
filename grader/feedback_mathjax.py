"""MathJax for nbgrader's feedback pages that works offline.

nbgrader's feedback template calls nbconvert's ``mathjax()`` macro without an argument, so every
page loads MathJax from a CDN (and ``HTMLExporter.mathjax_url`` is ignored): offline, on a train
or behind a campus firewall, the formulas show as TeX source. :class:`FeedbackHTMLExporter`,
which ``nbgrader_config.py`` makes the exporter of ``generate_feedback`` (command line and
Formgrader alike), fixes that:

* it puts MathJax 2.7 (the files of the ``jupyter-server-mathjax`` package, trimmed to what
  TeX input and HTML-CSS output need: about 2 MB) in a ``mathjax/`` folder beside every
  feedback page, ``grading/feedback/<student>/<module>/mathjax/``, and the page loads
  ``mathjax/MathJax.js`` by that relative URL. Whatever folder is handed to a student (the
  whole ``feedback/``, one student's folder, one module's folder, zipped or copied) carries
  its MathJax, and the page works from ``file://`` with no network. The copies are hard links
  to one copy in ``grading/feedback/.mathjax-<version>/`` where the file system allows it, so
  a class costs about 2 MB of disk, not 2 MB per student and module.
* a page that travels alone (nbgrader's exchange, ``release_feedback``, copies only the
  ``.html`` files) finds no ``mathjax/`` beside it: the loader then falls back to the CDN, so
  online it renders as before; offline its formulas stay TeX.
* ``GRADER_MATHJAX_URL`` (read by ``nbgrader_config.py``) sets ``HTMLExporter.mathjax_url``
  and turns the copies off: every page then loads MathJax from that URL and nothing else.
"""
from __future__ import annotations

import base64
import html
import json
import os
import re
import shutil
import tempfile
from functools import lru_cache
from pathlib import Path

from nbconvert.exporters import HTMLExporter
from traitlets import Bool, Unicode

from .course import ROOT

FOLDER = "mathjax"  # beside each feedback page
PACKAGE = "jupyter_server_mathjax"  # pip install jupyter-server-mathjax: MathJax 2.7 under static/
LOCAL_CONFIG = "TeX-AMS-MML_HTMLorMML-full,Safe"  # the combined configuration that package ships
# What TeX input with HTML-CSS output (STIX-Web fonts) loads, and nothing more: the package's SVG
# output, its accessibility explorer (3.7 MB) and its translations stay out.
KEEP = (
    "LICENSE",
    "MathJax.js",
    "config/TeX-AMS-MML_HTMLorMML-full.js",
    "config/Safe.js",
    "extensions/",
    "jax/element/",
    "jax/input/TeX/",
    "jax/output/HTML-CSS/",
    "fonts/HTML-CSS/STIX-Web/woff/",
    "localization/en/",
)
SKIP = ("extensions/a11y/",)
# The package ships only the STIX-Web fonts (MathJax's default web font, TeX, is not there).
LOCAL_SETTINGS = {"HTML-CSS": {"availableFonts": [], "preferredFont": None, "webFont": "STIX-Web", "imageFont": None}}

# What nbconvert's mathjax macro writes (nbconvert 7, nbgrader 0.9.6's feedback template).
_LOADER = re.compile(r'(<!-- Load mathjax -->\s*)<script src="([^"]*)">\s*</script>')


def mathjax_source() -> Path | None:
    """The installed MathJax 2 folder (``jupyter_server_mathjax/static``), or None."""
    try:
        import jupyter_server_mathjax
    except ImportError:
        return None
    static = Path(jupyter_server_mathjax.__file__).parent / "static"
    return static if (static / "MathJax.js").is_file() else None


@lru_cache(maxsize=None)
def mathjax_version(static: Path) -> str:
    m = re.search(r'MathJax\.version="([^"]+)"', (static / "MathJax.js").read_text(errors="replace"))
    return m.group(1) if m else "unknown"


@lru_cache(maxsize=None)
def mathjax_files(static: Path) -> tuple[str, ...]:
    """The paths (relative to ``static``, posix) of the MathJax files a feedback page may load."""
    out = []
    for p in sorted(static.rglob("*")):
        rel = p.relative_to(static).as_posix()
        if p.is_file() and any(rel == k or (k.endswith("/") and rel.startswith(k)) for k in KEEP) \
                and not any(rel.startswith(s) for s in SKIP):
            out.append(rel)
    return tuple(out)


def _cache(static: Path, where: Path) -> Path:
    """One complete copy of the trimmed MathJax in ``where/.mathjax-<version>`` (made once,
    atomically: a half-written copy is never used)."""
    cache = where / f".mathjax-{mathjax_version(static)}"
    files = mathjax_files(static)
    if all((cache / f).is_file() for f in files):
        return cache
    where.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".mathjax-", dir=where))
    for f in files:
        (tmp / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(static / f, tmp / f)
    if cache.exists():  # incomplete (an older interrupted run): replace it
        shutil.rmtree(cache, ignore_errors=True)
    try:
        tmp.rename(cache)
    except OSError:  # another process got there first
        shutil.rmtree(tmp, ignore_errors=True)
    return cache


def place_mathjax(dest: Path | str, cache_root: Path | str | None = None) -> Path | None:
    """Put the trimmed MathJax in ``dest/mathjax/`` (hard links to a copy kept in
    ``cache_root``, default ``dest``'s grandparent, where the file system allows it; copies
    elsewhere). Returns the folder, or None when jupyter-server-mathjax is not installed."""
    static = mathjax_source()
    if static is None:
        return None
    dest = Path(dest)
    cache = _cache(static, Path(cache_root) if cache_root is not None else dest.parent.parent)
    target = dest / FOLDER
    uid = os.geteuid() if hasattr(os, "geteuid") else None
    for f in mathjax_files(static):
        src, out = cache / f, target / f
        if out.is_file() and out.stat().st_size == src.stat().st_size:
            continue
        out.parent.mkdir(parents=True, exist_ok=True)
        if out.exists():
            out.unlink()
        # nbgrader chmods every file of the feedback folder: link only files this user owns.
        try:
            if uid is None or src.stat().st_uid != uid:
                raise OSError("not ours")
            os.link(src, out)
        except OSError:
            shutil.copyfile(src, out)
    return target


def loader_html(local: bool, url: str) -> str:
    """The ``<script>`` tags that load MathJax: ``mathjax/MathJax.js`` beside the page, or
    ``url`` when that is missing (``local``); else ``url`` only."""
    if not local:
        return f'<script src="{html.escape(url, quote=True)}"> </script>'
    fallback = ("this.onerror=null;var s=document.createElement('script');"
                f"s.src={json.dumps(url)};document.head.appendChild(s);")
    return (f"<script>window.MathJax = {json.dumps(LOCAL_SETTINGS)};</script>\n"
            f'<script src="{FOLDER}/MathJax.js?config={LOCAL_CONFIG}" '
            f'onerror="{html.escape(fallback, quote=True)}"> </script>')


_COURSE_IMG = re.compile(r'(<img\b[^>]*?\bsrc=")((?:\.\./)+modules/[^"]+)(")')


def embed_course_images(page: str, root: Path) -> str:
    """A notebook's figures (``../../modules/MODULE/img/...``, relative to ``exercises/MODULE/``)
    do not resolve from ``grading/feedback/STUDENT/MODULE/``: they go into the page itself, as
    data URIs, so any folder or page handed to a student shows them."""
    modules = (root / "modules").resolve()

    def embed(m):
        path = (root / "modules" / m.group(2).split("modules/", 1)[1]).resolve()
        kind = {".png": "image/png", ".svg": "image/svg+xml", ".jpg": "image/jpeg", ".gif": "image/gif"}.get(path.suffix)
        if kind is None or not path.is_relative_to(modules) or not path.is_file():
            return m.group(0)
        return m.group(1) + f"data:{kind};base64," + base64.b64encode(path.read_bytes()).decode() + m.group(3)

    return _COURSE_IMG.sub(embed, page)


class FeedbackHTMLExporter(HTMLExporter):
    """nbconvert's HTMLExporter for ``nbgrader generate_feedback``: the page loads MathJax from
    a copy beside it (``mathjax/``), the CDN only when that copy is missing; or, with
    ``local_mathjax = False``, from ``mathjax_url``."""

    local_mathjax = Bool(True, help="Copy MathJax beside every feedback page and load it from there "
                         "(the CDN only when the copy is missing)").tag(config=True)
    cdn_mathjax_url = Unicode(
        "https://cdnjs.cloudflare.com/ajax/libs/mathjax/2.7.7/latest.js?config=TeX-AMS_CHTML-full,Safe",
        help="Where a page loads MathJax when no copy is beside it").tag(config=True)

    def _feedback_folder(self, resources) -> Path | None:
        nbg = (resources or {}).get("nbgrader") or {}
        fmt = getattr(self.parent, "_format_dest", None)
        if fmt is None or "assignment" not in nbg or "student" not in nbg:
            return None
        return Path(fmt(nbg["assignment"], nbg["student"]))

    def _feedback_root(self) -> Path | None:
        coursedir = getattr(self.parent, "coursedir", None)
        if coursedir is None:
            return None
        return Path(os.path.normpath(coursedir.format_path(coursedir.feedback_directory, ".", ".")))

    def from_notebook_node(self, nb, resources=None, **kw):
        output, resources = super().from_notebook_node(nb, resources, **kw)
        found = _LOADER.findall(output)
        if len(found) != 1:
            self.log.warning("feedback page: %d MathJax loaders found (expected 1); left as nbconvert wrote it", len(found))
            return output, resources
        local = False
        if self.local_mathjax:
            folder = self._feedback_folder(resources)
            if folder is not None and place_mathjax(folder, self._feedback_root()) is not None:
                local = True
            elif folder is not None:
                self.log.warning("jupyter-server-mathjax is not installed: feedback pages load MathJax from %s "
                                 "(pip install jupyter-server-mathjax for offline formulas)", self.cdn_mathjax_url)
        # mathjax_url is nbconvert's trait (GRADER_MATHJAX_URL sets it); the CDN fallback otherwise.
        url = self.mathjax_url if not self.local_mathjax else self.cdn_mathjax_url
        output = _LOADER.sub(lambda m: m.group(1) + loader_html(local, url), output, count=1)
        coursedir = getattr(self.parent, "coursedir", None)
        if coursedir is not None:
            root = Path(coursedir.root)
            # a course folder made of the released modules alone (the demo's) takes the figures from
            # the course package's own checkout
            output = embed_course_images(output, root if (root / "modules").is_dir() else ROOT)
        return output, resources
