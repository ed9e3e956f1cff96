"""A cloud machine's preemption notice, read where its provider publishes it.

Spot and preemptible machines get a notice before they are taken back, earlier than the
SIGTERM (docs/preemption.md has each platform):

- AWS (EC2 Spot): ``/latest/meta-data/spot/instance-action`` of the instance metadata service,
  read with an IMDSv2 session token; 404 until a notice, then ``{"action": "terminate",
  "time": "2025-01-01T14:04:05Z"}``, two minutes ahead. AWS advises reading it every 5 s.
- Google Cloud (Spot and preemptible VMs): ``/computeMetadata/v1/instance/preempted`` with the
  header ``Metadata-Flavor: Google``: ``FALSE``, then ``TRUE`` with 30 s of soft-off left.
- Azure (Spot VMs): the Scheduled Events of ``/metadata/scheduledevents`` with the header
  ``Metadata: true``: an event of type ``Preempt`` naming this VM, ``NotBefore`` at least
  30 s ahead.

All three serve their metadata at ``http://169.254.169.254``, which answers only on their
machines. ``detect()`` asks once, with a short timeout (a machine elsewhere refuses or never
answers; the first request that gets no HTTP answer at all ends the detection), and returns a
``MetadataWatcher`` for the provider that answered, or None: then nothing is polled.
``METADATA_URL_ENV`` replaces that address (a test's server on the loopback interface, a proxy).

A ``MetadataWatcher`` is a function of no arguments that returns True once a notice came:
what TensorFlow's ``tf.distribute.experimental.TerminationConfig`` takes as
``termination_watcher_fn`` (``termination_watcher()``). The notebook's runs are watched by
``notebook/notices.py``. No TensorFlow here; only the standard library's HTTP client, never
through a proxy of the environment (the metadata service is on the machine's own link).
"""
import dataclasses
import datetime
import email.utils
import json
import logging
import os
import threading
import time
import urllib.error
import urllib.request
from typing import Callable, Dict, Optional, Tuple

logger = logging.getLogger("jupyter_supervisor")

# --preemption-notice: watch the provider's notice (AUTO), or nothing (OFF).
AUTO, OFF = "auto", "off"
CHOICES = (AUTO, OFF)

METADATA_URL_ENV = "JUPYTER_SUPERVISOR_METADATA_URL"
METADATA_URL = "http://169.254.169.254"
# Seconds a detection request may take: the service answers within milliseconds on its
# machine, and a machine elsewhere should not wait for it.
DETECT_SECS = 0.5
# Seconds a poll may take before it counts as no answer (no notice).
POLL_TIMEOUT_SECS = 2.0

# How the runs' stop reasons name a notice (``Notice.text``), so that a reader tells it apart.
NOTICE_PREFIX = "preemption notice at "
_STOPS_AT = "; the machine stops at "


def metadata_url() -> str:
    """The metadata service's address: ``$JUPYTER_SUPERVISOR_METADATA_URL``, else
    ``http://169.254.169.254``."""
    return (os.environ.get(METADATA_URL_ENV) or METADATA_URL).rstrip("/")


def clock(wall_time: float) -> str:
    """A wall time as the notices say it: '14:02:05', local time."""
    return time.strftime("%H:%M:%S", time.localtime(wall_time))


@dataclasses.dataclass(frozen=True)
class Notice:
    """A preemption notice: ``source`` (which provider said what, or the user's watcher),
    ``seen_at`` (epoch seconds, when it was read) and ``stops_at`` (when the machine stops, as
    announced or as the provider's documented notice gives it; None when unknown)."""
    source: str
    seen_at: float
    stops_at: Optional[float] = None

    def text(self) -> str:
        """'preemption notice at 14:02:05 (AWS spot instance-action: terminate); the machine
        stops at 14:04:05': a run's stop reason, the event file's SessionLog.STOP."""
        text = f"{NOTICE_PREFIX}{clock(self.seen_at)} ({self.source})"
        return text + (f"{_STOPS_AT}{clock(self.stops_at)}" if self.stops_at else "")


def is_notice(why: Optional[str]) -> bool:
    """True for a stop reason that is a preemption notice (``Notice.text``)."""
    return bool(why) and why.startswith(NOTICE_PREFIX)


def outcome(why: str, saved: Optional[int], newest: Optional[int], saves: bool = True) -> str:
    """What a run did on the notice ``why`` (``Notice.text``), in one line: 'Preemption notice
    at 14:02:05 (...): checkpoint of step 81,234 written; the machine stops at 14:04:05.'.
    ``saved``: the step of the checkpoint written on it (None: none was); ``newest``: the
    newest complete checkpoint's step otherwise; ``saves``: False for a run that saves
    nothing (no logdir, a worker)."""
    head, _, stops = why.partition(_STOPS_AT)
    if not saves:
        did = "the run stopped (it saves no checkpoint)"
    elif saved is not None:
        did = f"checkpoint of step {saved:,} written"
    else:
        did = "no checkpoint written on it" + (
            f"; the newest complete one is of step {newest:,}" if newest is not None else "")
    line = f"{head[:1].upper()}{head[1:]}: {did}"
    return line + (f"{_STOPS_AT}{stops}." if stops else ".")


# ------------------------------------------------------------------------------- HTTP

class _Http:
    """GET and PUT without the environment's proxies; ``request`` returns (status, headers,
    body), a refused or failed status included, or None when no HTTP answer came."""

    def __init__(self):
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def request(self, url: str, headers: Dict[str, str], timeout: float,
                method: str = "GET") -> Optional[Tuple[int, Dict[str, str], str]]:
        request = urllib.request.Request(url, headers=headers, method=method,
                                         data=b"" if method == "PUT" else None)
        try:
            with self._opener.open(request, timeout=timeout) as response:
                return (response.status, dict(response.headers),
                        response.read(1 << 16).decode("utf-8", "replace"))
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers or {}), ""
        except (OSError, ValueError) as e:  # refused, unreachable, timed out, a bad URL
            logger.debug("No answer from %s: %s", url, e)
            return None


# ------------------------------------------------------------------------------ providers

class _Provider:
    """How one provider's metadata service is found and its notice read."""
    name = ""
    poll_secs = 5.0
    notice_secs = 30.0   # its notice's lead when the notice names no time

    def detect(self, http: _Http, base: str, timeout: float) -> Tuple[Optional[dict], bool]:
        """(what the polls need, or None when this is not the provider; whether any HTTP
        answer came)."""
        raise NotImplementedError

    def poll(self, http: _Http, base: str, state: dict) -> Optional[Notice]:
        """The notice, or None (none yet, or no answer)."""
        raise NotImplementedError


class _Aws(_Provider):
    name, poll_secs, notice_secs = "AWS", 5.0, 120.0
    _TOKEN_TTL = "21600"

    def _token(self, http, base, timeout) -> Tuple[Optional[str], bool]:
        answer = http.request(f"{base}/latest/api/token",
                              {"X-aws-ec2-metadata-token-ttl-seconds": self._TOKEN_TTL},
                              timeout, method="PUT")
        if answer is None:
            return None, False
        status, _, body = answer
        return (body.strip() or None) if status == 200 else None, True

    def detect(self, http, base, timeout):
        token, answered = self._token(http, base, timeout)
        return ({"token": token} if token else None), answered

    def poll(self, http, base, state):
        url = f"{base}/latest/meta-data/spot/instance-action"
        answer = http.request(url, {"X-aws-ec2-metadata-token": state["token"]},
                              POLL_TIMEOUT_SECS)
        if answer is not None and answer[0] == 401:  # the session token expired: a new one
            state["token"] = self._token(http, base, POLL_TIMEOUT_SECS)[0] or state["token"]
            answer = http.request(url, {"X-aws-ec2-metadata-token": state["token"]},
                                  POLL_TIMEOUT_SECS)
        if answer is None or answer[0] != 200:
            return None   # 404: no notice
        now = time.time()
        try:
            action = json.loads(answer[2])
            stops_at = _iso_time(action.get("time"))
            what = str(action.get("action") or "notice")
        except (ValueError, AttributeError):
            stops_at, what = None, "notice"
        return Notice(f"AWS spot instance-action: {what}", now,
                      stops_at or now + self.notice_secs)


class _Gcp(_Provider):
    name, poll_secs, notice_secs = "Google Cloud", 1.0, 30.0
    _HEADERS = {"Metadata-Flavor": "Google"}

    def detect(self, http, base, timeout):
        answer = http.request(f"{base}/computeMetadata/v1/instance/id", self._HEADERS, timeout)
        if answer is None:
            return None, False
        status, headers, _ = answer
        flavor = {k.lower(): v for k, v in headers.items()}.get("metadata-flavor")
        return ({} if status == 200 and flavor == "Google" else None), True

    def poll(self, http, base, state):
        answer = http.request(f"{base}/computeMetadata/v1/instance/preempted", self._HEADERS,
                              POLL_TIMEOUT_SECS)
        if answer is None or answer[0] != 200 or answer[2].strip().upper() != "TRUE":
            return None
        now = time.time()
        return Notice("Google Cloud instance/preempted: TRUE", now, now + self.notice_secs)


class _Azure(_Provider):
    name, poll_secs, notice_secs = "Azure", 1.0, 30.0
    _HEADERS = {"Metadata": "true"}

    def detect(self, http, base, timeout):
        answer = http.request(
            f"{base}/metadata/instance/compute/name?api-version=2021-02-01&format=text",
            self._HEADERS, timeout)
        if answer is None:
            return None, False
        status, _, body = answer
        return ({"vm": body.strip()} if status == 200 else None), True

    def poll(self, http, base, state):
        answer = http.request(f"{base}/metadata/scheduledevents?api-version=2020-07-01",
                              self._HEADERS, POLL_TIMEOUT_SECS)
        if answer is None or answer[0] != 200:
            return None
        try:
            scheduled = json.loads(answer[2]).get("Events") or []
        except (ValueError, AttributeError):
            return None
        vm = state.get("vm")
        for event in scheduled:
            if not isinstance(event, dict) or event.get("EventType") != "Preempt":
                continue
            resources = event.get("Resources") or []
            if vm and resources and vm not in resources:
                continue  # another VM of the scale set
            now = time.time()
            stops_at = _http_time(event.get("NotBefore"))
            return Notice("Azure scheduled event: Preempt", now,
                          stops_at or now + self.notice_secs)
        return None


PROVIDERS = (_Aws(), _Gcp(), _Azure())


def _iso_time(text) -> Optional[float]:
    try:
        moment = datetime.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return moment.timestamp()


def _http_time(text) -> Optional[float]:
    try:
        return email.utils.parsedate_to_datetime(str(text)).timestamp()
    except (TypeError, ValueError, IndexError):
        return None


# ------------------------------------------------------------------------------- watchers

class MetadataWatcher:
    """Reads one provider's preemption notice (see the module docstring). Calling it returns
    True once a notice came (and stays True), reading the service at most every
    ``poll_secs`` (between two reads, the last answer): usable as TensorFlow's
    ``termination_watcher_fn``, which is called every second.

    Attributes:
      provider: "AWS", "Google Cloud" or "Azure".
      poll_secs: the shortest time between two reads (the provider's advice).
      grace_secs: the lead its notices give (``TerminationConfig``'s ``grace_period``).
      notice: the ``Notice`` once one came, else None.
    """

    def __init__(self, provider: _Provider, state: dict, base: str):
        self._provider = provider
        self._state = state
        self._base = base
        self._http = _Http()
        self._lock = threading.Lock()   # one read at a time; guards _next and notice
        self._next = 0.0                # time.monotonic() of the next read
        self.provider = provider.name
        self.poll_secs = provider.poll_secs
        self.grace_secs = provider.notice_secs
        self.notice: Optional[Notice] = None

    def poll(self) -> Optional[Notice]:
        """Reads the notice now; returns it, or None (none, or no answer). The first notice
        read stays ``notice``."""
        with self._lock:
            found = self._provider.poll(self._http, self._base, self._state)
            self._next = time.monotonic() + self.poll_secs
            if self.notice is None:
                self.notice = found
            return found

    def __call__(self) -> bool:
        with self._lock:
            due = self.notice is None and time.monotonic() >= self._next
        return (self.poll() if due else self.notice) is not None

    def __repr__(self):
        return f"<MetadataWatcher {self.provider} at {self._base}>"


def detect(url: Optional[str] = None, timeout: float = DETECT_SECS
           ) -> Optional[MetadataWatcher]:
    """The watcher of the provider whose metadata service answers at ``url`` (default
    ``metadata_url()``), or None. Each provider is asked once, with ``timeout``; a request that
    gets no HTTP answer ends the detection (the address answers nothing here)."""
    base = (url or metadata_url()).rstrip("/")
    http = _Http()
    for provider in PROVIDERS:
        state, answered = provider.detect(http, base, timeout)
        if state is not None:
            logger.info("%s's metadata service answers at %s: its preemption notice is "
                        "watched.", provider.name, base)
            return MetadataWatcher(provider, state, base)
        if not answered:
            break
    return None


def termination_watcher(url: Optional[str] = None) -> Optional[Callable[[], bool]]:
    """A ``termination_watcher_fn`` for TensorFlow's ``PreemptionCheckpointHandler``: the
    ``MetadataWatcher`` of the provider that answers here, or None where none does (then
    ``TerminationConfig`` keeps TensorFlow's own default: SIGTERM, or its Google Cloud
    watcher).

    Args:
        url: the metadata service's address (default ``metadata_url()``).

    Returns:
        A function of no arguments, True once a preemption notice came; or None.

    Example::

        watcher = jupyter_supervisor.preemption.termination_watcher()
        config = tf.distribute.experimental.TerminationConfig(termination_watcher_fn=watcher)
        handler = tf.distribute.experimental.PreemptionCheckpointHandler(
            strategy.cluster_resolver, checkpoint, checkpoint_dir, config)
    """
    return detect(url)
