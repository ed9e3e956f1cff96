"""The ``%%supervise`` cell magic and the ``%supervise`` line magic.

They parse (IPython's magic_arguments: ``%%supervise?`` lists every option, a bad option is a
UsageError) and delegate: ``options.py`` makes the run's configuration of the arguments,
``run.py`` runs it; the panel shows the run. TensorFlow is imported with
the first run, not when the extension is loaded.
"""
import argparse
import ast
import functools
import os
import re
import shlex
import sys
import time

from IPython.core import ultratb
from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

from .. import capabilities, names
from ..config import RunConfig
from ..view import panel, text
from .body import compile_python
from .options import one_line, option_message, run_config

COMMANDS = ("list", "stop", "resume", "save", "wait", "show", "compare", "versions")


class RunFailedError(RuntimeError):
    """A run waited for with ``--wait`` or ``%supervise wait`` failed; shows its traceback."""

    def __init__(self, run):
        super().__init__(f"Run {run.name!r} failed: {run.error_line}")
        self.run = run

    def _render_traceback_(self):
        # IPython shows this instead of our own frames: the body's traceback, at the cell lines.
        return (self.run.error_text or str(self)).rstrip("\n").splitlines()


def _run_module():
    from . import run  # pylint: disable=import-outside-toplevel  (imports TensorFlow)
    return run


def _user_errors(run):
    """Errors from starting a run that are the user's to fix: shown as one line."""
    return (run.RunConflictError, run.RunStateError, run.LogdirLockedError,
            run.CheckpointMismatchError, ValueError, TypeError)


# -- the options of RunConfig (each declared there once), as argparse arguments -------------

def _checked(flag: str, kind: type, check):
    """An argparse ``type=``: parses the text as ``kind``, then ``check``s it under the flag
    the user typed (a refused value is an ArgumentTypeError saying what was expected)."""
    def parse(text: str):
        value = kind(text)  # ValueError: argparse's "invalid int value"
        if check is not None:
            try:
                check(flag, value)
            except ValueError as e:
                raise argparse.ArgumentTypeError(option_message(str(e))) from None
        return value
    parse.__name__ = kind.__name__
    return parse


def _config_arguments(magic):
    """Adds an argument per option of ``RunConfig`` (``RunConfig.options()``): its flag,
    default, parsing, check and help come from there."""
    for name, default, option, check in reversed(RunConfig.options()):
        flag = "--" + name.replace("_", "-")
        if option.kind is bool:
            magic = argument(flag, action="store_true", help=option.help)(magic)
            continue
        # With choices, argparse's own message names them all.
        magic = argument(flag, metavar=option.metavar, default=default, help=option.help,
                         type=_checked(flag, option.kind, None if option.choices else check),
                         choices=option.choices)(magic)
    return magic


@magics_class
class SuperviseMagics(Magics):
    """``%%supervise`` runs a cell under a Supervisor; ``%supervise`` lists and steers runs."""

    @magic_arguments("%supervise")  # the help's usage line then reads %%supervise
    @_config_arguments
    @argument("--init-fn", metavar="NAME", default=None,
              help="A function of the notebook called after initialization when there is no "
                   "checkpoint to restore (e.g. to warm-start): fn(sess) for graph code, fn() "
                   "in eager mode (after sv.track or the start of fit). Default: none.")
    @argument("--wait", action="store_true",
              help="Block until the run ends (for scripts, nbval, papermill). The cell is "
                   "then the run: a kernel interrupt stops it with a final checkpoint.")
    @argument("--cluster", metavar="CLUSTER", default=None,
              help="Train as a task of a TensorFlow cluster, with --job and --task-index. "
                   "CLUSTER: the name of a notebook variable holding a dict such as "
                   "{'ps': ['host0:2222'], 'worker': ['host1:2222', 'host2:2222']} (or a "
                   "tf.train.ClusterSpec), or that dict as quoted JSON. The kernel starts "
                   "the task's tf.distribute.Server (once: re-running the cell reuses it; a "
                   "port in use is an error) and trains on it. The session sees only the ps "
                   "tasks and this task, so a task can start or restart while another is "
                   "down. A ps task runs no training cell: serve it from a plain cell, "
                   "server = jupyter_supervisor.cluster.start_server(CLUSTER, 'ps', 0); "
                   "the kernel serves while it lives. Default: none.")
    @argument("--job", metavar="NAME", default=None,
              help="This task's job in --cluster: 'worker', or 'chief' for a cluster with "
                   "a chief job (needed with --cluster). Default: none.")
    @argument("--chief", dest="chief", action="store_true", default=None,
              help="This task is the chief: it initializes or restores the model and "
                   "writes the checkpoints and summaries. Default: with --cluster, task 0 "
                   "of the 'chief' job, or of the 'worker' job when there is no 'chief' "
                   "job; with --master, task 0.")
    @argument("--no-chief", dest="chief", action="store_false",
              help="This task is not the chief: it waits for the chief's model "
                   "(checking every --recovery-wait-secs; the panel says 'waiting for "
                   "chief'), then trains. It saves nothing, even with --logdir.")
    @cell_magic("supervise")
    def supervise_cell(self, line, cell):
        """Run the cell under a Supervisor in a background thread; the cell returns at once.

        TensorFlow 2 (eager execution, the default): `sv` is bound in the notebook, and the
        body says what to checkpoint. Keras fit passes the run's callback:

            %%supervise --logdir runs/fit
            model.fit(x, y, epochs=50, callbacks=[sv.callback])

        (re-running the cell resumes at the checkpoint's epoch and batch, with the optimizer's
        state (the learning rate training reached, unless the code now sets another), the
        callbacks' state (EarlyStopping, ReduceLROnPlateau, ModelCheckpoint, History,
        CSVLogger; one of yours with get_state() and set_state(state)), the epoch's running
        metrics, the random layers' seed states and the input's position: the input the cell
        builds again is replayed to where the run's was, a tf.data shuffle's order of that
        epoch, a generator's earlier draws, a PyDataset's on_epoch_end; initial_epoch is where
        the first run started. With keras.utils.set_random_seed(...) and deterministic ops the
        resumed run equals an uninterrupted one bit for bit; an order that cannot be replayed
        (shuffle=True or Dataset.shuffle with no seed; in the same kernel, the generator the
        stopped fit drew from, or its dataset where it cannot be copied anew: build the input
        in the cell) or an input that changed since (another batch_size) is said in the run's
        output. A stop inside an epoch saves at once, and that half epoch's validation and
        on_epoch_end do not run. See docs/resume.md. A fit without
        sv.callback saves nothing, and the run's output says so). A custom loop names what to
        checkpoint (a tf.random.Generator too) and reports each step:

            %%supervise --logdir runs/loop --max-steps 10000
            sv.track(model=model, optimizer=opt)   # restores the newest checkpoint
            while not sv.should_stop():
                loss = train_step(x, y)
                sv.step(loss=loss)                 # counts, reports, saves when due

        TF1 graph code (tf.compat.v1.disable_eager_execution() first) trains on the default
        graph with `sv` (the Supervisor) and `sess` (the managed session):

            %%supervise --logdir runs/mnist --max-steps 20000
            while not sv.should_stop():
                sess.run(train_op)

        The body executes in the notebook's namespace like any cell (what it assigns, later
        cells see, and it reads a flag that a later cell sets). Its `sv` and `sess`, and the
        ops, tensors and variables of its graph that its names held when the cell executed,
        stay its own: re-running the model-building cells meanwhile does not change them.
        It is a cell: magics (%time, %%time on its first line), !cmd, obj? and top-level await
        work; %%supervise, %%capture, %debug and %pdb are refused. What it and the threads it
        starts print or display (figures, display(), widgets such as tqdm.auto) goes to the
        run's panel, never to the cell that executes at that time (docs/magic.md).
        Later: %supervise (list), %supervise stop|resume|save|wait|show NAME.

        Stopping (the panel's Stop, %supervise stop, --max-steps) ends the body at a step
        boundary: a loop that checks sv.should_stop() ends there; one that never checks
        (`while True: sess.run(train_op)`) is ended by its next sess.run of the bound `sess`
        (in eager mode, its next sv.step(); Keras fit at its next batch), then the final
        checkpoint holds that exact step. A session the body opens itself is
        not reached that way, nor a body busy outside TensorFlow (a long sleep): %supervise
        stop then answers after --stop-grace-secs, saying the run is still stopping, and the
        final checkpoint is written when the body returns. The notebook's own interrupt
        stops the cell that executes, never a background run: interrupting `%supervise wait
        NAME` only stops the waiting (the run goes on; `%supervise stop NAME` stops it). A
        --wait cell is the run itself, so interrupting it stops the run gracefully, with a
        final checkpoint.

        The kernel's end is a clean stop too: while a run is live, SIGTERM (a preemption,
        docker stop), SIGHUP, the server's death, a restart or shutdown from the page,
        %unload_ext and the process's exit first stop every live run at its next step with
        its final checkpoint (at most 25 s; a restart gives 5 s unless the server's
        c.KernelManager.shutdown_wait_time says more). A save cut by the kernel's end never
        becomes the newest checkpoint. The next session on the logdir says why the last one
        stopped. See docs/preemption.md.

        Replicas: one notebook per task, each with the same CLUSTER dict, builds its model
        with variables on the ps (jupyter_supervisor.cluster.replica_device_setter) and runs

            %%supervise --cluster CLUSTER --job worker --task-index 1 --logdir runs/mnist

        Task 0 of the worker job is the chief; the others wait for it. The ps tasks serve from
        a plain cell: server = jupyter_supervisor.cluster.start_server(CLUSTER, "ps", 0).

        TensorFlow 2 replicas (tf.distribute.MultiWorkerMirroredStrategy, TF_CONFIG set in each
        worker's kernel): every worker runs the same cell, a custom loop with strategy.run and
        sv.track/sv.step. TF_CONFIG names the chief, which alone saves; every worker restores
        the chief's newest checkpoint from the shared --logdir, and a stop on any worker stops
        all of them at one step. Keras 3 model.fit does not support that strategy yet. See
        docs/replicas.md.
        """
        args = _parse(self.supervise_cell, line, "%%supervise?")
        run = _run_module()
        if not cell.strip():
            raise UsageError("%%supervise needs a cell body: the training loop, e.g.\n"
                             "    while not sv.should_stop():\n        sess.run(train_op)")
        training = _start(run, run_config(args, self.shell.user_ns), cell, self.shell)
        if args.wait:
            _wait(training, stop_on_interrupt=True)

    @magic_arguments("supervise")
    @argument("command", nargs="?", default="list", choices=COMMANDS,
              help="list: a table of the runs (the default). stop: stop after the current "
                   "step, with a final checkpoint. resume: continue from the newest "
                   "checkpoint. save: write a checkpoint now. wait: block until the run ends "
                   "(an interrupt stops the waiting, not the run). show: display its panel again (where no widget "
                   "renders: its status, what happened, the best value of each metric). "
                   "compare: the curves of several runs in one chart per tag "
                   "(%supervise compare a b c; without names, every run). versions: the "
                   "installed TensorFlow, Keras and notebook libraries, and which promises "
                   "hold on them (docs/versions.md).")
    @argument("name", nargs="*", default=[],
              help="The run; may be left out when there is only one. compare takes several.")
    @line_magic("supervise")
    def supervise_line(self, line):
        """List and steer the runs started with %%supervise."""
        args = _parse(self.supervise_line, line, "%supervise?")
        if args.command == "list":
            if args.name:
                raise UsageError("%supervise list takes no name.")
            print(_table())
            return
        if args.command == "versions":
            if args.name:
                raise UsageError("%supervise versions takes no name.")
            print(capabilities.versions().text())
            return
        run = _run_module()
        if args.command == "compare":
            try:
                trainings = ([run.get_run(name) for name in dict.fromkeys(args.name)]
                             if args.name else run.runs())
            except KeyError as e:
                raise UsageError(e.args[0]) from None
            if not trainings:
                raise UsageError("There is no run yet: start one with %%supervise.")
            panel.compare(trainings)
            return
        if len(args.name) > 1:
            raise UsageError(f"%supervise {args.command} takes one run name; received "
                             f"{len(args.name)}: {' '.join(args.name)}.")
        try:
            training = run.get_run(args.name[0] if args.name else None)
        except KeyError as e:
            raise UsageError(e.args[0]) from None
        try:
            if args.command == "show":
                _show(training, full=True)
            elif args.command == "wait":
                _wait(training, stop_on_interrupt=False)
            elif args.command == "stop":
                _stop(training)
            elif args.command == "save":
                path = training.save_now()
                print(f"Run {training.name!r}: checkpoint saved: {path}" if path else
                      f"Run {training.name!r}: no checkpoint written (nothing to save, or the "
                      "model is not finite and the run rolls back: see its panel).")
            elif args.command == "resume":
                training.resume()
                _show(training)
        except _user_errors(run) as e:
            raise one_line(e)

# ----------------------------------------------------------------------------- starting

def _start(run, config, cell, shell):
    """Starts the run of ``cell`` (the ``run`` module's ``TrainingRun`` under ``config``),
    says what it does differently from what its options suggest, shows its panel and returns
    it. What the user can fix is one line; a body that does not compile is the cell's error.
    The cell of a run that is live (its name, on its logdir) shows that run and says that it
    goes on: a person who came back to look at it is not told to stop it."""
    going = _live_run_of(run, config)
    if going is not None:
        print(_goes_on(going))
        _show(going, full=True)
        return going
    training = run.TrainingRun(config, cell, shell.user_ns,
                               transform_source=functools.partial(transform_body, shell),
                               compile_source=functools.partial(_compile_body, shell),
                               format_exception=format_exception)
    try:
        training.start()
    except _user_errors(run) as e:
        if type(e) in (ValueError, TypeError):  # pylint: disable=unidiomatic-typecheck
            raise one_line(type(e)(option_message(str(e)))) from None
        raise one_line(e)
    if training.status == names.FAILED and isinstance(training.exception, SyntaxError):
        raise RunFailedError(training)  # the body does not compile: nothing ran
    if config.logdir is None and config.is_chief:
        print(f"No --logdir: run {config.name!r} saves nothing (no checkpoints, no "
              "summaries) and cannot be resumed.")
    _print_notes(training)
    _show(training)
    return training


def _same_logdir(a, b) -> bool:
    if a is None or b is None:
        return a is b
    return os.path.normcase(os.path.realpath(a)) == os.path.normcase(os.path.realpath(b))


def _live_run_of(run, config):
    """The live run that a cell of these options started: its name, on its logdir; or None."""
    for training in run.runs():
        if training.is_live and training.name == config.name and \
                _same_logdir(training.config.logdir, config.logdir):
            return training
    return None


def _goes_on(training) -> str:
    """What the cell of a live run says when it runs again: the run goes on, and how to stop
    it or start it again."""
    name = training.name
    snap = training.history.snapshot()
    at = "" if snap.step is None else f" at step {snap.step:,}"
    if training.status == names.STOPPING:
        how = (f"It is writing its final checkpoint: `%supervise wait {name}` waits for it; "
               "then this cell, run again, resumes from that checkpoint.")
    else:
        how = (f"To stop it (with a final checkpoint): `%supervise stop {name}`. To start it "
               "again with this cell's code: stop it, then run this cell again (it resumes "
               "from the newest checkpoint).")
    return (f"Run {name!r} is {text.status_label(snap)}{at} and goes on: this cell did not "
            f"start it again. Its panel is below. {how}")


def _compile_body(shell, python, run_name):
    # Cached under the cell's number, one line down (the %%supervise line), so that
    # tracebacks say "Cell In[N], line L" with L the line in the notebook cell.
    del run_name
    text = "\n" + python
    filename = shell.compile.cache(text, _cell_number(shell), raw_code=text)
    return compile_python(text, filename)


# Magics that cannot work in a background run's body, and why (a UsageError when the cell runs).
_REFUSED_MAGICS = {
    "supervise": "a run cannot start another run from its body: start each run from a cell of "
                 "its own.",
    "capture": "it replaces the kernel's output streams for every thread while it runs, so it "
               "would take the output of the cells that run meanwhile. The run keeps what its "
               "body prints and displays (its panel, `%supervise show NAME`); to capture a "
               "whole run, put %%capture above %%supervise and add --wait.",
    "debug": "the debugger reads its commands from the cell that executes, which a background "
             "run is not. Debug that code in a plain cell.",
    "pdb": "the debugger reads its commands from the cell that executes, which a background "
           "run is not. Debug that code in a plain cell.",
}
_MAGIC_CALLS = {"run_cell_magic": "%%", "run_line_magic": "%"}


def transform_body(shell, source: str) -> str:
    """The body as Python, transformed as IPython transforms a cell (magics, ``!cmd``,
    ``obj?``), each line where it was in the cell; a magic that cannot work in a background
    run is a UsageError."""
    python = shell.transform_cell(source)
    # IPython drops a cell's leading blank lines; put back, they keep each line's number.
    lines = source.splitlines()
    blank = next((i for i, line in enumerate(lines) if line.strip()), 0)
    _refuse_magics(shell, python)
    return "\n" * blank + python


def _refuse_magics(shell, python: str) -> None:
    try:
        tree = ast.parse(python)
    except SyntaxError:
        return  # compiling the body says what is wrong
    for node in ast.walk(tree):
        call = node.func if isinstance(node, ast.Call) else None
        if not (isinstance(call, ast.Attribute) and call.attr in _MAGIC_CALLS
                and isinstance(call.value, ast.Call) and isinstance(call.value.func, ast.Name)
                and call.value.func.id == "get_ipython" and node.args
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            continue
        written = node.args[0].value   # '%capture' for a %%capture below the first line
        name = written.lstrip("%")
        if name in _REFUSED_MAGICS:
            shown = ("%%" if written.startswith("%") else _MAGIC_CALLS[call.attr]) + name
            raise UsageError(f"{shown} cannot be used in a %%supervise body: "
                             f"{_REFUSED_MAGICS[name]}")
        cell = node.args[2] if len(node.args) > 2 else None
        if call.attr == "run_cell_magic" and isinstance(cell, ast.Constant) and \
                isinstance(cell.value, str):
            _refuse_magics(shell, shell.transform_cell(cell.value))  # %%time's own cell


def _cell_number(shell) -> int:
    """The number of the executing cell, as its prompt shows it (IPython 9 counts
    ``execution_count`` up before the cell runs, IPython 8 after)."""
    result = getattr(shell.displayhook, "exec_result", None)
    if result is not None and result.execution_count is not None:
        return result.execution_count
    return shell.execution_count


def format_exception(error: BaseException) -> str:
    """The error as IPython shows it (with the cell's own lines), without colors."""
    if isinstance(error, SyntaxError) and error.__traceback__ is None:
        formatter = ultratb.SyntaxTB(theme_name="nocolor")  # the line, with a caret
    else:
        formatter = ultratb.FormattedTB(mode="Context", theme_name="nocolor")
    structured = formatter.structured_traceback(type(error), error, error.__traceback__)
    return formatter.stb2text(structured)


def _parse(magic, line: str, help_hint: str):
    """The magic's arguments, the line split as a shell splits it (``--logdir "runs/a b"``
    gives ``runs/a b``: IPython's own splitting keeps the quotes); a line argparse refuses is a
    UsageError that says where the options are listed (or, for a value our ``type=`` refused,
    what was expected)."""
    lexer = shlex.shlex(line, posix=True)
    lexer.whitespace_split, lexer.commenters = True, ""
    lexer.escape = ""  # a backslash stays as typed: the checks refuse it, not silently dropped
    try:
        words = list(lexer)
    except ValueError as e:  # shlex: "No closing quotation"
        raise UsageError(f"{e}: {line.strip()}. Quote a value with spaces as in a shell, e.g. "
                         '--logdir "runs/my run".') from None
    try:
        return magic.parser.parse_args(words)
    except UsageError as e:
        message = str(e)
        refused = re.match(r"argument [^:]+: (Invalid value for argument .*)", message)
        if refused:
            raise UsageError(refused.group(1)) from None
        raise UsageError(f"{message.rstrip('.')}. `{help_hint}` lists the options.") from None


def _print_notes(training) -> None:
    """What a run that started does differently from what its options suggest."""
    for note in training.notes:
        print(note)


# ------------------------------------------------------------------------------ display

def _show(training, full=False) -> None:
    """The run's live panel; where no widget can show, its status line (``full``: the whole
    text summary, with the error of a failed run)."""
    if full and not panel.widget_frontend_available():
        summary = text.text_summary(training)
        if training.history.snapshot().stalled is not None:
            summary = text.bell(sys.stdout) + summary
        print(summary)
        return
    panel.show(training)


def _table() -> str:
    """The runs of this kernel: name, status, step, steps/sec, newest checkpoint, logdir; then
    remarks (roles, failures, stop reasons, the best checkpoint kept)."""
    run = sys.modules.get(__package__ + ".run")
    trainings = run.runs() if run is not None else []
    if not trainings:
        return "No runs yet: start one with %%supervise."
    header = ("name", "status", "step", "steps/sec", "newest checkpoint", "logdir")
    rows = []
    remarks = []
    for training in trainings:
        snap = training.history.snapshot()
        rate = ("" if snap.steps_per_sec is None or not training.is_live
                else f"{snap.steps_per_sec:.1f}")
        newest = snap.checkpoints[0].path if snap.checkpoints else ""
        step = training.global_step if training.global_step is not None else snap.step
        rows.append((training.name, training.status or "", "" if step is None else str(step),
                     rate, newest, training.logdir or "(not saved)"))
        if training.role_text:
            remarks.append(f"{training.name} runs as {training.role_text}" + (
                "; its checkpoints are the chief's" if training.role == "worker" else ""))
        if training.status == names.FAILED:
            remarks.append(f"{training.name} failed: {training.error_line} "
                            f"(`%supervise show {training.name}` shows the traceback)")
        elif training.status == names.STOPPED and training.stop_reason:
            remarks.append(f"{training.name} stopped: {training.stop_reason}")
        elif training.stopping_secs > training.config.stop_grace_secs:
            remarks.append(f"{training.name} is still stopping: its cell body has not "
                            "returned.")
        elif snap.stalled is not None:
            remarks.append(text.stall_line(training, snap, time.time()))
        if snap.best is not None:
            remarks.append(f"{training.name} keeps the best {snap.best.text()}: "
                           f"{snap.best.path}")
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip()
             for r in [header] + rows]
    return "\n".join(lines + remarks)


# ------------------------------------------------------------------------------- waiting

def _wait(training, stop_on_interrupt: bool) -> None:
    """Blocks until the run ends; a failure is raised. An interrupt of a ``--wait`` cell
    (``stop_on_interrupt``: the cell is the run, as Ctrl-C in a script) stops the run
    gracefully; an interrupt of ``%supervise wait`` only ends the waiting. Where no widget
    renders, a stall and its end are said meanwhile, one line each."""
    try:
        if panel.widget_frontend_available():
            training.wait()
        else:
            _wait_saying_stalls(training)
    except KeyboardInterrupt:
        if stop_on_interrupt:
            _stop(training, interrupted=True)
        elif training.is_live:
            print(_still_running(training))
        else:
            _end_summary(training)  # it ended as the interrupt came
        return
    _end_summary(training)
    if training.status == names.FAILED:
        raise RunFailedError(training)


# How often a wait where no widget renders looks for a stall.
STALL_CHECK_SECS = 1.0


def _wait_saying_stalls(training) -> None:
    stalled = None
    while not training.wait(STALL_CHECK_SECS):
        snap = training.history.snapshot()
        if snap.stalled == stalled:
            continue
        if snap.stalled is not None:
            print(text.bell(sys.stdout) + text.stall_line(training, snap, time.time()),
                  flush=True)
        elif training.is_live:
            print(f"Run {training.name!r} steps again (step {training.global_step}).",
                  flush=True)
        stalled = snap.stalled


def _stop(training, interrupted=False) -> None:
    """Asks the run to stop and waits for its end, at most ``--stop-grace-secs``: the kernel
    answers within that bound whatever the body does."""
    if interrupted and not training.is_live:
        return
    training.stop(wait=False)
    try:
        ended = training.wait(timeout=training.config.stop_grace_secs)
    except KeyboardInterrupt:
        ended = False
    if not ended:
        print(_still_stopping(training))
        return
    if panel.widget_frontend_available():
        panel.finish(training)  # its records brought up to date while this cell executes
    print(_stopped_line(training, interrupted))


def _still_running(training) -> str:
    step = "" if training.global_step is None else f" (step {training.global_step})"
    return (f"Stopped waiting: run {training.name!r} goes on {training.status}{step}; "
            f"`%supervise stop {training.name}` stops it.")


def _still_stopping(training) -> str:
    return (f"Run {training.name!r} is still stopping: its cell body has not returned. A body "
            "ends at its next sess.run once a stop is requested, but this one is busy "
            "elsewhere (a long sleep, a queue, a loop without sess.run). Its final checkpoint "
            "is written when it returns; `%supervise wait "
            f"{training.name}` waits for that, `%supervise` shows how it is going.")


def _stopped_line(training, interrupted) -> str:
    snap = training.history.snapshot()
    why = "Interrupted: run" if interrupted else "Run"
    step = "" if training.global_step is None else f" at step {training.global_step}"
    if training.status == names.FAILED:
        return f"{why} {training.name!r} failed while stopping{step}: {training.error_line}"
    if not training.logdir and training.role == "worker":
        return f"{why} {training.name!r} {training.status}{step} (the chief saves)."
    if not training.logdir:
        return f"{why} {training.name!r} {training.status}{step} (nothing saved: no --logdir)."
    newest = snap.checkpoints[0].path if snap.checkpoints else "none"
    return f"{why} {training.name!r} {training.status}{step}; newest checkpoint: {newest}."


def _end_summary(training) -> None:
    # The panel and its record show the end; one line in the cell's own output says it too
    # (what a reader of the cell, and nbval, sees first). Where no widget can show (a
    # terminal), the whole summary.
    if panel.widget_frontend_available():
        # Its records, brought up to date while this cell executes; a failure's traceback is
        # raised into this cell next, so the panel does not show it a second time.
        panel.finish(training, error_in_cell=training.status == names.FAILED)
        print(text.text_status(training))
    else:  # a failure's traceback follows, raised: not printed here too
        print(text.text_summary(training, with_error=training.status != names.FAILED))

