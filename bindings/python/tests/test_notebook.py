"""Runs every code cell of examples/python/flashattn.ipynb in order, so the notebook cannot rot."""
import json
from pathlib import Path

NOTEBOOK = Path(__file__).resolve().parents[3] / "examples" / "python" / "flashattn.ipynb"


def test_notebook_runs(capsys):
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    code = [c for c in cells if c["cell_type"] == "code"]
    assert code, "the notebook has code cells"
    scope = {"__name__": "__notebook__"}
    for i, cell in enumerate(code):
        source = "".join(cell["source"])
        exec(compile(source, f"{NOTEBOOK.name}[cell {i}]", "exec"), scope)
    out = capsys.readouterr().out
    # The CPU cell compares float32 attention with float64: the error must be float32-sized.
    errors = [float(line.rsplit(" ", 1)[1]) for line in out.splitlines()
              if "max abs error vs float64:" in line]
    assert errors and errors[0] < 1e-5, out
