"""reports/html.py: index.html is self-contained, and every image loads in headless Chromium."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess

import pytest

PROBE = """<script>
window.addEventListener('load', function () {
  var imgs = Array.prototype.slice.call(document.images);
  var out = imgs.map(function (im) {
    return {alt: im.alt, ok: im.complete && im.naturalWidth > 0, w: im.naturalWidth, h: im.naturalHeight};
  });
  var pre = document.createElement('pre');
  pre.id = 'img-probe';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"]


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


def test_page_is_self_contained(built_report):
    text = built_report.read_text(encoding="utf-8")
    imgs = re.findall(r'<img src="([^"]*)"', text)
    assert len(imgs) >= 10 and all(src.startswith("data:image/png;base64,") for src in imgs)
    assert not re.search(r'(src|href)="(?!data:)', text)  # no external file, script or stylesheet
    assert "<script" not in text
    for needle in ("Seeds: 0, 1, 2", "rer_vapr 3, ckl 3, no_kl 3, no_vapr 1", "REVA-PO Table 4",
                   "Supp. A.3", "Fig. 3(d)", "Failed runs", "no_vapr seed 1: stage rl: RuntimeError: boom",
                   "Stages: every run's pipeline", "complete 12s *", "Optuna: rer_bounds", "MDD (alpha 0.05",
                   "Exploratory differences", "variant: P_sign, non-zero advantages only", "P_top1 groups used"):
        assert needle in html.unescape(text), needle


def test_every_image_loads_in_chromium(built_report, tmp_path):
    exe = _chromium()
    if exe is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium chromium-driver)")
    page = tmp_path / "probe.html"
    page.write_text(built_report.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"),
                    encoding="utf-8")
    n_imgs = built_report.read_text(encoding="utf-8").count("<img ")
    flags = CHROMIUM_FLAGS + [f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([exe, *flags, "--virtual-time-budget=10000", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=90)
    m = re.search(r'<pre id="img-probe">(.*?)</pre>', dom.stdout, re.S)
    assert m, f"the probe did not run (rc {dom.returncode}): {dom.stderr[-2000:]}"
    images = json.loads(html.unescape(m.group(1)))
    assert len(images) == n_imgs >= 10
    bad = [im for im in images if not im["ok"] or im["w"] < 100 or im["h"] < 100]
    assert not bad, bad

    shot = built_report.parent / "screenshot.png"
    res = subprocess.run([exe, *flags, "--hide-scrollbars", "--window-size=1280,2400", f"--screenshot={shot}",
                          built_report.as_uri()], capture_output=True, text=True, timeout=90)
    assert shot.is_file() and shot.stat().st_size > 10_000, res.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# Every figure the demo's page must show (issue 11): REVA-PO's figures and the per-arm curves.
DEMO_FIGURES = ("Fig. 2(a,b)", "Fig. 3(a)", "Fig. 3(b)", "Fig. 3(c)", "Fig. 3(d)", "Fig. S5", "Supp. A.3",
                "Fig. 4", "Fig. S6", "Sampling reward, every arm", "KL to the reference, every arm",
                "Policy entropy, every arm", "Validation score per arm")


def _probe(exe: str, page_html: str, tmp_path) -> list[dict]:
    page = tmp_path / "probe.html"
    page.write_text(page_html.replace("</body>", PROBE + "</body>"), encoding="utf-8")
    flags = CHROMIUM_FLAGS + [f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([exe, *flags, "--virtual-time-budget=10000", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=90)
    m = re.search(r'<pre id="img-probe">(.*?)</pre>', dom.stdout, re.S)
    assert m, f"the probe did not run (rc {dom.returncode}): {dom.stderr[-2000:]}"
    return json.loads(html.unescape(m.group(1)))


def test_demo_page_shows_every_figure(demo_report, tmp_path):
    """The records of experiments/demo_rl_ablation.yaml's arms (one factor at a time, analyses asked for) give a
    page with every figure listed and nothing under "Not drawn"; in Chromium every image decodes."""
    text = html.unescape(demo_report.read_text(encoding="utf-8"))
    alts = re.findall(r'<img src="data:image/png;base64,[^"]*" alt="([^"]*)"', text)
    for fig in DEMO_FIGURES:
        assert any(a.startswith(fig) for a in alts), (fig, alts)
    assert "<h2>Not drawn</h2>" not in text
    # the texts of Fig. 4 and Fig. S6 are on the page as tables too; the tables name each arm's checkpoint
    assert "<h3>Fig. 4: test reports per stage beside the reference</h3>" in text
    assert "<h3>Fig. S6: reward inversion, BLEU-4 vs entity_f1</h3>" in text and "opposite orders" in text
    assert "rl step 24/24 (best_val)" in text and "Tested at" in text
    assert "adaptive: nan" not in text  # arms without a named paper row are not listed as unplaced ones
    exe = _chromium()
    if exe is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium chromium-driver)")
    images = _probe(exe, demo_report.read_text(encoding="utf-8"), tmp_path)
    assert len(images) == len(alts) >= len(DEMO_FIGURES)
    bad = [im for im in images if not im["ok"] or im["w"] < 100 or im["h"] < 100]
    assert not bad, bad


def test_pending_runs_are_said_to_be_not_run_yet(demo_experiment_dir, demo_report, tmp_path):
    """The demo runs a selection of its study's arm x seed runs: the page says what the pending ones are."""
    from reports.build import build_report

    assert "not ended yet" not in demo_report.read_text(encoding="utf-8")  # every run of the fixture is complete
    root = tmp_path / "exp"
    shutil.copytree(demo_experiment_dir, root)
    index = json.loads((root / "index.json").read_text())
    index["runs"][-1]["status"] = "pending"
    (root / "index.json").write_text(json.dumps(index))
    page = build_report(root, tmp_path / "report", B=200).read_text(encoding="utf-8")
    assert "pending 1; pending runs were asked for and have not ended yet" in page
