"""What a run printed and displayed, kept as a notebook cell keeps its outputs, and the panel's
output area that shows it.

``OutputLog`` is the run's side: the outputs of a cell in nbformat's form (``stream`` and
``display_data``), fed with what Jupyter would have sent for the cell (a stream's text, a
``display_data`` / ``update_display_data`` / ``clear_output`` message's content). Text is kept
as a terminal shows it: a carriage return goes back to the start of the line and what follows
overwrites it, a backspace steps back one character, so a progress bar redrawn 3,000 times
keeps one line (Jupyter's own renderer collapses a stream the same way). Consecutive writes to
one stream are one output, as in a cell. Bounded: the newest ``max_chars`` characters of text
and the newest ``max_displays`` displays.

``OutputArea`` shows a log in an ``ipywidgets.Output`` (Jupyter's renderer: ANSI colours,
figures, rich reprs, widget views), setting its ``outputs`` from the kernel as ipywidgets says
to from a background thread; the newest lines and displays only, at most every ``interval``.

This module imports no TensorFlow and no widget library.
"""
import collections
import re
import threading
from typing import List, Tuple

from .._validate import invalid

# What the panel's output area shows of a log: its newest lines, characters and displays.
SHOWN_LINES = 30
SHOWN_CHARS = 6000
SHOWN_DISPLAYS = 4
# What a log keeps of displays by default (figures are tens of kB each).
MAX_DISPLAYS = 32

_CONTROL = re.compile(r"([\r\b\n])")
_DISPLAY_TYPES = ("display_data", "update_display_data", "clear_output")


class _Stream:
    """One stream output's text as a terminal shows it: completed lines, and the line the
    cursor is on with the cursor's column."""

    __slots__ = ("name", "done", "done_len", "line", "col")

    def __init__(self, name: str):
        self.name = name
        self.done: "collections.deque[str]" = collections.deque()  # chunks ending in "\n"
        self.done_len = 0
        self.line = ""
        self.col = 0

    def __len__(self):
        return self.done_len + len(self.line)

    def write(self, text: str) -> None:
        if self.col == len(self.line) and "\r" not in text and "\b" not in text:
            end = text.rfind("\n")  # the common case: text appended at the end
            if end < 0:
                self.line += text
            else:
                self._commit(self.line + text[:end + 1])
                self.line = text[end + 1:]
            self.col = len(self.line)
            return
        for piece in _CONTROL.split(text):
            if piece == "\n":
                self._commit(self.line + "\n")
                self.line, self.col = "", 0
            elif piece == "\r":
                self.col = 0
            elif piece == "\b":
                self.col = max(0, self.col - 1)
            elif piece:
                end = self.col + len(piece)
                self.line = self.line[:self.col] + piece + self.line[end:]
                self.col = end

    def _commit(self, chunk: str) -> None:
        self.done.append(chunk)
        self.done_len += len(chunk)

    def drop_head(self, count: int) -> None:
        """Forgets the oldest ``count`` characters."""
        while self.done and count >= len(self.done[0]):
            count -= len(self.done[0])
            self.done_len -= len(self.done.popleft())
        if count and self.done:
            self.done[0] = self.done[0][count:]
            self.done_len -= count
        elif count:
            self.line = self.line[count:]
            self.col = max(0, self.col - count)

    def tail(self, chars: int) -> str:
        """The newest ``chars`` characters (fewer when there are fewer)."""
        parts = [self.line[-chars:] if chars else ""]
        left = chars - len(parts[0])
        for chunk in reversed(self.done):
            if left <= 0:
                break
            parts.append(chunk[-left:])
            left -= len(parts[-1])
        return "".join(reversed(parts))

    def text(self) -> str:
        return "".join(self.done) + self.line


class OutputLog:
    """A run's outputs as a cell's: see the module docstring. Every method may be called from
    any thread."""

    def __init__(self, max_chars: int = 200_000, max_displays: int = MAX_DISPLAYS):
        for name, value in (("max_chars", max_chars), ("max_displays", max_displays)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(invalid(name, value, "an integer >= 0"))
        self._max_chars = max_chars
        self._max_displays = max_displays
        self._lock = threading.Lock()
        # Guarded by _lock: the outputs, oldest first (a _Stream, or a display: (display id or
        # None, its nbformat output)); characters in the streams; displays among them.
        self._entries: "collections.deque" = collections.deque()
        self._chars = 0
        self._displays = 0
        self._clear_pending = False   # clear_output(wait=True): clear at the next output
        self._version = 0
        self._text: Tuple[int, str] = (0, "")   # (version, text()) cached

    @property
    def version(self) -> int:
        """Bumps on every change."""
        return self._version

    # -- writers -----------------------------------------------------------------------------

    def write(self, name: str, text: str) -> None:
        """Appends ``text`` to stream ``name`` ('stdout' or 'stderr')."""
        if not isinstance(text, str):
            raise TypeError(invalid("text", text, "a str"))
        if not text:
            return
        with self._lock:
            self._version += 1
            self._clear_if_pending()
            last = self._entries[-1] if self._entries else None
            if not isinstance(last, _Stream) or last.name != name:
                last = _Stream(name)
                self._entries.append(last)
            self._extend(last, text)

    def end_line(self) -> None:
        """A session's end: the line the cursor is on (a progress bar a stop cut) is ended, so
        that what the next session writes starts a line of its own."""
        with self._lock:
            last = self._entries[-1] if self._entries else None
            if isinstance(last, _Stream) and last.line:
                self._version += 1
                self._extend(last, "\n")

    def _extend(self, stream: "_Stream", text: str) -> None:
        """With ``_lock`` held: writes ``text`` to ``stream``, counted, and trims the log."""
        before = len(stream)
        stream.write(text)
        self._chars += len(stream) - before
        self._trim_text()

    def publish(self, msg_type: str, content: dict) -> None:
        """Applies what a ``display_data``, ``update_display_data`` or ``clear_output``
        message says (its content, as ipykernel builds it: data, metadata, transient)."""
        if msg_type not in _DISPLAY_TYPES:
            raise ValueError(invalid("msg_type", msg_type, "one of " + ", ".join(
                map(repr, _DISPLAY_TYPES))))
        with self._lock:
            self._version += 1
            if msg_type == "clear_output":
                if content.get("wait"):
                    self._clear_pending = True
                else:
                    self._clear()
                return
            display_id = (content.get("transient") or {}).get("display_id")
            output = {"output_type": "display_data", "data": content.get("data", {}),
                      "metadata": content.get("metadata", {})}
            if msg_type == "update_display_data":
                # As a cell does: every display with that id changes; an unknown id, nothing.
                for index, entry in enumerate(self._entries):
                    if isinstance(entry, tuple) and display_id and entry[0] == display_id:
                        self._entries[index] = (display_id, output)
                return
            self._clear_if_pending()
            self._entries.append((display_id, output))
            self._displays += 1
            while self._displays > self._max_displays:
                oldest = next(i for i, e in enumerate(self._entries) if isinstance(e, tuple))
                del self._entries[oldest]
                self._displays -= 1

    def _clear_if_pending(self) -> None:
        if self._clear_pending:
            self._clear_pending = False
            self._clear()

    def _clear(self) -> None:
        self._entries.clear()
        self._chars = self._displays = 0

    def _trim_text(self) -> None:
        while self._chars > self._max_chars:
            stream = next(e for e in self._entries if isinstance(e, _Stream))
            excess = self._chars - self._max_chars
            if excess >= len(stream):
                self._chars -= len(stream)
                self._entries.remove(stream)
            else:
                stream.drop_head(excess)
                self._chars -= excess

    # -- readers -----------------------------------------------------------------------------

    def text(self) -> str:
        """The outputs as a terminal shows them: the streams' text, and each display's text
        form on a line of its own."""
        with self._lock:
            version, text = self._text
            if version != self._version:
                parts = []
                for entry in self._entries:
                    if isinstance(entry, _Stream):
                        parts.append(entry.text())
                    else:
                        plain = entry[1]["data"].get("text/plain", "")
                        parts.append(plain if plain.endswith("\n") else plain + "\n")
                text = "".join(parts)
                self._text = (self._version, text)
            return text

    def outputs(self, lines: int = SHOWN_LINES, chars: int = SHOWN_CHARS,
                displays: int = SHOWN_DISPLAYS) -> Tuple[dict, ...]:
        """The newest outputs in nbformat's form, at most ``lines`` lines and ``chars``
        characters of text and ``displays`` displays; an output "..." first when older ones
        were left out."""
        shown: List[dict] = []
        cut = False
        with self._lock:
            for entry in reversed(self._entries):
                if isinstance(entry, _Stream):
                    if lines <= 0 or chars <= 0:
                        cut = True
                        break
                    text = _last_lines(entry.tail(chars), lines)
                    if text:
                        shown.append({"output_type": "stream", "name": entry.name,
                                      "text": text})
                    if len(text) < len(entry):
                        cut = True
                        break
                    lines -= text.count("\n")
                    chars -= len(text)
                elif displays <= 0:
                    cut = True
                    break
                else:
                    shown.append(entry[1])
                    displays -= 1
        if cut:
            shown.append({"output_type": "stream", "name": "stdout", "text": "...\n"})
        return tuple(reversed(shown))


def _last_lines(text: str, count: int) -> str:
    """The last ``count`` lines of ``text`` (a final line without its newline counts)."""
    end = len(text) - 1 if text.endswith("\n") else len(text)
    start = end
    for _ in range(max(count, 0)):
        start = text.rfind("\n", 0, start)
        if start < 0:
            return text
    return text[start + 1:]


class OutputArea:
    """Shows an ``OutputLog`` in an ``ipywidgets.Output`` (``widget``): its newest outputs,
    updated by ``update(now)`` when the log changed, at most every ``interval`` seconds."""

    def __init__(self, widget, log: OutputLog, interval: float):
        self.widget = widget
        self._log = log
        self._interval = interval
        self._seen = 0
        self._next = float("-inf")

    def update(self, now: float, force: bool = False) -> bool:
        """Brings the widget up to date; True if it changed. ``force``: also sooner than
        ``interval`` after the last update (a run's end)."""
        version = self._log.version
        if version == self._seen or (now < self._next and not force):
            return False
        self._seen = version
        self._next = now + self._interval
        outputs = self._log.outputs()
        if outputs == self.widget.outputs:
            return False
        self.widget.outputs = outputs
        return True

