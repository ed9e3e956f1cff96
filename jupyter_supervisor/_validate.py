"""The one form of a bad-argument error, and the number checks built on it (no TensorFlow).

Messages follow Keras': "Invalid value for argument `save_freq`. Received: save_freq=-1.
Expected an integer >= 1." The magic's options pass their flag as ``name`` (``--keep``), so the
user reads what they typed.
"""
import math
import numbers
import os
from typing import Optional


def invalid(name: str, value, expected: str, *, shown: Optional[str] = None) -> str:
    """The message for argument ``name`` given ``value`` (``shown``: how to print the value,
    by default its repr) when ``expected`` was wanted."""
    shown = repr(value) if shown is None else shown
    return f"Invalid value for argument `{name}`. Received: {name}={shown}. Expected {expected}."


def short(value) -> str:
    """``value`` as a message shows it (``shown``): its repr, cut at 80 characters."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def named(objects) -> str:
    """``name=value, ...`` of the dict ``objects``, each value ``short``."""
    return ", ".join(f"{n}={short(v)}" for n, v in objects.items())


# What TensorFlow's file layer reads as a glob pattern (its kGlobbingChars; a backslash only
# where it is not the path separator).
PATTERN_CHARACTERS = "*?[" + ("\\" if os.sep == "/" else "")
PATTERN_TEXT = ", ".join(PATTERN_CHARACTERS[:-1]) + " or " + PATTERN_CHARACTERS[-1]


def has_pattern_characters(path: str) -> bool:
    """True when ``path`` holds one of ``PATTERN_CHARACTERS``: TensorFlow finds a checkpoint's
    files by glob pattern, so a run could write checkpoints there but not resume from them,
    and a Saver's retention would delete files of other checkpoints that the pattern
    matches."""
    return any(character in path for character in PATTERN_CHARACTERS)


def check_checkpoint_path(name: str, path: str) -> None:
    """Raises ValueError (the form above) when ``path`` (a logdir or a checkpoint basename)
    has ``PATTERN_CHARACTERS``: see ``has_pattern_characters``."""
    if has_pattern_characters(path):
        raise ValueError(invalid(name, path, f"a path without {PATTERN_TEXT} (TensorFlow "
                                 "finds checkpoints by glob pattern: it could not resume from "
                                 "this one): choose another path"))


def check_basename(name: str, value) -> None:
    """Raises ValueError (the form above) unless ``value`` is a checkpoint basename: a
    non-empty file name (checkpoints always go into the logdir) without
    ``PATTERN_CHARACTERS`` (see ``has_pattern_characters``)."""
    if not isinstance(value, str) or not value or "/" in value \
            or has_pattern_characters(value):
        raise ValueError(invalid(name, value, "a file name such as 'model.ckpt', without /, "
                                 + PATTERN_TEXT))


def check_number(name: str, value, *, integer: bool = False, minimum: float = 0,
                 allow_none: bool = False, unit: str = "") -> None:
    """Raises ValueError (the form above) unless ``value`` is a finite number (an integer with
    ``integer``) >= ``minimum``, or None with ``allow_none``. ``unit``: "of seconds", etc."""
    if value is None and allow_none:
        return
    kind = numbers.Integral if integer else numbers.Real
    what = ("an integer" if integer else "a number") + (f" {unit}" if unit else "")
    or_none = ", or None" if allow_none else ""
    if isinstance(value, bool) or not isinstance(value, kind) or value != value \
            or value < minimum:
        raise ValueError(invalid(name, value, f"{what} >= {minimum}{or_none}"))
    if not integer and math.isinf(value):  # a timer cannot wait that long: it would fail
        raise ValueError(invalid(name, value, f"a finite {what[2:]} >= {minimum}{or_none}"))
