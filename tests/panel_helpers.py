"""What the panel's tests share (test_panel.py, test_export.py): a run as the panel reads it,
and the messages its widgets send, recorded and decoded as link.js reads them."""
import collections
import threading

import numpy as np


class FakeRun:
    """What the panel reads of a run (text.PanelRun), and nothing else. Its flags follow the
    history's status as the run's do."""

    def __init__(self, history, *, name="mnist", logdir="/logs/mnist", max_steps=None,
                 role="local", role_text=""):
        self.name = name
        self.logdir = logdir
        self.max_steps = max_steps
        self.role = role
        self.role_text = role_text
        self.config = collections.namedtuple("Config", "init_fn")(None)
        self.history = history
        self.calls = []
        self.failures = {}      # method name -> exception it raises

    @property
    def status(self):
        return self.history.snapshot().status

    @property
    def can_stop(self):
        return self.status in ("starting", "running")

    @property
    def can_resume(self):
        return self.status in ("stopped", "finished", "failed")

    @property
    def can_save(self):
        return self.status == "running"

    def _call(self, name, *args):
        self.calls.append((name,) + args)
        if name in self.failures:
            raise self.failures[name]

    def stop(self, wait=False):
        self._call("stop", wait)

    def resume(self):
        self._call("resume")

    def save_now(self):
        self._call("save_now")



Message = collections.namedtuple("Message", "thread comm_id msg_type data buffers")


def record_comms(monkeypatch):
    """Every message the widgets send to the frontend, through a Comm that records them (the
    ``comm_log`` fixture)."""
    import comm
    from comm.base_comm import BaseComm

    log = []

    class RecordingComm(BaseComm):
        def publish_msg(self, msg_type, data=None, metadata=None, buffers=None, **keys):
            log.append(Message(threading.current_thread().name, self.comm_id, msg_type, data,
                               buffers))

    monkeypatch.setattr(comm, "create_comm", lambda *a, **k: RecordingComm(*a, **k))
    return log


def decode(parts, buffer, band=None):
    """The parts of a series message or answer as {(run, tag): (gen, from, steps, values,
    walls)}, as link.js reads them; a merged part's band (mins, maxs, counts) goes into
    ``band`` when given."""
    wide = 8 * sum(3 * part["n"] for part in parts)
    data = np.frombuffer(buffer[:wide], dtype="<f8")
    narrow = np.frombuffer(buffer[wide:], dtype="<f4")
    out, at, band_at = {}, 0, 0
    for part in parts:
        n = part["n"]
        steps, values, walls = (data[at + i * n:at + (i + 1) * n] for i in range(3))
        at += 3 * n
        out[(part["run"], part["tag"])] = (part["gen"], part["from"], steps, values, walls)
        if part.get("merged"):
            if band is not None:
                band[(part["run"], part["tag"])] = tuple(
                    narrow[band_at + i * n:band_at + (i + 1) * n] for i in range(3))
            band_at += 3 * n
    assert at == len(data) and band_at == len(narrow)
    return out


def customs(log, kind=None):
    """The custom messages (series, beats, answers) the view got, as (content, buffers)."""
    out = []
    for m in log:
        if m.msg_type == "comm_msg" and m.data.get("method") == "custom":
            if kind is None or m.data["content"]["type"] == kind:
                out.append((m.data["content"], m.buffers))
    return out
