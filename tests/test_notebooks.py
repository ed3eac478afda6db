"""The notebooks in notebooks/ run top to bottom as users run them (RLPT_TINY=1: tiny sizes, temporary folders),
and are committed without outputs."""
import os

import nbformat
import pytest

NOTEBOOKS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "notebooks")
NAMES = ("quickstart", "ablate_rewards", "inspect_rollouts")
# cell id -> what its outputs must hold: text it prints or displays, or "image/png" for a figure
EXPECTED = {
    "quickstart": {"summary": "held-out pass@1", "learning-curve": "image/png", "samples": "greedy",
                   "evaluate": "suite quickstart: policy pass1"},
    "ablate_rewards": {"sweep": "[sweep] 2 jobs (ok 2, failed 0, missing 0)", "table": "rl_pass1.mean",
                       "bars": "image/png", "curves": "image/png", "compare": "delta"},
    "inspect_rollouts": {"load": "rollouts over steps", "rollouts": "best 3", "tags": "wrong_answer",
                         "histogram": "image/png"},
}


def read(name: str):
    return nbformat.read(os.path.join(NOTEBOOKS, f"{name}.ipynb"), as_version=4)


def output_text(cell) -> str:
    """Everything a cell printed or displayed as text (stdout, stderr, text/plain, text/html), and its mime types."""
    parts = []
    for out in cell.outputs:
        if out.output_type == "stream":
            parts.append(out.text)
        elif out.output_type in ("display_data", "execute_result"):
            parts += list(out.data) + [out.data.get("text/plain", ""), out.data.get("text/html", "")]
    return "\n".join(parts)


@pytest.mark.parametrize("name", NAMES)
def test_notebook_is_committed_stripped(name):
    nb = read(name)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, (
                f"{name}.ipynb cell {cell.id} holds outputs: clear them before committing (Jupyter: Edit > Clear "
                "Outputs of All Cells)")
    params = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(params) == 1 and 'os.environ.get("RLPT_TINY") == "1"' in params[0].source
    assert nb.cells[0].cell_type == "markdown" and "RLPT_TINY=1" in nb.cells[0].source
    assert set(EXPECTED[name]) <= {c.id for c in nb.cells}


def execute(name: str, tmp_path, monkeypatch, **parameters):
    """Run notebook `name` top to bottom with RLPT_TINY=1 in a fresh kernel, papermill-style `parameters`
    injected after its parameters cell; check the outputs EXPECTED names; returns the executed notebook."""
    from nbclient import NotebookClient

    nb = read(name)
    if parameters:
        at = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
        cell = nbformat.v4.new_code_cell("\n".join(f"{k} = {v!r}" for k, v in parameters.items()))
        cell.metadata["tags"] = ["injected-parameters"]
        nb.cells.insert(at + 1, cell)
    monkeypatch.setenv("RLPT_TINY", "1")  # the kernel inherits this process's environment
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the notebooks' tempfile.mkdtemp() folders land in tmp_path
    # A failing cell raises CellExecutionError with the cell's source and traceback.
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    cells = {c.id: c for c in nb.cells}
    for cid, want in EXPECTED[name].items():
        got = output_text(cells[cid])
        assert want in got, f"{name}.ipynb cell {cid}: {want!r} not in its outputs:\n{got[-2000:]}"
    return nb


def test_quickstart_then_inspect_its_rollouts(tmp_path, monkeypatch):
    execute("quickstart", tmp_path, monkeypatch)
    runs = [p for p in tmp_path.iterdir() if p.name.startswith("rlpt-quickstart-")]
    assert len(runs) == 1 and (runs[0] / "rl" / "trajectories").is_dir()
    # the run the quickstart notebook made is the one inspect_rollouts reads (as a user would chain them)
    execute("inspect_rollouts", tmp_path, monkeypatch, RUN=str(runs[0]))


def test_ablate_rewards_runs(tmp_path, monkeypatch):
    execute("ablate_rewards", tmp_path, monkeypatch)
