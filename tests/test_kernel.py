"""%%supervise in a real IPython kernel, driven through jupyter_client.

One kernel serves the module (each test builds its model in a fresh default graph and trains in
logdirs of its own); the eager-mode test needs a kernel where eager execution is still on and
restarts the shared one if an earlier test switched it to graph mode. Waiting is on iopub
messages, on kernel-side conditions or on files, each with a deadline; nothing sleeps for a
fixed time.
"""
import queue
import re
import time
import uuid

import pytest

pytestmark = pytest.mark.kernel

DEADLINE = 90.0        # seconds; generous for a loaded 2-core machine, never reached when passing

# A body that trains until stopped, a little slower than flat out (keeps the 2 cores usable).
LOOP = """
while not sv.should_stop():
    sess.run(train_op)
    time.sleep(0.002)
"""


@pytest.fixture
def logdir(kernel):
    """A logdir of this test's own (relative to the kernel's working directory); the test's
    runs are stopped afterwards (the ``kernel`` fixture) so that the next test starts with none
    live."""
    return f"runs/{uuid.uuid4().hex[:8]}"


def run_expr(name, attribute):
    return f"get_run({name!r}).{attribute}"


# ------------------------------------------------------------------------------------ tests

# -- TensorFlow 2: Keras fit and custom loops ----------------------------------------------

KERAS = """
import keras, eager_models
x, y = eager_models.data(n=64)
model = eager_models.make_model()
"""
FIT_CELL = ("%%supervise --logdir {logdir} --save-model-secs 0.3\n"
            "model.fit(x, y, batch_size=8, epochs=100000, callbacks=[sv.callback], verbose=0)")


def eager_kernel(kernel):
    """The kernel, in eager mode (graph mode cannot be undone in a process), with a model."""
    kernel.eager()
    kernel.ok(KERAS)


def tf2_checkpoint(kernel, logdir):
    """(step, optimizer iterations, first Adam moment's sum) of the newest checkpoint."""
    return kernel.value(
        f"(lambda p: None if p is None else [int(p.rsplit('-', 1)[1]), "
        f"int(tf.train.load_checkpoint(p).get_tensor('optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE')), "
        f"float(sum(tf.train.load_checkpoint(p).get_tensor(k).sum() for k in "
        f"tf.train.load_checkpoint(p).get_variable_to_shape_map() if 'optimizer/_variables/2/' in k))])"
        f"(tf.train.latest_checkpoint({logdir!r}))")


def test_keras_fit_resumes_after_a_killed_kernel_at_the_checkpoints_step(kernel, logdir):
    eager_kernel(kernel)
    name = logdir.rsplit("/", 1)[-1]
    kernel.ok(FIT_CELL.format(logdir=logdir))
    kernel.wait_until(f"int((tf.train.latest_checkpoint({logdir!r}) or '-0').rsplit('-', 1)[1])"
                      " > 20", "a checkpoint past step 20")
    kernel.kill()   # a crash: no final checkpoint
    step, iterations, moment = tf2_checkpoint(kernel, logdir)
    assert iterations == step > 20
    kernel.ok(KERAS)
    kernel.ok(FIT_CELL.format(logdir=logdir))
    kernel.wait_until(f"get_run({name!r}).restored_from is not None", "the restore")
    assert kernel.value(run_expr(name, "restored_from")).endswith(f"-{step}")
    # The restored optimizer state is the checkpoint's; training goes on from its batch.
    kernel.wait_until(f"get_run({name!r}).global_step > {step} + 8", "steps after the restart")
    stopped = kernel.ok(f"%supervise stop {name}").stream()
    final = kernel.value(run_expr(name, "global_step"))
    assert stopped.strip().startswith(f"Run {name!r} stopped at step {final}")
    last_step, last_iterations, _ = tf2_checkpoint(kernel, logdir)
    assert last_step == last_iterations == final      # no batch trained twice or lost
    assert kernel.value("int(model.optimizer.iterations.numpy())") == final
    assert moment != 0.0


DROPOUT = """
import keras, numpy as np, eager_models
tf.config.experimental.enable_op_determinism()
x, y = eager_models.data(n=64)

def dropout_model():
    keras.utils.set_random_seed(0)
    m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(16, activation="relu"),
                          keras.layers.Dropout(0.3), keras.layers.Dense(1)])
    m.compile(keras.optimizers.Adam(0.01), "mse")
    return m

def state(m):
    return [v.numpy() for v in m.variables + m.optimizer.variables]

model = dropout_model()
"""
DROPOUT_FIT = ("%%supervise --logdir {logdir} {options}\n"
               "model.fit(x, y, batch_size=8, epochs=4, verbose=0, callbacks=[sv.callback{more}])")


def test_a_killed_kernel_resumes_a_dropout_fit_bit_for_bit(kernel, logdir):
    """SIGKILL mid-epoch (batch 13 of 32, shuffled, Dropout), a new kernel, the same cells
    re-run: the weights and optimizer state equal an uninterrupted fit's exactly."""
    eager_kernel(kernel)
    try:
        kernel.ok(DROPOUT)
        kernel.ok(DROPOUT_FIT.format(logdir=logdir, options="--save-model-secs 0.000001",
                                     more=", eager_models.at_batch(13, eager_models.hold)"))
        newest = f"(tf.train.latest_checkpoint({logdir!r}) or '-0').endswith('-12')"
        kernel.wait_until(newest, "the checkpoint of step 12")
        kernel.kill()
        kernel.ok(DROPOUT)
        kernel.ok(DROPOUT_FIT.format(logdir=logdir, options="--wait", more=""))
        name = logdir.rsplit("/", 1)[-1]
        assert kernel.value(run_expr(name, "restored_from")).endswith("-12")
        kernel.ok("resumed = state(model)\nmodel = dropout_model()")
        kernel.ok(DROPOUT_FIT.format(logdir=logdir + "-whole", options="--wait", more=""))
        assert kernel.value("int(model.optimizer.iterations.numpy())") == 32
        assert kernel.value("[bool(np.array_equal(a, b)) for a, b in zip(resumed, state(model))]"
                            " + [len(resumed) == len(state(model))]") == [True] * 16
    finally:  # the kernel serves the module's other tests, as a user's kernel would
        kernel.ok("from tensorflow.python.framework import config\n"
                  "config.disable_op_determinism()")


def test_a_resumed_fit_says_running_only_once_its_step_is_the_restored_one(kernel, logdir):
    """The quickstart's pattern, `run.global_step > 100` in a later cell, needs the step of a
    'running' run to be a number: the restored one, before fit's first batch."""
    eager_kernel(kernel)
    name = logdir.rsplit("/", 1)[-1]
    fit = "model.fit(x, y, batch_size=8, epochs=1000, callbacks=[sv.callback], verbose=0)"
    kernel.ok(f"%%supervise --logdir {logdir} --max-steps 16 --wait\n{fit}")
    kernel.ok("model = eager_models.make_model()\ngo = threading.Event()")
    kernel.ok(f"%%supervise --logdir {logdir} --max-steps 100000\ngo.wait(60)\n{fit}")
    # The body has not reached fit: nothing is restored yet.
    assert kernel.value(f"[{run_expr(name, 'status')}, {run_expr(name, 'global_step')}]") \
        == ["starting", None]
    kernel.ok(f"go.set()\nwait_for(lambda: {run_expr(name, 'status')} != 'starting', 60)\n"
              f"seen = [{run_expr(name, 'status')}, {run_expr(name, 'global_step')}]")
    status, step = kernel.value("seen")
    assert status == "running" and step >= 16
    assert kernel.value(f"{run_expr(name, 'restored_from')}.endswith('-16')")
    kernel.ok(f"%supervise stop {name}")


def test_keras_stop_button_and_custom_loop_stop_at_the_exact_step(kernel, logdir):
    eager_kernel(kernel)
    name = logdir.rsplit("/", 1)[-1]
    kernel.ok(FIT_CELL.format(logdir=logdir))
    kernel.wait_until(f"(get_run({name!r}).global_step or 0) > 10", "training")
    button = kernel.value(
        f"jupyter_supervisor.view.panel._shown[{name!r}].widgets['view'].model_id")
    kernel.kc.shell_channel.send(kernel.kc.session.msg("comm_msg", {
        "comm_id": button, "data": {"method": "custom",
                                  "content": {"type": "button", "name": "stop"}}}))
    kernel.wait_until(f"get_run({name!r}).status == 'stopped'", "the stopped fit")
    final = kernel.value(run_expr(name, "global_step"))
    assert tf2_checkpoint(kernel, logdir)[:2] == [final, final]

    loop = f"{logdir}-loop"
    kernel.ok(f"%%supervise --logdir {loop}\n"
              "sv.track(model=model, optimizer=model.optimizer)\n"
              "while True:   # never looks at sv.should_stop(): sv.step() ends it\n"
              "    with tf.GradientTape() as tape:\n"
              "        loss = tf.reduce_mean(tf.square(model(x) - y))\n"
              "    grads = tape.gradient(loss, model.trainable_variables)\n"
              "    model.optimizer.apply_gradients(zip(grads, model.trainable_variables))\n"
              "    sv.step(loss=loss)\n")
    loop_name = loop.rsplit("/", 1)[-1]
    kernel.wait_until(f"(get_run({loop_name!r}).global_step or 0) > 10", "the loop training")
    kernel.ok(f"%supervise stop {loop_name}")
    assert kernel.value(run_expr(loop_name, "status")) == "stopped"
    final = kernel.value(run_expr(loop_name, "global_step"))
    assert tf2_checkpoint(kernel, loop)[0] == final
    # The scalars reached the panel's history, and the event file as TensorBoard reads it.
    assert kernel.value(f"'loss' in get_run({loop_name!r}).history.snapshot().scalars")


def test_cell_returns_at_once_and_training_goes_on_while_other_cells_run(kernel, logdir):
    kernel.model()
    name = logdir.rsplit("/", 1)[-1]
    reply = kernel.ok(f"%%supervise --logdir {logdir}\n{LOOP}")
    # The body never returns by itself: the cell came back while it trains.
    assert kernel.value(run_expr(name, "status")) in ("starting", "running")
    assert kernel.value("type(sv).__name__") == "Supervisor"
    # The panel is displayed with the cell.
    assert any("application/vnd.jupyter.widget-view+json" in d["data"]
               for d in reply.of_type("display_data"))
    kernel.wait_until(f"(get_run({name!r}).global_step or 0) > 20", "training")
    first = kernel.value(run_expr(name, "global_step"))
    for i in range(3):
        assert kernel.ok(f"print({i} * 7)").stream() == f"{i * 7}\n"
    kernel.wait_until(f"get_run({name!r}).global_step > {first}", "more steps")
    assert kernel.value(run_expr(name, "status")) == "running"
    # The managed session is usable from other cells while the run trains.
    assert kernel.value("float(sess.run(loss))") < 16.0


def test_body_output_goes_to_the_run_not_to_later_cells(kernel, logdir):
    kernel.model()
    name = logdir.rsplit("/", 1)[-1]
    start = len(kernel.iopub)
    kernel.ok(f"%%supervise --logdir {logdir}\nprint('body-start')\n"
              "import sys\n"
              "while not sv.should_stop():\n"
              "    sess.run(train_op)\n"
              "    print('body-tick')\n"
              "    print('body-err', file=sys.stderr)\n"
              "    time.sleep(0.005)\n")
    kernel.wait_until(f"get_run({name!r}).history.snapshot().output.count('body-tick') > 5",
                      "output in the run's history")
    for _ in range(5):
        kernel.ok("print('cell output'); time.sleep(0.05)")
    kernel.ok(f"%supervise stop {name}")
    leaked = [m for m in kernel.iopub[start:] if m["msg_type"] == "stream"
              and "body-" in m["content"]["text"]]
    assert leaked == []
    output = kernel.value(f"get_run({name!r}).history.snapshot().output")
    assert "body-start\nbody-tick\nbody-err\n" in output
    # TensorFlow's own INFO lines from the training thread go to the package logger: they
    # are neither the run's output nor any cell's.
    assert "local_init_op" not in output
    assert not [m for m in kernel.iopub[start:] if m["msg_type"] == "stream"
                and "local_init_op" in m["content"]["text"]]


def start_until_done(kernel, logdir):
    """Starts a run whose body also ends when the notebook sets ``done = True``."""
    kernel.ok("done = False")
    kernel.ok(f"%%supervise --logdir {logdir} --save-model-secs 0\n"
              "while not sv.should_stop() and not done:\n"
              "    sess.run(train_op)\n"
              "    time.sleep(0.002)\n")


def test_list_save_stop_resume_wait_show(kernel, logdir):
    kernel.model()
    name = logdir.rsplit("/", 1)[-1]
    start_until_done(kernel, logdir)
    kernel.wait_until(f"(get_run({name!r}).global_step or 0) > 10", "training")

    table = kernel.ok("%supervise").stream()
    header = table.splitlines()[0]
    row = next(line for line in table.splitlines() if line.startswith(name + " "))
    assert header.split() == ["name", "status", "step", "steps/sec", "newest", "checkpoint",
                              "logdir"]
    assert row.split()[:2] == [name, "running"] and row.split()[-1] == logdir

    saved = kernel.ok(f"%supervise save {name}").stream()
    path = saved.strip().rsplit(": ", 1)[1]
    assert path.startswith(f"{logdir}/model.ckpt-")
    assert kernel.value(f"os.path.exists({path + '.index'!r})")

    stopped = kernel.ok(f"%supervise stop {name}").stream()
    assert kernel.value(run_expr(name, "status")) == "stopped"
    final = kernel.value(run_expr(name, "global_step"))
    assert final > 10
    assert kernel.value(f"_newest_step({logdir!r})") == final
    assert stopped.strip() == (f"Run {name!r} stopped at step {final}; newest checkpoint: "
                               f"{logdir}/model.ckpt-{final}.")

    kernel.ok(f"%supervise resume {name}")
    kernel.wait_until(f"get_run({name!r}).status == 'running'", "the resumed run")
    assert kernel.value(run_expr(name, "restored_from")) == f"{logdir}/model.ckpt-{final}"
    kernel.wait_until(f"get_run({name!r}).global_step > {final}", "steps after resuming")

    kernel.ok("done = True")
    kernel.ok(f"%supervise wait {name}")
    assert kernel.value(run_expr(name, "status")) == "finished"
    assert kernel.value(f"_newest_step({logdir!r})") == kernel.value(
        run_expr(name, "global_step"))

    shown = kernel.ok(f"%supervise show {name}")
    assert any("application/vnd.jupyter.widget-view+json" in d["data"]
               for d in shown.of_type("display_data"))
    # Steering an ended run says what is wrong, without a traceback.
    refused = kernel.execute(f"%supervise save {name}")
    assert refused.status == "error" and refused.error["ename"] == "RunStateError"
    assert len(refused.error["traceback"]) == 1


def test_rerunning_the_cell_resumes_from_the_newest_checkpoint(kernel, logdir):
    kernel.model()
    name = logdir.rsplit("/", 1)[-1]
    cell = f"%%supervise --logdir {logdir} --max-steps {{}} --wait --save-summaries-secs 0.05\n{LOOP}"
    waited = kernel.ok(cell.format(40))
    assert kernel.value(run_expr(name, "status")) == "finished"
    # The cell blocked until the end and says how the run ended.
    assert waited.stream().splitlines()[-1].startswith(f"{name}: finished at step 40 of 40")
    assert kernel.value(f"_newest_step({logdir!r})") == 40
    kernel.ok(cell.format(90))
    assert kernel.value(run_expr(name, "restored_from")) == f"{logdir}/model.ckpt-40"
    assert kernel.value(run_expr(name, "global_step")) == 90
    # The plots continue: the new run's history holds the first session's points (from step
    # 0 on) too, read back from the event files.
    steps = kernel.value(f"[int(s) for s in get_run({name!r}).history.snapshot()"
                         ".scalars['loss'].steps]")
    assert min(steps) < 40


@pytest.mark.parametrize("backend", ["eager", "graph"])
def test_an_unlisted_intact_checkpoint_is_restored_when_no_listed_one_can_be_read(
        kernel, logdir, backend):
    """The start-up sweep deletes the complete checkpoints the state file does not list (what a
    killed save leaves), but only once a listed one restored: when none of those can be read,
    the unlisted one is the last good state, and the run resumes from it, saying so."""
    if backend == "eager":
        eager_kernel(kernel)
        body = "model.fit(x, y, batch_size=8, epochs=1000, verbose=0, callbacks=[sv.callback])"
    else:
        kernel.model()
        body = LOOP
    name = logdir.rsplit("/", 1)[-1]
    cell = f"%%supervise --logdir {logdir} --max-steps {{}} --save-model-secs 0 --wait\n{body}"
    for steps in (10, 20, 30):
        kernel.ok(cell.format(steps))
    unlisted, damaged = kernel.value(
        f"__import__('helpers').unlist_newest_and_damage_the_rest({logdir!r})")
    assert unlisted == f"{logdir}/model.ckpt-30" and damaged

    kernel.ok(cell.format(40))
    assert kernel.value(run_expr(name, "restored_from")) == unlisted
    assert kernel.value(run_expr(name, "status")) == "finished"
    output = kernel.value(f"get_run({name!r}).history.snapshot().output")
    assert f"Restored from {unlisted}, a complete checkpoint that the state file does not " \
        "list" in " ".join(output.split()), output
    # Nothing was deleted: the damaged checkpoints are left as they were, for a look.
    assert kernel.value(f"[os.path.exists(p + '.index') for p in {damaged!r} + [{unlisted!r}]]") \
        == [True] * (len(damaged) + 1)
    # The next start restores a listed checkpoint again, and then sweeps the unlisted one.
    kernel.ok(cell.format(50))
    assert kernel.value(run_expr(name, "restored_from")) == f"{logdir}/model.ckpt-40"
    assert not kernel.value(f"os.path.exists({unlisted!r} + '.index')")


def test_second_live_run_on_a_logdir_or_name_is_refused(kernel, logdir):
    kernel.model()
    name = logdir.rsplit("/", 1)[-1]
    kernel.ok(f"%%supervise --logdir {logdir}\n{LOOP}")
    same_dir = kernel.execute(f"%%supervise --logdir {logdir}/ --name other\n{LOOP}")
    assert same_dir.status == "error" and same_dir.error["ename"] == "LogdirLockedError"
    assert f"%supervise stop {name}" in same_dir.error["evalue"]
    same_name = kernel.execute(f"%%supervise --logdir {logdir}-b --name {name}\n{LOOP}")
    assert same_name.status == "error" and same_name.error["ename"] == "RunConflictError"
    assert f"%supervise stop {name}" in same_name.error["evalue"]
    # The first run was not disturbed.
    assert kernel.value(run_expr(name, "status")) in ("starting", "running")
    assert [r for r in kernel.value("[r.name for r in jupyter_supervisor.runs()]")
            if r in ("other", name)] == [name]


def test_the_cell_of_a_live_run_run_again_shows_it_and_says_it_goes_on(kernel, logdir):
    """A person back at a notebook reopened without its outputs runs the cell of a run that
    trains: its panel (the same widget as %supervise show), and how to stop or restart it;
    neither an error nor a second run."""
    kernel.model()
    name = logdir.rsplit("/", 1)[-1]
    cell = f"%%supervise --logdir {logdir}\n{LOOP}"
    first = kernel.ok(cell)
    kernel.wait_until(f"get_run({name!r}).status == 'running'", "the run")
    again = kernel.ok(cell)
    out = again.stream("stdout")
    assert re.search(rf"Run {name!r} is running at step [\d,]+ and goes on", out), out
    assert f"`%supervise stop {name}`" in out and "run this cell again" in out
    views = [[d["data"]["application/vnd.jupyter.widget-view+json"]["model_id"]
              for d in reply.of_type("display_data")
              if "application/vnd.jupyter.widget-view+json" in d["data"]]
             for reply in (first, again)]
    assert len(views[1]) == 1 and views[1] == views[0]      # one more view of its panel
    assert kernel.value(f"[r.name for r in jupyter_supervisor.runs()].count({name!r})") == 1
    assert kernel.value(run_expr(name, "status")) == "running"


def test_error_in_body_fails_the_run_only(kernel, logdir):
    kernel.model()
    name = logdir.rsplit("/", 1)[-1]
    cell = kernel.ok(f"%%supervise --logdir {logdir}\n"
                     "sess.run(train_op)\n"
                     "x = {}\n"
                     "x['missing']\n")
    kernel.ok(f"get_run({name!r}).wait({DEADLINE})")
    assert kernel.value(run_expr(name, "status")) == "failed"
    error = kernel.value(run_expr(name, "error_text"))
    # The traceback points at the cell's own number and line 4 (line 1 is the %%supervise
    # line).
    assert f"Cell In[{cell.content['execution_count']}], line 4" in error
    assert "----> 4 x['missing']" in error
    assert error.rstrip().endswith("KeyError: 'missing'")
    assert "run.py" not in error
    table = kernel.ok("%supervise").stream()
    assert f"{name} failed: KeyError: 'missing'" in table
    # The kernel is well; the graph is usable again.
    assert kernel.ok("print(6 * 7)").stream() == "42\n"
    kernel.ok("extra = tf.constant(1.0)")

    syntax = f"{logdir}-syntax"
    # A body that does not compile fails its cell at once (nothing ran), like any cell.
    reply = kernel.execute(
        f"%%supervise --logdir {syntax}\nwhile not sv.should_stop()\n    pass\n")
    assert reply.status == "error" and reply.error["traceback"][-1] == "SyntaxError: expected ':'"
    assert kernel.value(f"get_run({syntax.rsplit('/', 1)[-1]!r}).status") == "failed"
    error = kernel.value(f"get_run({syntax.rsplit('/', 1)[-1]!r}).error_text")
    assert "SyntaxError" in error and "line 2" in error


def test_new_variables_after_a_run_are_initialized_saved_and_checked(kernel, logdir):
    kernel.model()
    name = logdir.rsplit("/", 1)[-1]
    kernel.ok(f"%%supervise --logdir {logdir} --max-steps 20 --wait\n{LOOP}")
    # The graph was finalized by the run; now it takes new ops again.
    kernel.ok("v2 = tf.compat.v1.get_variable('v2', initializer=3.0)\n"
              "bump = tf.compat.v1.assign_add(v2, 1.0)")
    # The old logdir's checkpoint lacks v2: a clear error, naming it and the ways out.
    reply = kernel.execute(f"%%supervise --logdir {logdir}\n{LOOP}")
    assert reply.status == "error" and reply.error["ename"] == "CheckpointMismatchError"
    assert "'v2'" in reply.error["evalue"] and "--init-fn" in reply.error["evalue"]
    assert "new --logdir" in reply.error["evalue"]
    assert kernel.value(run_expr(name, "status")) == "finished"  # the old run is untouched

    fresh = f"{logdir}-v2"
    kernel.ok(f"%%supervise --logdir {fresh} --max-steps 30 --wait\n"
              "while not sv.should_stop():\n"
              "    sess.run([train_op, bump])\n")
    fresh_name = fresh.rsplit("/", 1)[-1]
    assert kernel.value(f"get_run({fresh_name!r}).status") == "finished"
    saved = kernel.value(f"sorted(tf.train.load_checkpoint(tf.train.latest_checkpoint("
                         f"{fresh!r})).get_variable_to_shape_map())")
    assert "v2" in saved and "w" in saved
    # Restoring v2 works too: a re-run continues from its saved value.
    kernel.ok(f"%%supervise --logdir {fresh} --max-steps 31 --wait\n"
              "before = float(sess.run(v2))\n"
              "while not sv.should_stop():\n"
              "    sess.run([train_op, bump])\n")
    assert kernel.value("before") == 33.0


def test_interrupt_in_wait_mode_stops_gracefully_with_final_checkpoint(kernel, logdir):
    kernel.model()
    name = logdir.rsplit("/", 1)[-1]
    marker = kernel.workdir / f"{name}.trained"
    interrupted = []

    def interrupt_once_trained():
        if marker.exists() and not interrupted:
            kernel.km.interrupt_kernel()
            interrupted.append(True)

    reply = kernel.execute(
        f"%%supervise --logdir {logdir} --wait --save-model-secs 0\n"
        "n = 0\n"
        "while not sv.should_stop():\n"
        "    sess.run(train_op)\n"
        "    n += 1\n"
        f"    if n == 30: pathlib.Path({str(marker)!r}).touch()\n"
        "    time.sleep(0.002)\n", while_waiting=interrupt_once_trained)
    assert interrupted
    assert reply.status == "ok" and reply.error is None
    final = kernel.value(run_expr(name, "global_step"))
    assert final >= 30
    assert kernel.value(run_expr(name, "status")) == "stopped"
    assert kernel.value(f"_newest_step({logdir!r})") == final
    assert reply.stream().splitlines()[-1] == (
        f"Interrupted: run {name!r} stopped at step {final}; newest checkpoint: "
        f"{logdir}/model.ckpt-{final}.")
    assert "Traceback" not in reply.stream() and "KeyboardInterrupt" not in reply.stream()


def _interrupted_beside_a_run(kernel, logdir, code):
    """Starts a background run on ``logdir``, then executes ``code`` and interrupts the kernel
    once while it executes: (the run's name, the reply)."""
    kernel.model()
    name = logdir.rsplit("/", 1)[-1]
    kernel.ok(f"%%supervise --logdir {logdir} --save-model-secs 0\n{LOOP}")
    kernel.wait_until(f"(get_run({name!r}).global_step or 0) > 10", "training")
    interrupted = []

    def interrupt_once():
        if not interrupted:
            interrupted.append(True)
            kernel.km.interrupt_kernel()

    reply = kernel.execute(code.format(name=name), while_waiting=interrupt_once)
    assert interrupted
    return name, reply


def test_interrupting_supervise_wait_stops_the_waiting_not_the_run(kernel, logdir):
    name, reply = _interrupted_beside_a_run(kernel, logdir, "%supervise wait {name}")
    assert reply.status == "ok" and reply.error is None
    line, = reply.stream().splitlines()
    assert re.fullmatch(rf"Stopped waiting: run '{name}' goes on running \(step \d+\); "
                        rf"`%supervise stop {name}` stops it\.", line), line
    step = kernel.value(run_expr(name, "global_step"))
    kernel.wait_until(f"get_run({name!r}).global_step > {step}", "steps after the interrupt")
    assert kernel.value(run_expr(name, "status")) == "running"
    assert "stopped at step" in kernel.ok(f"%supervise stop {name}").stream()
    assert kernel.value(f"_newest_step({logdir!r})") == kernel.value(
        run_expr(name, "global_step"))


def test_kernel_restart_then_rerun_resumes_from_newest_checkpoint(kernel, logdir):
    kernel.model()
    name = logdir.rsplit("/", 1)[-1]
    cell = f"%%supervise --logdir {logdir} --save-summaries-secs 0.05\n{LOOP}"
    kernel.ok(cell)
    kernel.wait_until(f"(get_run({name!r}).global_step or 0) > 30", "training")
    # The periodic checkpoints (every 60 s) hold step 0 only: the shutdown saves a final one.
    kernel.restart()
    newest = kernel.value(f"tf.train.latest_checkpoint({logdir!r})")
    step = kernel.value(f"_newest_step({logdir!r})")
    assert step > 30
    kernel.model()
    kernel.ok(cell)
    kernel.wait_until(f"get_run({name!r}).status == 'running'", "the resumed run")
    assert kernel.value(run_expr(name, "restored_from")) == newest
    kernel.wait_until(f"get_run({name!r}).global_step > {step}", "steps after the restart")
    steps = kernel.value(f"[int(s) for s in get_run({name!r}).history.snapshot()"
                         ".scalars['loss'].steps]")
    assert min(steps) < step


def test_unload_stops_every_live_run_with_a_final_checkpoint(kernel, logdir):
    kernel.model()
    names = []
    for suffix in ("a", "b"):
        # Each body keeps its own op: build_model() rebinds `train_op` for the second graph.
        kernel.ok(f"%%supervise --logdir {logdir}-{suffix} --save-model-secs 0\n"
                  f"op_{suffix} = train_op\n"
                  "while not sv.should_stop():\n"
                  f"    sess.run(op_{suffix})\n"
                  "    time.sleep(0.002)\n")
        names.append(f"{logdir.rsplit('/', 1)[-1]}-{suffix}")
        kernel.wait_until(f"(get_run({names[-1]!r}).global_step or 0) > 5", "training")
        kernel.model()  # the second run trains a graph of its own
    kernel.ok("%unload_ext jupyter_supervisor")
    for name in names:
        assert kernel.value(run_expr(name, "status")) == "stopped"
        assert kernel.value(run_expr(name, "stop_reason")) == "the extension was unloaded"
        assert kernel.value(f"_newest_step({'runs/' + name!r})") == kernel.value(
            run_expr(name, "global_step"))
    assert kernel.value("[t.name for t in threading.enumerate() "
                        "if t.name.startswith('jupyter_supervisor-run')]") == []
    assert kernel.execute("%supervise").status == "error"  # the magics are gone
    kernel.ok("%load_ext jupyter_supervisor")


# -- panels: one per run name -----------------------------------------------------------------

PANEL_THREADS = "[t.name for t in threading.enumerate() if t.name.startswith('jupyter_supervisor-panel-')]"


def test_rerunning_a_cell_keeps_one_panel_and_unload_closes_it(kernel, logdir):
    kernel.model()
    name = logdir.rsplit("/", 1)[-1]
    for limit in range(10, 70, 10):  # six re-runs, each continuing the last
        kernel.ok(f"%%supervise --logdir {logdir} --max-steps {limit} --wait\n{LOOP}")
    assert kernel.value("list(jupyter_supervisor.view.panel._shown)").count(name) == 1
    assert kernel.value(PANEL_THREADS) == []          # every run ended: no refresher
    kernel.ok(f"%%supervise --logdir {logdir}\n{LOOP}")   # a seventh, live
    kernel.wait_until(f"get_run({name!r}).status == 'running'", "the seventh run")
    assert kernel.value(PANEL_THREADS) == [f"jupyter_supervisor-panel-{name}"]
    kernel.ok("%unload_ext jupyter_supervisor")
    assert kernel.value(PANEL_THREADS) == []
    kernel.ok("%load_ext jupyter_supervisor")


def test_ended_runs_leave_no_thread_and_send_nothing(kernel, logdir):
    """A panel whose run ended has no refresher and no heartbeat: 20 ended runs, each shown,
    leave no thread of the package and send no message while nothing asks."""
    kernel.model()
    ours = ("sorted(t.name for t in threading.enumerate() "
            "if t.name.startswith('jupyter_supervisor'))")
    before = kernel.value(ours)
    threads = kernel.value("threading.active_count()")
    for i in range(20):
        kernel.ok(f"%%supervise --logdir {logdir}-{i} --max-steps 5 --wait\n{LOOP}")
    assert kernel.value("sum(p.run.status == 'finished' for p in "
                        "jupyter_supervisor.view.panel._shown.values())") >= 20
    # Each backend's event dispatcher ends after a few idle seconds (events.EventHub); those of
    # an earlier test's runs may still be there at the start.
    kernel.wait_until(f"len({ours}) <= {len(before)} and not [n for n in {ours} "
                      "if n.startswith('jupyter_supervisor-panel')]",
                      "the threads of the ended runs to end")
    assert kernel.value("threading.active_count()") - threads < 20   # none left per run
    # What the kernel sends meanwhile, over three of the panels' beat intervals.
    heard = []
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:
        try:
            heard.append(kernel.kc.get_iopub_msg(timeout=0.2))
        except queue.Empty:
            pass
    kernel.iopub += heard
    assert [m["msg_type"] for m in heard if m["msg_type"] != "status"] == []


# -- stopping never hangs the kernel ----------------------------------------------------------

# A body that never looks at sv.should_stop().
DEAF = """
while True:
    sess.run(train_op)
    time.sleep(0.002)
"""


def _timed(kernel, code):
    """Executes ``code``; returns the reply and the seconds the kernel took to answer."""
    start = time.monotonic()
    reply = kernel.ok(code)
    return reply, time.monotonic() - start


@pytest.mark.parametrize("how", ["command", "button"])
def test_stop_ends_a_body_that_ignores_should_stop(kernel, logdir, how):
    kernel.model()
    name = logdir.rsplit("/", 1)[-1]
    kernel.ok(f"%%supervise --logdir {logdir} --save-model-secs 1 --stop-grace-secs 5\n{DEAF}")
    kernel.wait_until(f"(get_run({name!r}).global_step or 0) > 20", "training")
    start = time.monotonic()
    if how == "command":
        reply, seconds = _timed(kernel, f"%supervise stop {name}")
        print(f"%supervise stop answered in {seconds:.2f} s")
        assert "stopped at step" in reply.stream()
    else:
        # The message a browser sends when Stop is clicked: a comm message to the button.
        button = kernel.value(
            f"jupyter_supervisor.view.panel._shown[{name!r}].widgets['view'].model_id")
        kernel.kc.shell_channel.send(kernel.kc.session.msg("comm_msg", {
            "comm_id": button, "data": {"method": "custom",
                                        "content": {"type": "button", "name": "stop"}}}))
    kernel.wait_until(f"get_run({name!r}).status == 'stopped'", "the stopped run")
    print(f"stopped {time.monotonic() - start:.2f} s after the {how}")
    final = kernel.value(run_expr(name, "global_step"))
    assert kernel.value(f"_newest_step({logdir!r})") == final > 20
    reply, seconds = _timed(kernel, "print('answering')")
    assert reply.stream() == "answering\n"
    print(f"a trivial cell answered in {seconds:.2f} s")


def test_rebuilding_the_model_while_a_run_trains_leaves_its_body_its_own_ops(kernel, logdir):
    kernel.model()
    name = logdir.rsplit("/", 1)[-1]
    start_until_done(kernel, logdir)
    kernel.wait_until(f"(get_run({name!r}).global_step or 0) > 5", "training")
    kernel.model()  # the next cell rebinds train_op to an op of a new graph
    step = kernel.value(run_expr(name, "global_step"))
    kernel.wait_until(f"get_run({name!r}).status != 'running' "
                      f"or get_run({name!r}).global_step > {step} + 20", "steps after the rebuild")
    assert kernel.value(run_expr(name, "error_text")) is None
    kernel.ok("done = True")  # other names are read live, as in any cell
    kernel.ok(f"%supervise wait {name}")
    assert kernel.value(run_expr(name, "status")) == "finished"


def test_tensorflow_info_lines_stay_out_of_the_runs_output(kernel, logdir):
    # TF1 code often turns TensorFlow's INFO logging on; its session manager's lines
    # ("Running local_init_op.") are noise in the run's output area.
    kernel.model()
    name = logdir.rsplit("/", 1)[-1]
    kernel.ok("tf.get_logger().setLevel('INFO')")
    try:
        kernel.ok(f"%%supervise --logdir {logdir} --max-steps 5 --wait\n"
                  "print('from the body')\n" + LOOP)
        output = kernel.value(f"get_run({name!r}).history.snapshot().output")
    finally:
        kernel.ok("tf.get_logger().setLevel('WARNING')")
    assert output == "from the body\n"


def test_a_body_busy_outside_tensorflow_is_reported_as_still_stopping(kernel, logdir):
    kernel.model()
    name = logdir.rsplit("/", 1)[-1]
    kernel.ok("hold, release = False, threading.Event()")
    kernel.ok(f"%%supervise --logdir {logdir} --save-model-secs 0 --stop-grace-secs 2\n"
              "while True:\n"
              "    sess.run(train_op)\n"
              "    if hold:\n"
              "        release.wait()   # busy outside TensorFlow, e.g. a queue\n")
    kernel.wait_until(f"(get_run({name!r}).global_step or 0) > 10", "training")
    kernel.ok("hold = True")
    reply, seconds = _timed(kernel, f"%supervise stop {name}")
    print(f"%supervise stop answered in {seconds:.2f} s (--stop-grace-secs 2)")
    assert "is still stopping: its cell body has not returned" in reply.stream()
    assert kernel.value(run_expr(name, "status")) == "stopping"
    assert f"{name} is still stopping" in kernel.ok("%supervise").stream()
    reply, seconds = _timed(kernel, "print('answering')")
    assert reply.stream() == "answering\n"
    # The body goes on; its next sess.run ends it, and the final checkpoint is exact.
    kernel.ok("release.set()")
    kernel.ok(f"%supervise wait {name}")
    assert kernel.value(run_expr(name, "status")) == "stopped"
    assert kernel.value(f"_newest_step({logdir!r})") == kernel.value(
        run_expr(name, "global_step"))


def test_the_notebooks_interrupt_stops_the_cell_not_a_background_run(kernel, logdir):
    name, reply = _interrupted_beside_a_run(kernel, logdir, "threading.Event().wait(60)")
    assert reply.status == "error" and reply.error["ename"] == "KeyboardInterrupt"
    step = kernel.value(run_expr(name, "global_step"))
    kernel.wait_until(f"get_run({name!r}).global_step > {step}", "steps after the interrupt")
    assert kernel.value(run_expr(name, "status")) == "running"
    assert "stopped at step" in kernel.ok(f"%supervise stop {name}").stream()
