"""Executes tutorial notebooks and stores their outputs as they are committed.

    .venv/bin/python notebooks/store_outputs.py notebooks/NAME.ipynb [...]

What ``jupyter nbconvert --execute --to notebook --inplace`` does (in the notebook's folder, as
nbval runs it), except that nothing of the machine that ran it is stored: its paths (this
environment's packages and standard library, the checkout, the home and temp folders) are
replaced in the outputs and the widget state, and no execution timestamps are recorded. A
traceback through a library then reads ``File site-packages/keras/...``. nbval never compares
tracebacks nor widget state, so the stored notebook still checks what it checked;
tests/test_readme.py fails on a committed notebook that holds such a path.
"""
import os
import re
import site
import sys
import sysconfig
import tempfile

import nbformat
from nbconvert.preprocessors import ExecutePreprocessor

CELL_TIMEOUT_SECS = 600  # as setup.cfg's --nbval-cell-timeout
CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _replacements():
    """(pattern, replacement) pairs, the most specific paths first."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    pairs = [(re.escape(tempfile.gettempdir()) + r"/ipykernel_\d+/\d+\.py", "<cell>")]
    for packages in site.getsitepackages() + [site.getusersitepackages()]:
        pairs.append((re.escape(packages + os.sep), "site-packages/"))
    pairs += [
        (re.escape(sysconfig.get_paths()["stdlib"] + os.sep), version + "/"),
        (re.escape(CHECKOUT + os.sep), ""),
        (re.escape(sys.prefix + os.sep), "<env>/"),
        (re.escape(os.path.expanduser("~") + os.sep), "~/"),
        (re.escape(tempfile.gettempdir() + os.sep), "<tmp>/"),
    ]
    return [(re.compile(pattern), replacement) for pattern, replacement in pairs]


def scrub(value, replacements):
    """``value`` (JSON: dicts, lists, strings) with the machine's paths replaced."""
    if isinstance(value, str):
        for pattern, replacement in replacements:
            value = pattern.sub(replacement, value)
        return value
    if isinstance(value, list):
        return [scrub(item, replacements) for item in value]
    if isinstance(value, dict):
        return {key: scrub(item, replacements) for key, item in value.items()}
    return value


def store(path: str) -> None:
    """Executes the notebook at ``path`` and writes it back, scrubbed."""
    notebook = nbformat.read(path, as_version=4)
    ExecutePreprocessor(timeout=CELL_TIMEOUT_SECS, record_timing=False).preprocess(
        notebook, {"metadata": {"path": os.path.dirname(os.path.abspath(path))}})
    replacements = _replacements()
    for cell in notebook.cells:
        cell.metadata.pop("execution", None)  # timestamps of an earlier execution
        if "outputs" in cell:
            cell.outputs = nbformat.from_dict(scrub(cell.outputs, replacements))
    if "widgets" in notebook.metadata:
        notebook.metadata.widgets = nbformat.from_dict(
            scrub(notebook.metadata.widgets, replacements))
    nbformat.write(notebook, path)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for notebook_path in sys.argv[1:]:
        print("executing", notebook_path, flush=True)
        store(notebook_path)
