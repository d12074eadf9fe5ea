import json, subprocess, sys
from pathlib import Path

from gradian.doctor import UNSLOTH_WINDOW, parse_constraints

ROOT = Path(__file__).resolve().parents[1]


def test_window_matches_constraints_file():
    from packaging.specifiers import SpecifierSet
    file = parse_constraints((ROOT / "constraints" / "unsloth.txt").read_text())
    assert {k: SpecifierSet(v) for k, v in UNSLOTH_WINDOW.items()} == {k: SpecifierSet(v) for k, v in file.items()}


def test_doctor_cli_json_and_no_unsloth_import():
    out = subprocess.run([sys.executable, "-c", "import sys, json; from gradian.cli import main; main(['doctor', '--json']); "
                          "print(json.dumps('unsloth' in sys.modules))"], capture_output=True, text=True, check=True).stdout
    body, flag = out.rsplit("\n", 2)[0], out.strip().splitlines()[-1]
    rep = json.loads(body)
    assert rep["backends"]["hf"]["ready"] and set(rep["backends"]) == {"hf", "trl", "unsloth"}
    assert flag == "false"
