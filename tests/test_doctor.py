"""gradian.doctor: the in-module unsloth window matches constraints/unsloth.txt, drift detection,
and the promise that unsloth is never imported into the caller (and never at all without CUDA)."""
import json, os, subprocess, sys, textwrap
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

from gradian.core import DataError
from gradian.doctor import (UNSLOTH_WINDOW, PACKAGES, parse_constraints, window_drift, outside_window,
                            backend_status, doctor_report, format_doctor)

ROOT = Path(__file__).resolve().parents[1]
FAKE_MSG = "fake unsloth: cannot find any torch accelerator"


def _py(code, env=None, check=True):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          check=check, env={**os.environ, **(env or {})}, cwd=ROOT)


# --- the window -------------------------------------------------------------------------------

def test_window_matches_constraints_file():
    path = ROOT / "constraints" / "unsloth.txt"
    file = parse_constraints(path.read_text(), path=path)
    assert file == {k: SpecifierSet(v) for k, v in UNSLOTH_WINDOW.items()}
    assert {"torch", "transformers", "trl", "datasets"} <= set(file)


def test_parse_constraints_bad_line_names_file_and_line():
    with pytest.raises(DataError) as e:
        parse_constraints("# c\ntorch<2.12\n-e .\n", path="c.txt")
    assert str(e.value).startswith("c.txt:3:") and "fix:" in str(e.value)


@pytest.mark.parametrize("name,version,inside", [
    ("torch", "2.11.0", True), ("torch", "2.11.0+cu126", True), ("torch", "2.11.3+cpu", True),
    ("torch", "2.12.0", False), ("torch", "2.13.0+cpu", False), ("torch", "2.10.1+cu126", False),
    ("torch", "2.12.0rc1", False), ("torchvision", "0.26.0+cu126", True), ("torchvision", "0.27.0", False),
    ("transformers", "5.5.0", True), ("transformers", "5.5.0+local", True), ("transformers", "5.5.1", False),
    ("transformers", "5.24.0", False), ("trl", "0.24.0", True), ("trl", "1.16.0", False),
    ("datasets", "4.3.9", True), ("datasets", "4.4.0", False),
])
def test_window_drift_cases(name, version, inside):
    warns = window_drift({name: version})
    assert len(warns) == (0 if inside else 1)
    if not inside:
        assert warns[0].startswith(f"{name} {version} ") and UNSLOTH_WINDOW[name] in warns[0]
        assert "unsloth/GPU" in warns[0]


def test_window_drift_not_installed_and_unrelated():
    assert window_drift({k: None for k in UNSLOTH_WINDOW}) == []
    assert window_drift({"peft": "99.0", "numpy": "1.0"}) == []   # not in the window: never drift
    assert window_drift({}) == []


def test_window_drift_name_normalization_and_custom_window():
    assert outside_window({"Torch": "2.13.0+cpu"}, UNSLOTH_WINDOW) == {"torch": "2.13.0+cpu"}
    w = {"sentence_transformers": ">=3"}
    assert window_drift({"sentence-transformers": "2.7.0"}, w)[0].startswith("sentence-transformers 2.7.0")
    assert window_drift({"sentence-transformers": "3.1.0"}, w) == []


def test_unparseable_installed_version_is_reported():
    assert len(window_drift({"torch": "not-a-version"})) == 1


# --- the report -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def report():
    return doctor_report()


def test_report_structure_and_json(report):
    assert json.loads(json.dumps(report)) == report
    assert set(report["packages"]) == set(PACKAGES)
    assert report["packages"]["transformers"] and report["packages"]["peft"]
    assert set(report["backends"]) == {"hf", "trl", "unsloth"}
    assert report["backends"]["hf"]["ready"] is True
    assert report["python"]["executable"] == sys.executable
    t = report["torch"]
    assert t["device_count"] == len(t["devices"]) == len(t["capabilities"])
    if not t["cuda_available"]:
        assert report["backends"]["unsloth"] == {"ready": False, "reason": report["backends"]["unsloth"]["reason"]}
        assert "needs CUDA (no CUDA device visible)" in report["backends"]["unsloth"]["reason"]
    if report["packages"]["unsloth"] is None:
        assert "not installed: pip install unsloth unsloth_zoo" in report["backends"]["unsloth"]["reason"]


def test_report_warnings_match_drift(report):
    "The window drift is listed always, but warned about only where it applies (CUDA visible or unsloth installed)."
    drift = window_drift(report["packages"])
    gpu = report["torch"]["cuda_available"] or report["packages"]["unsloth"]
    assert [w for w in report["warnings"] if "unsloth GPU window" in w] == (drift if gpu else [])
    assert set(report["unsloth_window"]["outside"]) == {w.split()[0] for w in drift}


def test_model_line(report, smol_path):
    assert report["model"]["present"] and report["model"]["path"] == str(smol_path)
    assert report["model"]["size_bytes"] == smol_path.stat().st_size


def test_format_doctor(report):
    txt = format_doctor(report)
    assert txt.isascii()
    lines = txt.splitlines()
    hdr = next(i for i, l in enumerate(lines) if l.split()[:2] == ["package", "version"])
    col = lines[hdr].index("status")
    rows = lines[hdr + 1: hdr + 1 + len(PACKAGES)]
    assert [r.split()[0] for r in rows] == list(report["packages"])
    gpu = report["torch"]["cuda_available"] or report["packages"]["unsloth"]
    for r, (name, v) in zip(rows, report["packages"].items()):
        want = "missing" if v is None else "warning" if gpu and name in report["unsloth_window"]["outside"] else "ok"
        assert r[col:].split()[0] == want, r
    for b, s in report["backends"].items():
        assert any(l.split()[:1] == [b] and s["reason"] in l for l in lines)
    for w in report["warnings"]: assert f"warning: {w}" in txt
    assert any(l.startswith("CUDA ") for l in lines) and any(l.startswith("model ") for l in lines)


# --- unsloth is never imported into the caller ----------------------------------------------------

def test_importing_doctor_does_not_import_unsloth():
    out = _py("""
        import sys, json
        import gradian.doctor
        a = 'unsloth' in sys.modules
        from gradian.doctor import doctor_report
        r = doctor_report()
        print(json.dumps([a, 'unsloth' in sys.modules, 'unsloth_zoo' in sys.modules]))
    """).stdout
    assert json.loads(out.strip().splitlines()[-1]) == [False, False, False]


def test_cli_doctor_json():
    out = _py("import sys, json; from gradian.cli import main; main(['doctor', '--json']); "
              "print(json.dumps('unsloth' in sys.modules))").stdout
    body, flag = out.rsplit("\n", 2)[0], out.strip().splitlines()[-1]
    rep = json.loads(body)
    assert rep["backends"]["hf"]["ready"] and set(rep["backends"]) == {"hf", "trl", "unsloth"}
    assert flag == "false"


@pytest.fixture
def fake_unsloth(tmp_path):
    "A site dir holding an 'unsloth' that is installed (dist-info) and raises on import, like the real one on CPU."
    pkg = tmp_path / "unsloth"; pkg.mkdir()
    (pkg / "__init__.py").write_text(f"raise NotImplementedError({FAKE_MSG!r})\n")
    di = tmp_path / "unsloth-2099.1.1.dist-info"; di.mkdir()
    (di / "METADATA").write_text("Metadata-Version: 2.1\nName: unsloth\nVersion: 2099.1.1\n")
    return tmp_path


def test_fake_unsloth_is_real_enough(fake_unsloth):
    "Guard for the two tests below: the fake is found as installed and its import does raise."
    r = _py("import unsloth", env={"PYTHONPATH": str(fake_unsloth)}, check=False)
    assert r.returncode != 0 and FAKE_MSG in r.stderr
    r = _py("import importlib.metadata as m; print(m.version('unsloth'))", env={"PYTHONPATH": str(fake_unsloth)})
    assert r.stdout.strip() == "2099.1.1"


def test_installed_unsloth_without_cuda_is_not_imported(fake_unsloth):
    out = _py("""
        import sys, json
        from gradian.doctor import doctor_report
        r = doctor_report()
        print(json.dumps([r['packages']['unsloth'], r['backends']['unsloth'], 'unsloth' in sys.modules]))
    """, env={"PYTHONPATH": str(fake_unsloth), "CUDA_VISIBLE_DEVICES": ""}).stdout
    ver, status, imported = json.loads(out.strip().splitlines()[-1])
    assert ver == "2099.1.1"
    assert status == {"ready": False, "reason": "needs CUDA (no CUDA device visible)"}
    assert imported is False


def test_installed_unsloth_with_cuda_reports_import_error_isolated(fake_unsloth, monkeypatch):
    "With CUDA the import is tried in a child process: its error text comes back, the caller stays clean."
    monkeypatch.setenv("PYTHONPATH", str(fake_unsloth))
    s = backend_status({"unsloth": "2099.1.1", "trl": None}, cuda=True)["unsloth"]
    assert s["ready"] is False and FAKE_MSG in s["reason"] and "NotImplementedError" in s["reason"]
    assert "unsloth" not in sys.modules
    (fake_unsloth / "unsloth" / "__init__.py").write_text("")
    assert backend_status({"unsloth": "2099.1.1"}, cuda=True)["unsloth"]["ready"] is True
    assert "unsloth" not in sys.modules
