"""FitState: the fit side of one eager session, the one ``fit_seam.FitSide``.

It holds what a ``model.fit`` under ``sv.callback`` changes in the session (which fit of the body
runs, whether one runs, the epoch whose values ``--keep-best`` weighs next), builds the callback
on first use (Keras is imported then) and holds it through ``fit_seam.FitHooks``, and calls the
checkpointer itself for what the callback asks: its position (``Where``), its part of the
checkpoint, the restored state. The step boundary and the tracking of the model are the
session's: it gets them as callables; the stop is the session's ``stops.Stops``, read here.

The final save is one method, ``final_save``: at a stop inside an epoch, before a tracked
optimizer's ``finalize_variable_values`` (which fit calls after its last epoch), at a fit's end
and at the session's end. Each writes the checkpoint unless this step is saved already, so the
first of them that finds the training state moved writes it.
"""
from typing import Callable, Dict, List, Optional

from .._validate import invalid, named, short
from ..backend import StopBody
from ..stops import Stops
from .checkpointer import Checkpointer, Where
from .fit_seam import FitHooks, FitStart
from .reporting import Reporter


class FitState:
    """The fit side of one session (see the module docstring).

    ``check_active(what)`` raises outside the session's training thread; ``trains_here()``
    says whether this is it; ``track(objects, kind)`` tracks and restores ``objects`` as
    ``sv.track`` does; ``boundary(progress, due)`` is the session's step boundary, True when
    training must stop.
    """

    def __init__(self, checkpointer: Checkpointer, where: Where, reporter: Reporter,
                 stops: Stops, *, check_active: Callable[[str], None],
                 trains_here: Callable[[], bool],
                 track: Callable[[Dict[str, object], str], Optional[str]],
                 boundary: Callable[[Optional[tuple], bool], bool]):
        # What it calls itself: the session's parts, and the session's own steps.
        self._checkpointer, self._where, self._reporter = checkpointer, where, reporter
        self._stops = stops
        self._check_active, self._trains_here = check_active, trains_here
        self._track, self._boundary = track, boundary
        self._fits = 0                    # fit calls started in this session
        self.in_fit = False               # a fit with sv.callback runs
        # (epoch, logs) of the epoch whose end runs: offered to --keep-best at the boundary
        # after every callback's on_epoch_end (fit_paused).
        self._epoch_values: Optional[tuple] = None
        self._callback: Optional[FitHooks] = None
        self._finalizing: List[object] = []  # the optimizers whose finalize_variable_values is ours

    # ------------------------------------------------------------------- the session's side

    def callback(self):
        """The Keras callback of this session (``sv.callback``), built on first use."""
        if self._callback is None:
            from .keras_callback import SupervisorCallback  # pylint: disable=import-outside-toplevel
            self._callback = SupervisorCallback(self)
        return self._callback

    @property
    def has_callback(self) -> bool:
        """True once the body asked for ``sv.callback``."""
        return self._callback is not None

    def hook_finalize(self, objects: Dict[str, object]) -> None:
        """The checkpoint that ends training is written before a tracked optimizer's
        ``finalize_variable_values`` (which fit calls after its last epoch, and a loop may
        call): that may swap values into the model (the averages of ``use_ema=True``), and the
        checkpoint must hold the training state (the raw weights, the averages beside)."""
        for obj in objects.values():
            original = getattr(obj, "finalize_variable_values", None)
            if original is None or not hasattr(obj, "apply_gradients"):
                continue

            def finalize(var_list, _original=original):
                if self.trains_here():
                    self.final_save()
                return _original(var_list)

            obj.finalize_variable_values = finalize
            self._finalizing.append(obj)

    def session_ends(self) -> None:
        """The session ends: a fit that raised leaves its train_function wrapped, and the
        optimizers their hooks; both are given back."""
        if self._callback is not None:
            self._callback.uninstall()
        for obj in self._finalizing:
            vars(obj).pop("finalize_variable_values", None)
        self._finalizing = []
        self.in_fit = False

    def release(self) -> None:
        """The callback forgets its model (the session's teardown)."""
        if self._callback is not None:
            self._callback.release()

    # ------------------------------------------------------------------- FitSide: asked

    def trains_here(self) -> bool:
        """True in the training thread while the session runs (a fit elsewhere is not ours)."""
        return self._trains_here()

    @property
    def restored_from(self) -> Optional[str]:
        """The checkpoint the session restored, or None."""
        return self._checkpointer.restored_path

    @property
    def restored_input(self):
        """The restored checkpoint's record of its fit's input (``data_position``), or None."""
        return self._checkpointer.restored_input

    def restored_part(self, key: str) -> dict:
        """The state of ``key`` in the restored checkpoint ({}: none)."""
        return self._checkpointer.restored_parts.get(key) or {}

    def restored_arrays(self, name: str) -> Optional[list]:
        """The arrays the restored checkpoint holds under ``name``, or None."""
        return self._checkpointer.restored_arrays(name)

    def stop_is_max_steps(self) -> bool:
        """True when the run stops only because it reached max_steps (nobody asked)."""
        record = self._stops.record
        return record is not None and record.max_steps_only

    # ------------------------------------------------------------------- FitSide: told

    def fit_begin(self, model) -> FitStart:
        """A fit with the callback starts: in the training thread, it tracks the model and its
        optimizer (restoring them) unless ``track()`` named them, and raises StopBody when the
        run is stopping already (the body did not look). Its steps are step boundaries from
        now on, until ``fit_end``."""
        self._check_active("model.fit(..., callbacks=[sv.callback])")
        self._fits += 1
        items = self._checkpointer.items
        if items is None:
            optimizer = model.optimizer
            if getattr(optimizer, "built", True) is False and model.trainable_variables:
                optimizer.build(model.trainable_variables)
            self._track({"model": model, "optimizer": optimizer}, "callback")
        elif not any(value is model for value in items.values()):
            raise ValueError(invalid(
                "model", model, "the model this session tracks already (" + named(items)
                + "): one session checkpoints one set of objects. Fit that model, or train "
                "this one in another run (another logdir)", shown=short(model)))
        if self._stops.requested:
            raise StopBody()
        self._checkpointer.set_stepping(True)
        self.in_fit = True
        self._epoch_values = None
        return FitStart(self._fits - 1, self._checkpointer.restored_position)

    def fit_at(self, epoch: int, batch: int) -> None:
        """Where the fit is now: ``batch`` batches of ``epoch`` done (0-based epoch; a
        checkpoint records it, a resume continues from it)."""
        self._where.fit = (self._fits - 1, epoch, batch)

    def fit_input(self, record) -> None:
        """``record(epoch, batch)``: what a checkpoint of the running fit records of its input
        (``data_position.FitInput.saved``), until ``fit_end``."""
        self._where.input = record

    def fit_part(self, part) -> None:
        """``part()`` gives the running fit's state (plain JSON) to every checkpoint."""
        self._checkpointer.parts["fit"] = part

    def keep_arrays(self, name: str, arrays: list) -> None:
        """At a save: ``arrays`` go into the checkpoint under ``name`` (``Checkpointer``)."""
        self._checkpointer.keep_arrays(name, arrays)

    def fit_batches(self, count: int, logs, progress: tuple, due: bool = True) -> bool:
        """``count`` batches of fit ended (a step boundary; ``logs``: their scalars,
        ``progress``: (epoch, epochs, batch, batches); not ``due``: a due checkpoint waits for
        the next boundary, the epoch's validation or end). True: fit must stop."""
        self._where.step += count
        self._where.scalars = logs
        return self._boundary(progress, due)

    def fit_paused(self, moved: bool = False) -> bool:
        """A boundary of fit where no batch ended (in its validation; after an epoch's end,
        ``moved``: the training state moved on without a step): a checkpoint asked for, or
        due, is written. True: fit must stop."""
        checkpointer = self._checkpointer
        if moved:
            checkpointer.state_changed()
        rolled_back = checkpointer.at_boundary()
        if moved and self._epoch_values is not None:
            # --keep-best: the epoch's values, measured on the state here (every callback's
            # on_epoch_end ran), unless a rollback just put an older state in its place.
            (epoch, logs), self._epoch_values = self._epoch_values, None
            if not rolled_back:
                checkpointer.offer(logs, epoch)
        checkpointer.save_at_boundary()
        return self._stops.requested

    def fit_epoch_end(self, epoch: int, logs) -> None:
        """Epoch ``epoch`` (0-based) ended: its ``logs`` are written as ``epoch_<name>``
        scalars. Called for a complete epoch only (a stop cuts a half epoch before its end:
        ``keras_callback``), so this is where "the epoch is complete, and these are its values"
        is known; ``--keep-best`` weighs them at the boundary after every callback's
        ``on_epoch_end`` (``fit_paused``), whose state the best checkpoint then holds."""
        self._reporter.scalars(logs, self._where.step, prefix="epoch_")
        self._epoch_values = (epoch, dict(logs))

    def final_save(self) -> None:
        """The checkpoint that ends training (a fit, or the session), unless this step is
        saved: a running fit's callbacks get their restored state first (their on_train_end
        may use it)."""
        if self._callback is not None:
            self._callback.before_final_save()
        self._checkpointer.save_if_moved()

    def fit_end(self) -> None:
        """The fit ended: the checkpoint that ends it (unless this step is saved)."""
        self.in_fit = False
        self.final_save()
        self._checkpointer.set_stepping(False)
        self._where.input = None  # it holds the fit's input; a resume after it needs none
