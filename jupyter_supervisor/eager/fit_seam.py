"""The seam between a Keras ``fit`` and the eager backend, declared: what ``sv.callback`` may ask
and tell (``FitSide``), and what the backend may ask of the callback (``FitHooks``).

``keras_callback.SupervisorCallback`` is built with a ``FitSide`` and uses nothing else of the
backend; ``fit_state.FitState`` is the one ``FitSide``, one per session, and the only part of
the backend that holds the callback, through ``FitHooks``. Everything that passes between the two
files is named here. All of it is called in the training thread, inside the session.
"""
from typing import Callable, NamedTuple, Optional, Protocol


class FitStart(NamedTuple):
    """What a fit starting under ``sv.callback`` is told (``FitSide.fit_begin``): its index
    among the fit calls of the body (0, 1, ...), and where the restored checkpoint was, (fit
    index, epoch, batches done in it), or None."""
    index: int
    restored: Optional[tuple]


class FitSide(Protocol):
    """What the callback may ask and tell the session it checkpoints for: its position, its
    part of the checkpoint, the restored state, the step boundaries, the stop and the final
    save."""

    # ---------------------------------------------------------------------------- asked

    def trains_here(self) -> bool:
        """True in the training thread while the session runs (a fit elsewhere is not ours)."""

    @property
    def restored_from(self) -> Optional[str]:
        """The checkpoint the session restored, or None."""

    @property
    def restored_input(self):
        """The restored checkpoint's record of its fit's input (``data_position.SavedInput``),
        or None."""

    def restored_part(self, key: str) -> dict:
        """The state of ``key`` in the restored checkpoint ({}: none)."""

    def restored_arrays(self, name: str) -> Optional[list]:
        """The arrays the restored checkpoint holds under ``name``, or None."""

    def stop_is_max_steps(self) -> bool:
        """True when the run stops only because it reached max_steps (nobody asked)."""

    # ---------------------------------------------------------------------------- told

    def fit_begin(self, model) -> FitStart:
        """A fit starts: the model (and its optimizer) tracked and restored unless
        ``sv.track`` named them; raises StopBody when the run is stopping already."""

    def fit_at(self, epoch: int, batch: int) -> None:
        """Where the fit is now: ``batch`` batches of ``epoch`` done (0-based epoch)."""

    def fit_input(self, record: Callable) -> None:
        """``record(epoch, batch)``: what a checkpoint records of fit's input, until
        ``fit_end``."""

    def fit_part(self, part: Callable[[], dict]) -> None:
        """``part()`` gives the running fit's state (plain JSON) to every checkpoint."""

    def keep_arrays(self, name: str, arrays: list) -> None:
        """At a save: ``arrays`` go into the checkpoint under ``name``."""

    def fit_batches(self, count: int, logs, progress: tuple, due: bool = True) -> bool:
        """``count`` batches ended: a step boundary. True: fit must stop."""

    def fit_paused(self, moved: bool = False) -> bool:
        """A boundary where no batch ended (validation; an epoch's end, ``moved``). True: fit
        must stop."""

    def fit_epoch_end(self, epoch: int, logs) -> None:
        """Epoch ``epoch`` (0-based) ended complete, with ``logs``."""

    def final_save(self) -> None:
        """The checkpoint that ends training, now (unless this step is saved)."""

    def fit_end(self) -> None:
        """The fit ended: the checkpoint that ends it; its steps are no boundaries any more."""


class FitHooks(Protocol):
    """What the backend may ask of the callback it handed a ``FitSide``."""

    def before_final_save(self) -> None:
        """The checkpoint that ends the fit comes next: the callbacks get their state first."""

    def uninstall(self) -> None:
        """Gives fit back what the callback put in its place (a fit that raised leaves it)."""

    def release(self) -> None:
        """Forgets the model: an ended run keeps none alive."""
