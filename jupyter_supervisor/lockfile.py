"""One writer per logdir: the live chief holds a lock file in its logdir.

The file (``supervisor.lock``, JSON) names the holder: pid, host, the process's start time and a
token. A lock is stale, and taken over, when its holder is gone: a process on this host that no
longer runs (or whose pid was reused), or, in this very process, an owner that was garbage
collected without releasing it. A holder on another host cannot be checked from here; the error
says how to remove its lock by hand.

A stop asked for by the kernel's end (``note_stop``: SIGTERM, a restart) is noted in the lock
file, with what gives that kind of end more time, until the lock is released: a stale lock that
still holds the note was left by a process that ended before its final checkpoint was written,
and the next holder says so.
"""
import json
import logging
import os
import socket
import threading
import uuid
import weakref
from typing import Optional

logger = logging.getLogger("jupyter_supervisor")

FILENAME = "supervisor.lock"

# Tokens of the locks this process holds now, so that a lock written by this pid can be told
# live (its owner still exists) from stale (its owner was collected without release()).
_LIVE: "weakref.WeakValueDictionary[str, LogdirLock]" = weakref.WeakValueDictionary()
_LIVE_LOCK = threading.Lock()


class LogdirLockedError(RuntimeError):
    """Another live chief already writes to this logdir."""


def _process_start_time(pid: int) -> Optional[str]:
    """The start time of ``pid`` in clock ticks since boot (Linux), to detect pid reuse."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
    except OSError:
        return None
    # The command name may hold spaces and parentheses: fields start after the last ')'.
    return stat.rsplit(")", 1)[1].split()[19]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _link_or_create(tmp: str, path: str, data: bytes) -> None:
    """Creates ``path`` with ``data``, or raises FileExistsError."""
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise
    except OSError:  # a file system without hard links: create and write
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)


class LogdirLock:
    """The lock of one logdir, held by one Supervisor from ``acquire()`` to ``release()``."""

    def __init__(self, logdir: str):
        self.path = os.path.join(logdir, FILENAME)
        self._token: Optional[str] = None

    @property
    def held(self) -> bool:
        """True while this object holds the lock."""
        return self._token is not None

    def acquire(self) -> None:
        """Takes the lock, or raises LogdirLockedError naming the live holder."""
        if self._token is not None:
            return
        token = uuid.uuid4().hex
        record = {"pid": os.getpid(), "host": socket.gethostname(), "token": token,
                  "start": _process_start_time(os.getpid())}
        data = json.dumps(record).encode()
        # Written aside, then linked into place: the lock file appears with its content, so
        # a rival never reads an empty (stale-looking) lock of a live chief.
        tmp = f"{self.path}.{token}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        try:
            _link_or_create(tmp, self.path, data)
        except FileExistsError:
            holder = self._read_holder()
            if holder is not None and self._is_live(holder):
                os.remove(tmp)
                raise LogdirLockedError(self._held_message(holder)) from None
            self._take_over(holder, tmp, token)
        else:
            os.remove(tmp)
        self._token = token
        with _LIVE_LOCK:
            _LIVE[token] = self

    def release(self) -> None:
        """Gives the lock up; a lock that another process took over is left alone."""
        token, self._token = self._token, None
        if token is None:
            return
        with _LIVE_LOCK:  # also against note_stop() rewriting the file meanwhile
            _LIVE.pop(token, None)
            holder = self._read_holder()
            if holder is not None and holder.get("token") == token:
                try:
                    os.remove(self.path)
                except FileNotFoundError:
                    pass

    def _read_holder(self) -> Optional[dict]:
        try:
            with open(self.path, "rb") as f:
                holder = json.loads(f.read().decode())
        except (OSError, ValueError):
            return None  # unreadable or half-written by a crashed writer: stale
        return holder if isinstance(holder, dict) else None

    @staticmethod
    def _is_live(holder: dict) -> bool:
        pid = holder.get("pid")
        if holder.get("host") != socket.gethostname():
            return True
        if not isinstance(pid, int) or not _pid_alive(pid):
            return False
        if pid == os.getpid():
            with _LIVE_LOCK:
                return holder.get("token") in _LIVE
        start = holder.get("start")
        return start is None or start == _process_start_time(pid)

    def _take_over(self, holder: Optional[dict], tmp: str, token: str) -> None:
        os.replace(tmp, self.path)
        mine = self._read_holder()
        if mine is None or mine.get("token") != token:
            # Another process took it over between our read and our replace.
            raise LogdirLockedError(self._held_message(mine or {}))
        who = (f"pid {holder.get('pid')} on {holder.get('host')}" if holder
               else "an unreadable lock file")
        logger.warning("Took over the stale lock of %s in %s (its holder, %s, is gone).",
                       os.path.dirname(self.path), FILENAME, who)
        why = holder.get("stopping") if holder else None
        if isinstance(why, str):
            advice = holder.get("advice")
            logger.warning(
                "The last run on %s was stopped (%s) but its process ended before the final "
                "checkpoint was written: training resumes from the newest complete checkpoint. "
                "%s", os.path.dirname(self.path), why,
                advice if isinstance(advice, str) and advice else
                "To give the next stop more time, see docs/preemption.md.")

    def _held_message(self, holder: dict) -> str:
        logdir = os.path.dirname(self.path)
        return (f"The logdir {logdir!r} is in use by another chief Supervisor (pid "
                f"{holder.get('pid')} on host {holder.get('host')!r}). Stop that run first "
                f"(sv.stop(), or `%supervise stop` in its notebook), or use another logdir. "
                f"If that process is gone for good, delete {self.path!r}.")


def note_stop(logdir: str, why: str, advice: str = "") -> bool:
    """Notes ``why`` in the lock this process holds on ``logdir`` (replacing the file whole,
    so that a reader never sees half of it), with ``advice``: what gives such a stop more time;
    True if it did. ``release()`` removes the file with the note; a process that ends first
    leaves it for the next holder to report."""
    lock = LogdirLock(logdir)
    with _LIVE_LOCK:  # release() cannot remove the file between the check and the rewrite
        holder = lock._read_holder()  # pylint: disable=protected-access
        if holder is None or holder.get("pid") != os.getpid() \
                or holder.get("token") not in _LIVE:
            return False
        holder["stopping"] = str(why)
        holder["advice"] = str(advice)
        tmp = f"{lock.path}.{holder['token']}.stopping.tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(holder, f)
            os.replace(tmp, lock.path)
        except OSError:
            logger.debug("Could not note the stop in %s.", lock.path, exc_info=True)
            return False
    return True
