"""The declared floors, the probes of each feature that rests on an internal, and what a run
does where one is off: the feature is off, the run says so once at its start (in the cell and
the panel), and nothing raises from inside fit."""
import pathlib
import re

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.eager import context

import jupyter_supervisor
from jupyter_supervisor import capabilities, compat
from jupyter_supervisor.notebook import run as run_module
from jupyter_supervisor.notebook.magics import RunFailedError

import eager_models

ROOT = pathlib.Path(__file__).resolve().parent.parent
# The probes and the features off: what the floor stack must pass too (tests/test_floor.py).
pytestmark = pytest.mark.internals
DEADLINE = 60.0


@pytest.mark.parametrize("probe", compat.PROBES, ids=lambda p: f"{p.feature}: {p.what[:40]}")
def test_every_probe_holds_on_the_installed_stack(probe):
    """On every stack the package declares (this one, and the floor in tests/test_floor.py), each
    internal a feature reads is there; a release that moves one fails here, naming it."""
    assert probe.holds(), f"{probe.library} {capabilities._library_version(probe.library)} lacks " \
                          f"{probe.what} (feature {probe.feature!r}, checked on {probe.checked})"
    assert probe.feature in capabilities.FEATURES


def test_every_feature_has_a_probe():
    assert {p.feature for p in compat.PROBES} == set(capabilities.FEATURES)


def test_the_floors_are_the_same_in_the_requirements_the_readme_and_the_docs():
    pyproject = (ROOT / "pyproject.toml").read_text()
    docs = (ROOT / "docs" / "versions.md").read_text()
    readme = (ROOT / "README.md").read_text()
    for name, floor in capabilities.FLOORS.items():
        assert re.search(rf'"{name}(-cpu)?(\[and-cuda\])?>={re.escape(floor)}"', pyproject), name
        label = {"tensorflow": "TensorFlow", "keras": "Keras"}[name]
        assert f"{label} {floor}" in docs and f"{label} {floor}" in readme, name


@pytest.mark.parametrize("libraries, said", [
    ({"tensorflow": "2.21.0", "keras": "3.15.1"}, []),
    ({"tensorflow": "2.16.2", "keras": "3.7.0"}, []),
    ({"tensorflow": "2.15.1", "keras": "3.4.1"}, ["TensorFlow 2.15.1", "Keras 3.4.1"]),
    ({"tensorflow": "2.22.0rc1", "keras": "3.6.0"}, ["Keras 3.6.0"]),
    ({"tensorflow": None, "keras": "3.10.0.dev2025"}, []),
])
def test_a_stack_below_the_floor_is_said(libraries, said):
    notes = capabilities._below_floor(libraries)
    assert [n.split(" is older")[0] for n in notes] == said
    assert all("install" in n for n in notes)


def test_the_report_lists_the_libraries_and_every_feature():
    report = jupyter_supervisor.versions()
    text = report.text()
    assert f"tensorflow {capabilities.tensorflow_version()}" in text
    assert f"keras {capabilities.installed('keras')}" in text
    for name in capabilities.FEATURES:
        assert re.search(rf"^  {re.escape(name)} +holds ", text, re.M), name
    assert report.off == {}


def test_supervise_versions_prints_the_report(ip, capsys):
    ip.run_line_magic("supervise", "versions")
    out = capsys.readouterr().out
    assert out.startswith("Installed: tensorflow ")
    assert "data order" in out and "holds" in out


# ------------------------------------------------------------- a feature off on this stack

FIT = ("model.fit(dataset, epochs=3, callbacks=[sv.callback, crash], verbose=0)\n")


@pytest.fixture
def keras_fit(ip):
    with context.eager_mode():
        yield ip
        late = run_module.stop_all(timeout=DEADLINE)
        assert not late, f"runs did not stop: {late}"


def _raising(name):
    def refuse(*args, **kwargs):
        raise AssertionError(f"compat.{name} was called though its feature is off")
    return refuse


def _fit_session(ip, logdir, crash_at, capsys):
    """One cell run: a fresh model, a tf.data input, fit crashing at batch ``crash_at`` (or
    not); returns (the run, what the cell printed, the model)."""
    x, y = eager_models.data()
    ip.user_ns.update(
        model=eager_models.make_model(), tf=tf,
        dataset=tf.data.Dataset.from_tensor_slices((x, y)).batch(8),
        crash=eager_models.at_batch(crash_at or 10_000, _crash))
    line = f"--logdir {logdir} --save-model-secs 0.000001 --wait"
    if crash_at:
        with pytest.raises(RunFailedError, match="crash"):
            ip.run_cell_magic("supervise", line, FIT)
    else:
        ip.run_cell_magic("supervise", line, FIT)
    return jupyter_supervisor.get_run(logdir.name), capsys.readouterr().out, \
        ip.user_ns["model"]


def _crash():
    raise RuntimeError("crash")


def _weights(model):
    return [v.numpy() for v in model.variables] + [v.numpy() for v in model.optimizer.variables]


@pytest.mark.parametrize("feature, entries", [
    ("data order", ["fit_epoch_iterator", "input_kind", "adapter_dataset", "count_iterators"]),
    ("build before restore", ["symbolic_build", "compiled_unbuilt", "fit_data_spec"]),
    ("background save", ["checkpoint_tensors", "call_flat"]),
])
def test_a_feature_off_is_said_once_and_the_resume_still_holds(keras_fit, tmp_path, capsys,
                                                               monkeypatch, feature, entries):
    """As on a Keras that lacks the internals of ``feature``: its entries are never called, the
    run says once at its start, in the cell and in the panel's output, what is off and what
    still holds, and a crashed fit resumes (an unshuffled input: the same weights)."""
    ip = keras_fit
    whole_run, _, whole = _fit_session(ip, tmp_path / "whole", None, capsys)
    assert whole_run.status == "finished"
    monkeypatch.setitem(capabilities._FOUND, feature, "Keras 3.0 lacks what it reads (a test)")
    for name in entries:
        monkeypatch.setattr(compat, name, _raising(name))
    logdir = tmp_path / "crashed"
    crashed, said, _ = _fit_session(ip, logdir, 11, capsys)
    assert crashed.status == "failed" and "crash" in str(crashed.exception)
    notes = [line for line in said.splitlines() if line.startswith("Off on this stack")]
    assert len(notes) == 1 and f": {feature} (" in notes[0], said
    assert "Keras 3.0 lacks" in notes[0]
    still = capabilities.FEATURES[feature].still
    assert still == "-" or f"Still: {still}." in notes[0]
    panel = crashed.history.outputs.text()
    assert panel.count("Off on this stack") == 1 and f": {feature} (" in panel
    resumed_run, said_again, resumed = _fit_session(ip, logdir, None, capsys)
    assert resumed_run.status == "finished", resumed_run.exception
    assert resumed_run.restored_from is not None
    assert said_again.count("Off on this stack") == 1
    assert int(resumed.optimizer.iterations) == int(whole.optimizer.iterations) == 24
    for a, b in zip(_weights(resumed), _weights(whole)):
        np.testing.assert_array_equal(a, b)


def test_without_what_fit_needs_sv_callback_says_what_to_do_before_fit(keras_fit, tmp_path,
                                                                      monkeypatch, capsys):
    monkeypatch.setitem(capabilities._FOUND, "fit", "Keras 3.0 lacks Trainer._initial_epoch")
    with pytest.raises(RuntimeError, match=r"sv.callback needs what this Keras lacks: Keras 3.0 "
                                           r"lacks Trainer._initial_epoch\. Install keras>="):
        _fit_session(keras_fit, tmp_path / "nofit", None, capsys)
