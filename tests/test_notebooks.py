"""Every module notebook, guide and tutorial runs under pytest: one test per notebook, so a failing cell shows up in
the pytest summary with the notebook's name (the experiment notebooks run through papermill in the suite's tests). Cells flagged with the project's `tst_flags`
(`slow`, `gpu`) are skipped here exactly as `nbdev-test` skips them."""
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NBS = sorted(p for d in ("", "guides", "tutorials") for p in (ROOT / "nbs" / d).glob("*.ipynb") if not p.name.startswith("_"))


@pytest.mark.parametrize("nb", NBS, ids=[p.relative_to(ROOT / "nbs").with_suffix("").as_posix() for p in NBS])
def test_notebook_runs(nb, capsys):
    from nbdev.config import get_config
    from nbdev.test import test_nb

    flags = get_config(ROOT).tst_flags.split()
    ok, secs = test_nb(nb, skip_flags=flags, basepath=ROOT, showerr=True)
    assert ok, f"{nb.name} failed (the cell's traceback is in the captured stderr above)"
