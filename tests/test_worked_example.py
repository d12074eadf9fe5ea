"""The worked example (nbs/tutorials/worked_example.ipynb) with its slow cells: a fresh fine-tune of the embedded model,
its analysis and three retrainings must reproduce the saved run's key numbers within the tolerances the notebook states
(its last cell compares them). About 15 minutes on two CPU cores."""
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NB = ROOT / "nbs" / "tutorials" / "worked_example.ipynb"


@pytest.mark.slow
def test_a_fresh_run_reproduces_the_saved_worked_example(monkeypatch):
    from nbdev.test import test_nb
    monkeypatch.delenv("GRADIAN_REFRESH_EXAMPLE", raising=False)          # compare, never overwrite the saved run
    ok, secs = test_nb(NB, skip_flags=["gpu"], basepath=ROOT, showerr=True, cell_timeout=3600)
    assert ok, "the worked example's fresh run failed or told another story (the cell's traceback is in the captured stderr)"
