"""%%supervise and %supervise through a real InteractiveShell (no kernel): parsing, help, errors,
the state machine, --max-steps, namespaces and output routing.

Each test builds its model in a graph of its own, in graph mode for the test's thread only (the
rest of the suite may want eager mode); its runs are stopped before the graph is left.
"""
import logging
import os
import re
import sys
import threading

import numpy as np
import pytest
import tensorflow as tf
from IPython.core.error import UsageError
from tensorflow.python.eager import context

import jupyter_supervisor
from jupyter_supervisor.notebook import run as run_module
from jupyter_supervisor.notebook.magics import RunFailedError
from jupyter_supervisor.view import text

import eager_models
from helpers import LOOP, build_model, newest_step

v1 = tf.compat.v1
DEADLINE = 60.0       # seconds; generous for a loaded 2-core machine, never reached when passing


@pytest.fixture
def model(ip):
    with context.graph_mode(), tf.Graph().as_default() as graph:
        build_model(ip.user_ns)
        yield graph
        late = run_module.stop_all(timeout=DEADLINE)
        assert not late, f"runs did not stop: {late}"


def supervise(ip, line, body=LOOP):
    return ip.run_cell_magic("supervise", line, body)


# -------------------------------------------------------------------------- options and help

OPTIONS = {  # option: its default as the help states it (None: a flag or no stated number)
    "--logdir": "none", "--name": None, "--save-model-secs": "60",
    "--save-summaries-secs": "10", "--checkpoint-basename": "model.ckpt", "--keep": "5",
    "--keep-best": "none", "--keep-best-mode": "auto",
    "--max-steps": "no limit", "--init-fn": "none", "--repeat": None, "--wait": None,
    "--master": "an in-process session", "--cluster": "none", "--job": "none",
    "--task-index": "0", "--chief": None,
    "--no-chief": None, "--recovery-wait-secs": "5", "--stall-secs": "30",
    "--stop-grace-secs": "30", "--preemption-notice": "auto",
    "--on-nan": "stop", "--max-rollbacks": "3",
}


def test_help_lists_every_option_with_its_default(ip):
    text = ip.object_inspect_text("%%supervise")
    assert "%%supervise [--logdir PATH]" in text
    options = text.split("options:", 1)[1]
    entries = {}
    for line in options.splitlines():
        if line.startswith("  --"):
            current = line.split()[0]
            entries[current] = line
        elif line.strip() and entries:
            entries[current] += " " + line.strip()
    assert set(entries) == set(OPTIONS)
    for option, default in OPTIONS.items():
        assert len(entries[option].split()) > 4, f"{option} has no meaning in the help"
        if default is not None:
            assert f"Default: {default}" in " ".join(entries[option].split()), option
    line_help = ip.object_inspect_text("%supervise")
    for command in ("list", "stop", "resume", "save", "wait", "show"):
        assert f"{command}:" in line_help


@pytest.mark.parametrize("line, expected", [
    ("--bogus 1", "unrecognized arguments: --bogus"),
    ("--keep x", "argument --keep: invalid int value: 'x'"),
    ("--keep 0", "Invalid value for argument `--keep`. Received: --keep=0. Expected an "
                 "integer >= 1."),
    ("--save-model-secs -1", "Invalid value for argument `--save-model-secs`. Received: "
                             "--save-model-secs=-1.0. Expected a number >= 0."),
    ("--max-steps 0", "Invalid value for argument `--max-steps`"),
    ("--checkpoint-basename a/b", "Invalid value for argument `--checkpoint-basename`"),
    ("--init-fn no_such_function", "--init-fn=no_such_function, which is not defined"),
])
def test_bad_option_is_a_usage_error(ip, model, line, expected):
    before = len(jupyter_supervisor.runs())
    with pytest.raises(UsageError) as info:
        supervise(ip, line)
    assert expected in str(info.value)
    assert len(jupyter_supervisor.runs()) == before


def test_empty_body_and_bad_commands_are_usage_errors(ip, model):
    with pytest.raises(UsageError, match="needs a cell body"):
        supervise(ip, "--name empty", "\n  \n")
    with pytest.raises(UsageError, match="invalid choice: 'frobnicate'"):
        ip.run_line_magic("supervise", "frobnicate")
    with pytest.raises(UsageError, match="no run named 'nonesuch'"):
        ip.run_line_magic("supervise", "stop nonesuch")


# -- TensorFlow 2: eager execution, Keras fit and custom loops ---------------------------------

FIT = "model.fit(x, y, batch_size=8, epochs=3, callbacks=[sv.callback], verbose=0)\n"
CUSTOM = """
sv.track(model=model, optimizer=model.optimizer)
while not sv.should_stop():
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
    grads = tape.gradient(loss, model.trainable_variables)
    model.optimizer.apply_gradients(zip(grads, model.trainable_variables))
    sv.step(loss=loss)
"""


@pytest.fixture
def keras_model(ip):
    """A small compiled Keras model and its data (8 batches of 8) in the shell, eager mode."""
    with context.eager_mode():
        x, y = eager_models.data()
        ip.user_ns.update(model=eager_models.make_model(), x=x, y=y, tf=tf)
        yield
        late = run_module.stop_all(timeout=DEADLINE)
        assert not late, f"runs did not stop: {late}"


def tf2_checkpoint_step(logdir):
    path = tf.train.latest_checkpoint(logdir)
    return None if path is None else int(path.rsplit("-", 1)[1])


def test_keras_fit_under_supervise_checkpoints_and_resumes(ip, keras_model, tmp_path, capsys):
    logdir = str(tmp_path / "fit")
    supervise(ip, f"--logdir {logdir} --wait", FIT)
    run = jupyter_supervisor.get_run("fit")
    assert run.status == "finished" and run.exception is None
    assert run.global_step == tf2_checkpoint_step(logdir) == 24      # 3 epochs of 8 batches
    assert "sv" in ip.user_ns and ip.user_ns["sv"] is run.supervisor
    # Re-running the cell (a new model, as after a kernel restart) continues from the step.
    ip.user_ns["model"] = eager_models.make_model()
    supervise(ip, f"--logdir {logdir} --wait",
              "model.fit(x, y, batch_size=8, epochs=5, callbacks=[sv.callback], verbose=0)\n")
    run = jupyter_supervisor.get_run("fit")
    assert run.restored_from.endswith("-24")
    assert run.global_step == tf2_checkpoint_step(logdir) == 40
    assert int(ip.user_ns["model"].optimizer.iterations.numpy()) == 40


def test_max_steps_stops_keras_fit_and_a_custom_loop_exactly(ip, keras_model, tmp_path):
    supervise(ip, f"--logdir {tmp_path / 'fitmax'} --max-steps 13 --wait", FIT)
    run = jupyter_supervisor.get_run("fitmax")
    assert run.status == "finished" and run.global_step == 13
    assert tf2_checkpoint_step(str(tmp_path / "fitmax")) == 13
    supervise(ip, f"--logdir {tmp_path / 'loopmax'} --max-steps 21 --wait", CUSTOM)
    run = jupyter_supervisor.get_run("loopmax")
    assert run.status == "finished" and run.global_step == 21
    assert tf2_checkpoint_step(str(tmp_path / "loopmax")) == 21
    assert run.history.snapshot().scalars["loss"].steps[-1] <= 21


def test_stop_ends_a_custom_loop_at_a_step_boundary_with_a_final_checkpoint(ip, keras_model,
                                                                            tmp_path, wait_for):
    logdir = str(tmp_path / "loopstop")
    supervise(ip, f"--logdir {logdir}", CUSTOM)
    run = jupyter_supervisor.get_run("loopstop")
    wait_for(lambda: (run.global_step or 0) > 20, timeout=DEADLINE, what="training")
    assert run.stop(timeout=DEADLINE)
    assert run.status == "stopped" and run.exception is None
    assert tf2_checkpoint_step(logdir) == run.global_step > 20


def test_a_diverging_keras_fit_never_saves_a_non_finite_model(ip, keras_model, tmp_path):
    import keras
    logdir = str(tmp_path / "diverging")
    supervise(ip, f"--logdir {logdir} --max-steps 8 --wait", FIT)     # a good checkpoint
    good = tf.train.latest_checkpoint(logdir)
    ip.user_ns["model"].optimizer.learning_rate.assign(1e6)            # diverges at once
    with pytest.raises(RunFailedError):
        supervise(ip, f"--logdir {logdir} --save-model-secs 0 --wait",
                  "model.fit(x, y * 1e30, batch_size=8, epochs=50, callbacks=[sv.callback],"
                  " verbose=0)\n")
    run = jupyter_supervisor.get_run("diverging")
    assert isinstance(run.exception, jupyter_supervisor.NonFiniteError)
    assert f"the newest good checkpoint is {good}" in str(run.exception)
    assert tf.train.latest_checkpoint(logdir) == good                  # nothing newer saved
    reader = tf.train.load_checkpoint(good)
    for key in reader.get_variable_to_shape_map():
        value = reader.get_tensor(key)
        if getattr(value, "dtype", None) is not None and value.dtype.kind == "f":
            assert np.isfinite(value).all(), key
    del keras


def test_a_keras_fit_rolls_back_then_stops_after_max_rollbacks(ip, keras_model, tmp_path):
    """Targets of 1e30 (their squared error overflows float32): every epoch-end save rolls
    back to the good checkpoint, twice, then the run stops; the panel shows both."""
    from jupyter_supervisor.view import text  # pylint: disable=import-outside-toplevel
    logdir = str(tmp_path / "fitrollback")
    supervise(ip, f"--logdir {logdir} --max-steps 8 --wait", FIT)     # a good checkpoint
    good = tf.train.latest_checkpoint(logdir)
    with pytest.raises(RunFailedError):
        supervise(ip, f"--logdir {logdir} --save-model-secs 0 --on-nan rollback "
                      "--max-rollbacks 2 --wait",
                  "import keras\n"
                  "save = keras.callbacks.LambdaCallback(on_epoch_end=lambda e, l: "
                  "sv.save_now())\n"
                  "model.fit(x, y * 1e30, batch_size=8, epochs=50, verbose=0, "
                  "callbacks=[sv.callback, save])\n")
    run = jupyter_supervisor.get_run("fitrollback")
    assert isinstance(run.exception, jupyter_supervisor.NonFiniteError)
    assert " again after 2 rollbacks to the newest good checkpoint: " in run.error_line
    assert f"the newest good checkpoint is {good}" in run.error_line
    snap = run.history.snapshot()
    assert [(r.count, r.path, r.restored_step) for r in snap.rollbacks] == [
        (1, good, 8), (2, good, 8)]
    assert "Rolled back 2 times (at most 2)" in text.text_summary(run)
    assert tf.train.latest_checkpoint(logdir) == good                  # nothing newer saved


def test_fit_without_the_callback_is_told_once(ip, keras_model, tmp_path, caplog):
    supervise(ip, f"--logdir {tmp_path / 'nocallback'} --wait",
              "model.fit(x, y, batch_size=8, epochs=1, verbose=0)\n")
    run = jupyter_supervisor.get_run("nocallback")
    assert run.history.snapshot().output.count(
        "Warning: The body never called sv.track(...) nor passed sv.callback") == 1
    assert not [r for r in caplog.records
                if r.levelno >= logging.WARNING and "never called sv.track" in r.getMessage()]


def test_max_steps_without_global_step_is_a_clear_error(ip):
    with context.graph_mode(), tf.Graph().as_default():
        ip.user_ns["train_op"] = v1.assign_add(v1.get_variable("c", initializer=0.0), 1.0)
        with pytest.raises(ValueError, match="get_or_create_global_step"):
            supervise(ip, "--name nostep --max-steps 5")


# ---------------------------------------------------------------------------- the run itself

@pytest.mark.parametrize("repeat", [False, True], ids=["loop", "repeat"])
def test_max_steps_stops_exactly_at_the_step(ip, model, tmp_path, repeat):
    logdir = str(tmp_path / "exact")
    body = "sess.run(train_op)\n" if repeat else LOOP
    supervise(ip, f"--logdir {logdir} --max-steps 1234 --wait"
                  + (" --repeat" if repeat else ""), body)
    run = jupyter_supervisor.get_run("exact")
    assert run.status == "finished"
    assert run.global_step == 1234
    assert newest_step(logdir) == 1234
    # Re-running at the limit restores and finishes without executing the body.
    ip.user_ns.pop("ran", None)
    supervise(ip, f"--logdir {logdir} --max-steps 1234 --wait", "ran = True\n" + LOOP)
    assert jupyter_supervisor.get_run("exact").status == "finished"
    assert "ran" not in ip.user_ns


# A body that never looks at sv.should_stop(), as notebooks often write it.
IGNORING = "while True:\n    sess.run(train_op)\n"


def test_the_same_final_step_everywhere_at_the_end_of_a_run(ip, model, tmp_path, capsys):
    logdir = str(tmp_path / "everywhere")
    supervise(ip, f"--logdir {logdir} --max-steps 777 --wait")
    run = jupyter_supervisor.get_run("everywhere")
    assert "at step 777 of 777" in capsys.readouterr().out      # the end line of --wait
    assert run.global_step == run.history.snapshot().step == 777
    assert newest_step(logdir) == run.history.snapshot().checkpoints[0].step == 777
    ip.run_line_magic("supervise", "")
    row = next(line for line in capsys.readouterr().out.splitlines()
               if line.startswith("everywhere "))
    assert row.split()[:3] == ["everywhere", "finished", "777"]
    assert "at step 777 of 777" in text.text_status(run)


def test_max_steps_ends_a_body_that_ignores_should_stop_at_the_exact_step(ip, model, tmp_path):
    logdir = str(tmp_path / "ignoring")
    supervise(ip, f"--logdir {logdir} --max-steps 300 --wait", IGNORING)
    run = jupyter_supervisor.get_run("ignoring")
    assert run.status == "finished"
    assert run.global_step == 300
    assert newest_step(logdir) == 300
    assert run.history.snapshot().checkpoints[0].step == 300


def test_stop_ends_a_body_that_ignores_should_stop_at_a_step_boundary(ip, model, tmp_path,
                                                                     wait_for):
    logdir = str(tmp_path / "deaf")
    supervise(ip, f"--logdir {logdir} --save-model-secs 0", IGNORING)
    run = jupyter_supervisor.get_run("deaf")
    wait_for(lambda: (run.global_step or 0) > 50, timeout=DEADLINE, what="training")
    assert run.stop(timeout=DEADLINE)
    assert run.status == "stopped" and run.exception is None
    assert newest_step(logdir) == run.global_step > 50


def test_a_body_that_saw_the_stop_may_still_run_the_session(ip, model, tmp_path):
    # The loop ends through should_stop(); a last evaluation after it is the body's to run.
    body = LOOP + "final_w = sess.run(w)\n"
    supervise(ip, f"--logdir {tmp_path / 'evaluates'} --max-steps 20 --wait", body)
    assert jupyter_supervisor.get_run("evaluates").status == "finished"
    assert ip.user_ns["final_w"] < 5.0


def test_names_bound_and_assignments_reach_the_notebook(ip, model, tmp_path):
    supervise(ip, f"--logdir {tmp_path / 'names'} --max-steps 50 --wait",
              "count = 0\n" + LOOP + "    count += 1\n")
    run = jupyter_supervisor.get_run("names")
    assert ip.user_ns["sv"] is run.supervisor
    assert ip.user_ns["count"] == 50
    assert ip.user_ns["sess"] is not None


def test_each_body_keeps_its_own_sv_when_a_later_run_binds_the_names(ip, model, tmp_path,
                                                                     wait_for):
    ip.user_ns.pop("op_first", None)
    supervise(ip, f"--logdir {tmp_path / 'first'}",
              "op_first = train_op\nwhile not sv.should_stop():\n    sess.run(op_first)\n")
    first = jupyter_supervisor.get_run("first")
    # The body reads `train_op` when it starts, in the background: rebinding it before that
    # would hand it the other graph's op (as in a notebook, the help says so).
    wait_for(lambda: "op_first" in ip.user_ns, timeout=DEADLINE, what="the first body to start")
    with tf.Graph().as_default():
        build_model(ip.user_ns)
        supervise(ip, f"--logdir {tmp_path / 'second'}",
                  "op_second = train_op\nwhile not sv.should_stop():\n    sess.run(op_second)\n")
        second = jupyter_supervisor.get_run("second")
        assert ip.user_ns["sv"] is second.supervisor
        # `first` stops only if its body checks its own Supervisor, not the notebook's `sv`.
        assert first.stop(wait=True, timeout=DEADLINE)
        assert first.status == "stopped"
        assert second.status in ("starting", "running")
        assert second.stop(wait=True, timeout=DEADLINE)


def notebook_streams(monkeypatch):
    """Replaces sys.stdout and sys.stderr by a stand-in for the notebook's streams; returns
    the list of what reached them. Called in the test itself: pytest sets its own capture
    streams again between a fixture's setup and the test."""
    shown = []

    class Notebook:
        def write(self, text):
            shown.append(text)
            return len(text)

        def flush(self):
            pass

    monkeypatch.setattr(sys, "stdout", Notebook())
    monkeypatch.setattr(sys, "stderr", Notebook())
    return shown


def test_body_output_goes_to_the_run_not_to_the_notebook(ip, model, tmp_path, monkeypatch):
    shown = notebook_streams(monkeypatch)
    supervise(ip, f"--logdir {tmp_path / 'printing'} --max-steps 20 --wait",
              "import sys\nprint('to-out')\nprint('to-err', file=sys.stderr)\n" + LOOP)
    print("main-thread")
    output = jupyter_supervisor.get_run("printing").history.snapshot().output
    assert "to-out\nto-err\n" in output
    assert "to-out" not in "".join(shown) and "to-err" not in "".join(shown)
    assert "main-thread\n" in "".join(shown)


def test_output_of_the_runs_service_threads_goes_to_the_run(ip, model, tmp_path, monkeypatch):
    shown = notebook_streams(monkeypatch)
    body = ("import threading\n"
            "printed = threading.Event()\n"
            "def report():\n"
            "    print('from-loop')\n"
            "    printed.set()\n"
            "sv.loop(0.01, report)\n"
            "printed.wait(30)\n" + LOOP)
    supervise(ip, f"--logdir {tmp_path / 'looping'} --max-steps 20 --wait", body)
    output = jupyter_supervisor.get_run("looping").history.snapshot().output
    assert "from-loop\n" in output
    assert "from-loop" not in "".join(shown)


def test_stop_while_starting_ends_stopped_without_running_the_body(ip, model, tmp_path,
                                                                  wait_for):
    entered, release, calls = threading.Event(), threading.Event(), []

    def slow_init(sess):
        calls.append(sess)
        entered.set()
        release.wait(DEADLINE)

    ip.user_ns["slow_init"] = slow_init
    ip.user_ns.pop("ran", None)
    logdir = str(tmp_path / "slow")
    supervise(ip, f"--logdir {logdir} --init-fn slow_init", "ran = True\n" + LOOP)
    run = jupyter_supervisor.get_run("slow")
    # The cell returned while the model is still being initialized in the background.
    assert entered.wait(DEADLINE)
    assert run.status == "starting"
    run.stop(wait=False)
    assert run.status == "stopping"
    release.set()
    assert run.wait(DEADLINE)
    assert run.status == "stopped"
    assert "ran" not in ip.user_ns
    assert newest_step(logdir) == 0
    # init_fn runs only when there is no checkpoint: resuming restores instead.
    run.resume()
    wait_for(lambda: "ran" in ip.user_ns, timeout=DEADLINE, what="the resumed body")
    run.stop(wait=True, timeout=DEADLINE)
    assert len(calls) == 1


def test_failed_body_in_wait_mode_raises_with_the_cell_traceback(ip, model):
    with pytest.raises(RunFailedError) as info:
        supervise(ip, "--name boom --wait", "x = 1\nraise ValueError('boom')\n")
    run = jupyter_supervisor.get_run("boom")
    assert run.status == "failed" and isinstance(run.exception, ValueError)
    lines = info.value._render_traceback_()
    assert lines[-1] == "ValueError: boom"
    assert any(line.startswith("----> 3 raise ValueError('boom')") for line in lines)
    assert not any("run.py" in line for line in lines)


def test_failed_body_in_wait_mode_shows_its_error_once(ip, model, capsys):
    # No widget frontend here: the text summary is printed, then the failure is raised.
    with pytest.raises(RunFailedError) as info:
        supervise(ip, "--name boom-once --wait", "raise ValueError('boom once')\n")
    shown = capsys.readouterr().out + "\n".join(info.value._render_traceback_())
    assert shown.count("ValueError: boom once") == 1


def test_a_failing_loop_function_shows_the_users_frames_only(ip, model):
    ip.run_cell("def broken():\n    raise ValueError('loop target broke')\n")
    with pytest.raises(RunFailedError):
        supervise(ip, "--name loopfail --wait", "sv.loop(0.01, broken)\n" + LOOP)
    text = jupyter_supervisor.get_run("loopfail").error_text
    assert "in broken()" in text and "raise ValueError('loop target broke')" in text
    assert not re.search(r"jupyter_supervisor|coordinator\.py|site-packages", text), text


def test_a_failing_summary_op_is_named_with_what_to_do(ip, model, tmp_path):
    fed = v1.placeholder(tf.float32, name="fed_value")
    v1.summary.scalar("needs_a_feed", fed)
    with pytest.raises(RunFailedError):
        supervise(ip, f"--logdir {tmp_path / 'sumfail'} --save-summaries-secs 0.05 --wait")
    run = jupyter_supervisor.get_run("sumfail")
    assert isinstance(run.exception, tf.errors.InvalidArgumentError)  # still TF's type
    assert "the summary 'needs_a_feed'" in run.error_line
    assert "--save-summaries-secs 0" in run.error_line and "summary_computed" in run.error_line


def test_a_tensorflow_error_is_summed_up_by_what_went_wrong(ip, model, capsys):
    # TensorFlow's messages end with stack frames of where the op was defined: the one-line
    # summary must be the line that says what failed.
    ip.run_cell("import tensorflow as tf\n"
                "needs_feed = tf.compat.v1.placeholder(tf.float32, name='needs_feed')")
    with pytest.raises(RunFailedError) as info:
        supervise(ip, "--name tf_error --wait", "sess.run(needs_feed)\n")
    assert str(info.value).startswith(
        "Run 'tf_error' failed: InvalidArgumentError: You must feed a value for placeholder "
        "tensor 'needs_feed'")
    ip.run_line_magic("supervise", "list")
    assert "tf_error failed: InvalidArgumentError: You must feed" in capsys.readouterr().out


def test_resume_from_another_thread_continues_on_the_runs_graph(ip, model, tmp_path):
    # A Resume button's callback may run on another thread than the cells; TensorFlow's default
    # graph is per thread, so there it is another (empty) graph.
    logdir = tmp_path / "elsewhere"
    supervise(ip, f"--logdir {logdir} --max-steps 30 --wait")
    run = jupyter_supervisor.get_run("elsewhere")
    assert run.status == "finished" and newest_step(str(logdir)) == 30
    outcome = {}

    def click_resume():
        try:
            run.resume()
            outcome["ok"] = True
        except Exception as e:  # pylint: disable=broad-except
            outcome["error"] = e

    clicker = threading.Thread(target=click_resume)
    clicker.start()
    clicker.join(DEADLINE)
    assert outcome == {"ok": True}
    assert run.wait(DEADLINE)
    # It restored step 30 and, --max-steps reached, finished again without losing it.
    assert run.status == "finished" and run.exception is None
    assert newest_step(str(logdir)) == 30


def test_without_logdir_nothing_is_saved_and_the_user_is_told(ip, model, capsys):
    supervise(ip, "--name unsaved --max-steps 10 --wait")
    out = capsys.readouterr().out
    assert "No --logdir: run 'unsaved' saves nothing" in out
    run = jupyter_supervisor.get_run("unsaved")
    assert run.status == "finished" and run.logdir is None and not run.can_resume
    with pytest.raises(run_module.RunStateError, match="no --logdir"):
        run.resume()


# ---------------------------------------------------------------------------- state machine

def test_state_machine_allows_only_its_transitions():
    statuses = [None, "starting", "running", "stopping", "stopped", "finished", "failed"]
    legal = {
        None: {"starting"},
        "starting": {"running", "stopping", "finished", "failed"},
        "running": {"stopping", "finished", "failed"},
        "stopping": {"stopped", "failed"},
        "stopped": {"starting"}, "finished": {"starting"}, "failed": {"starting"},
    }
    for old in statuses:
        for new in statuses[1:]:
            run = run_module.TrainingRun(run_module.RunConfig(name="machine"), "pass", {})
            run._status = old  # pylint: disable=protected-access  (the table under test)
            if new in legal[old]:
                run._transition(new)  # pylint: disable=protected-access
                assert run.status == new and run.history.snapshot().status == new
            else:
                with pytest.raises(run_module.IllegalTransitionError):
                    run._transition(new)  # pylint: disable=protected-access
                assert run.status == old


def test_steering_an_ended_run_says_why(ip, model, tmp_path):
    supervise(ip, f"--logdir {tmp_path / 'ended'} --max-steps 5 --wait")
    run = jupyter_supervisor.get_run("ended")
    with pytest.raises(run_module.RunStateError, match="finished: nothing to stop"):
        run.stop()
    with pytest.raises(run_module.RunStateError, match="finished"):
        run.save_now()
    with pytest.raises(run_module.RunStateError) as info:
        ip.run_line_magic("supervise", "stop ended")
    # IPython shows it as one line.
    assert info.value._render_traceback_() == [
        "RunStateError: Run 'ended' is finished: nothing to stop."]


def test_config_validation_names_the_argument():
    with pytest.raises(ValueError, match=r"Invalid value for argument `keep`. Received: keep=0"):
        run_module.RunConfig(keep=0)
    assert run_module.RunConfig(logdir="runs/mnist/").name == "mnist"
    assert run_module.RunConfig().name == "run"
    assert run_module.RunConfig(task_index=1).role == "worker"
    assert run_module.RunConfig(master="grpc://localhost:1").role == "chief"
    assert os.fspath(run_module.RunConfig(logdir="x").logdir) == "x"


def test_keep_and_checkpoint_basename(ip, model, tmp_path, wait_for):
    logdir = str(tmp_path / "kept")
    supervise(ip, f"--logdir {logdir} --keep 2 --checkpoint-basename my.ckpt "
                  "--save-model-secs 0")
    run = jupyter_supervisor.get_run("kept")
    paths = []
    for _ in range(4):
        last = run.global_step or 0
        wait_for(lambda: run.status == "running" and (run.global_step or 0) > last,
                 timeout=DEADLINE, what="more steps")
        paths.append(run.save_now())
    saved = int(paths[-1].rsplit("-", 1)[1])
    wait_for(lambda: run.global_step > saved, timeout=DEADLINE, what="a step after the save")
    run.stop(wait=True, timeout=DEADLINE)
    paths.append(tf.train.latest_checkpoint(logdir))
    assert len(set(paths)) == 5
    assert all(os.path.basename(p).startswith("my.ckpt-") for p in paths)
    kept = tf.train.get_checkpoint_state(logdir).all_model_checkpoint_paths
    assert list(kept) == paths[-2:]
    assert sorted(f for f in os.listdir(logdir) if f.endswith(".index")) == sorted(
        os.path.basename(p) + ".index" for p in kept)


# ------------------------------------------------------------------- quoting, as in a shell

@pytest.mark.parametrize("typed, directory", [
    ('"runs/with space"', "with space"),
    ("'runs/with space'", "with space"),
    ("runs/naïve", "naïve"),
    ('"runs/naïve run"', "naïve run"),
])
def test_a_quoted_logdir_loses_its_quotes(monkeypatch, ip, model, tmp_path, capsys, typed,
                                          directory):
    monkeypatch.chdir(tmp_path)  # before `model`, so undone after its runs stopped
    supervise(ip, "--save-model-secs 0 --logdir " + typed)
    run = jupyter_supervisor.get_run(directory)
    assert run.logdir == f"runs/{directory}"
    assert os.listdir(tmp_path) == ["runs"] and os.listdir("runs") == [directory]
    # The line command, typed in a cell as a user types it, with either quote.
    quote = "'" if directory.isascii() else '"'
    assert ip.run_cell(f"%supervise stop {quote}{directory}{quote}").success
    assert run.status == "stopped"
    assert newest_step(run.logdir) == run.global_step
    assert f"Run {directory!r} stopped at step" in capsys.readouterr().out


def test_every_line_command_takes_a_quoted_name(ip, model, tmp_path, capsys, wait_for):
    name = "ölçüm 1"
    assert ip.run_cell(f"%%supervise --logdir {tmp_path / 'q'} --name '{name}'\n{LOOP}").success
    run = jupyter_supervisor.get_run(name)
    wait_for(lambda: run.status == "running", timeout=DEADLINE, what="the run")
    for command, quoted in [("save", f'"{name}"'), ("stop", f"'{name}'"),
                            ("resume", f'"{name}"'), ("show", f"'{name}'")]:
        result = ip.run_cell(f"%supervise {command} {quoted}")
        assert result.success, (command, result.error_in_exec)
        if command == "resume":
            wait_for(lambda: run.status == "running", timeout=DEADLINE, what="the resumed run")
    out = capsys.readouterr().out
    assert f"Run {name!r}: checkpoint saved: " in out and f"Run {name!r} stopped" in out
    run.stop(wait=False)
    assert ip.run_cell(f"%supervise wait '{name}'").success
    assert run.status == "stopped"
    assert ip.run_cell("%supervise list").success
    assert name in capsys.readouterr().out


def test_a_backslash_is_kept_as_typed_and_refused(monkeypatch, ip, model, tmp_path):
    """A shell would drop it (runs\\x is runsx there): a Windows path would then name another
    directory without a word. Kept, the logdir check refuses it, saying why."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=re.escape("Received: --logdir='runs\\\\x'. "
                                                   "Expected a path without")):
        supervise(ip, r"--logdir runs\x")
    assert os.listdir(tmp_path) == []


def test_an_unclosed_quote_is_a_usage_error(monkeypatch, ip, model, tmp_path):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match='No closing quotation: --logdir "runs/x.*Quote a '
                                         'value with spaces as in a shell'):
        supervise(ip, '--logdir "runs/x')
    with pytest.raises(UsageError, match="No closing quotation"):
        ip.run_line_magic("supervise", "stop 'x")
    assert os.listdir(tmp_path) == []


# ---------------------------------------------------------------- the step of a running run

def record_transitions(run):
    """(status, global_step) at each change of ``run``'s status, as they happen."""
    seen = []
    set_status = run.history.set_status

    def recording(status, **flags):
        set_status(status, **flags)
        seen.append((status, run.global_step))

    run.history.set_status = recording
    return seen


def test_graph_run_is_running_with_its_restored_step(ip, model, tmp_path):
    logdir = str(tmp_path / "graphstep")
    supervise(ip, f"--logdir {logdir} --max-steps 30 --wait")
    config = run_module.RunConfig(logdir=logdir, name="graphstep2", max_steps=60)
    run = run_module.TrainingRun(config, LOOP, ip.user_ns)
    seen = record_transitions(run)
    run.start()
    assert run.wait(DEADLINE)
    assert seen == [("starting", None), ("running", 30), ("finished", 60)]


def test_resumed_eager_run_is_starting_until_it_restored_then_running_at_its_step(
        ip, keras_model, tmp_path):
    logdir = str(tmp_path / "eagerstep")
    supervise(ip, f"--logdir {logdir} --max-steps 12 --wait", FIT)
    # A new run of the cell, on a new model (as after a kernel restart); the body does work
    # of its own before fit restores the checkpoint.
    ip.user_ns["model"] = eager_models.make_model()
    ip.user_ns["before_fit"] = threading.Event()
    ip.user_ns["go"] = threading.Event()
    body = "before_fit.set()\ngo.wait(60)\n" + FIT
    run = run_module.TrainingRun(run_module.RunConfig(logdir=logdir, max_steps=20),
                                 body, ip.user_ns)
    seen = record_transitions(run)
    run.start()
    assert ip.user_ns["before_fit"].wait(DEADLINE)
    assert run.status == "starting" and run.global_step is None
    ip.user_ns["go"].set()
    assert run.wait(DEADLINE)
    assert seen == [("starting", None), ("running", 12), ("finished", 20)]


def test_eager_body_that_never_names_what_to_save_ends_finished_from_starting(
        ip, keras_model, tmp_path):
    run = run_module.TrainingRun(run_module.RunConfig(logdir=str(tmp_path / "untracked")),
                                 "x.sum()\n", ip.user_ns)
    seen = record_transitions(run)
    run.start()
    assert run.wait(DEADLINE)
    assert seen == [("starting", None), ("finished", None)]
    assert run.exception is None


def test_compare_without_a_widget_frontend_prints_each_run(ip, model, tmp_path, capsys):
    supervise(ip, f"--logdir {tmp_path / 'cmp-a'} --max-steps 5 --save-summaries-secs 0 --wait")
    capsys.readouterr()
    ip.run_line_magic("supervise", "compare cmp-a")
    assert capsys.readouterr().out.startswith("cmp-a: finished at step 5 of 5 (")
    with pytest.raises(UsageError, match="There is no run named 'nonesuch'"):
        ip.run_line_magic("supervise", "compare cmp-a nonesuch")
