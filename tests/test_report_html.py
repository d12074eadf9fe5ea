"""report.html: hostile user strings never change the page's structure (parsed), and a real headless Chromium loads a saved
page, runs its one script under the page's Content-Security-Policy, and shows the verdict and the first cluster."""
import html, os, re, shutil, subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from gradian.report_html import write_html
from gradian.testing import HOSTILE_STRINGS, hostile_report


class _Page(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True); self.tags, self.text = [], []
    def handle_starttag(self, tag, attrs): self.tags.append((tag, tuple(sorted(k for k, _ in attrs))))
    def handle_data(self, data): self.text.append(data)


def _parse(page:str) -> _Page:
    p = _Page(); p.feed(page); p.close(); return p


@pytest.mark.parametrize("s", HOSTILE_STRINGS, ids=range(len(HOSTILE_STRINGS)))
def test_hostile_strings_leave_the_page_structure_unchanged(s):
    page, plain = _parse(hostile_report(s).to_html()), _parse(hostile_report("x").to_html())
    assert page.tags == plain.tags                          # same elements with the same attribute names, in the same order
    shown = "".join(page.text)
    assert shown.count(s.strip()) >= 10 or shown.count(" ".join(s.split())) >= 10 or s.strip() in shown


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--hide-scrollbars"]


def _chromium(tmp:Path, *args) -> str:
    r = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp / 'profile'}", *args], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


@pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium (Debian package `chromium`; the README's test command installs it)")
def test_the_page_in_a_real_browser(tmp_path):
    rep = hostile_report("<img src=x onerror=alert(1)>")
    rep.clusters[0]["label"] = "capital, city <b>bold</b>"
    out = rep.save(tmp_path / "report", extra=(write_html,))
    url = (out / "report.html").resolve().as_uri()
    dom = _chromium(tmp_path, "--virtual-time-budget=3000", "--dump-dom", url)
    assert re.search(r'<body[^>]*data-ready="1"', dom), "the page's script did not run under its policy"
    assert re.search(r'<span id="verdict"[^>]*>ATTRIBUTED</span>', dom)
    first = re.search(r'<details class="cluster"[^>]*open[^>]*><summary>(.*?)</summary>', dom).group(1)
    assert '<b class="label">capital, city &lt;b&gt;bold&lt;/b&gt;</b>' in first and "3 examples, 1 accused" in first
    assert "<img src=\"x\"" not in dom and dom.count("<script>") == 1
    md = (out / "report.md").read_text()
    shown = [html.unescape(h) for h in re.findall(r"<h2>(.*?)</h2>", dom)]
    assert shown == re.findall(r"^## (.+)$", md, flags=re.M), shown     # the page carries report.md's sections, in order
    shot = Path(os.environ.get("GRADIAN_SCREENSHOT_DIR", tmp_path)) / "report-html.png"
    _chromium(tmp_path, "--window-size=1280,1600", f"--screenshot={shot}", url)
    assert shot.stat().st_size > 20_000 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
