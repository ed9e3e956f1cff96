"""Preemption notices: each provider's metadata service emulated on the loopback interface (an
HTTP server the test starts, named by JUPYTER_SUPERVISOR_METADATA_URL); on a notice every
listening run writes a checkpoint within one poll interval and stops before the announced
time, and says so in its panel, its output and its event file. No provider answering: nothing
polled beyond the detection. A user's own watcher. The package's watcher as TensorFlow's
``termination_watcher_fn`` on a one-worker MultiWorkerMirroredStrategy.

Only loopback addresses are ever asked (tests/conftest.py points every other test there too).
"""
import email.utils
import glob
import http.server
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import urllib.parse

import pytest
import tensorflow as tf
from tensorflow.python.eager import context

from jupyter_supervisor import preemption
from jupyter_supervisor.notebook import notices, run as run_module, shutdown
from jupyter_supervisor.view import text

from helpers import build_model, child_env, wait_for

DEADLINE = 60.0   # seconds; generous for a loaded 2-core machine, never reached when passing
POLL = 0.25       # seconds between two reads of the notice in these tests
AHEAD = 60        # seconds between a notice and the machine's announced stop
TOKEN = "token-of-this-test"
VM = "vm-7"


class Metadata(http.server.ThreadingHTTPServer):
    """One provider's metadata service on 127.0.0.1 ("AWS", "GCP", "Azure"; "none": 404 to
    everything). ``post()`` publishes the notice; ``requests`` are (time.monotonic(), method,
    path); ``noticed_at``: when the first answer that carried the notice went out.
    ``after_polls``: the notice publishes itself at that poll of the notice's path."""

    daemon_threads = True

    def __init__(self, provider, after_polls=None):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.provider = provider
        self.after_polls = after_polls
        self.lock = threading.Lock()
        self.requests = []
        self.polls = 0
        self.posted_at = self.noticed_at = self.noticed_wall = self.stops_at = None
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}"

    def post(self):
        with self.lock:
            self.posted_at = time.monotonic()
            self.stops_at = int(time.time()) + AHEAD   # whole seconds, as AWS and Azure say

    def close(self):
        self.shutdown()
        self.server_close()


class _Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):  # quiet
        pass

    def do_PUT(self):
        self._answer("PUT")

    def do_GET(self):
        self._answer("GET")

    def _answer(self, method):
        server = self.server
        path = urllib.parse.urlsplit(self.path).path
        with server.lock:
            server.requests.append((time.monotonic(), method, path))
        status, body, headers = getattr(self, "_" + server.provider.lower())(method, path)
        carries = status == 200 and server.stops_at is not None and path in (
            "/latest/meta-data/spot/instance-action", "/computeMetadata/v1/instance/preempted",
            "/metadata/scheduledevents") and body not in ("FALSE", json.dumps(_events([])))
        with server.lock:
            if carries and server.noticed_at is None:
                server.noticed_at, server.noticed_wall = time.monotonic(), time.time()
        data = body.encode()
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _polled(self):
        server = self.server
        with server.lock:
            server.polls += 1
            if server.after_polls is not None and server.polls >= server.after_polls and \
                    server.stops_at is None:
                server.posted_at = time.monotonic()
                server.stops_at = int(time.time()) + AHEAD
            return server.stops_at

    def _none(self, method, path):
        return 404, "", {}

    def _aws(self, method, path):
        if method == "PUT" and path == "/latest/api/token":
            ttl = self.headers.get("X-aws-ec2-metadata-token-ttl-seconds")
            return (200, TOKEN, {}) if ttl else (400, "", {})
        if path == "/latest/meta-data/spot/instance-action":
            if self.headers.get("X-aws-ec2-metadata-token") != TOKEN:
                return 401, "", {}
            stops_at = self._polled()
            if stops_at is None:
                return 404, "", {}
            when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(stops_at))
            return 200, json.dumps({"action": "terminate", "time": when}), {}
        return 404, "", {}

    def _gcp(self, method, path):
        if self.headers.get("Metadata-Flavor") != "Google":
            return 403, "", {}
        flavor = {"Metadata-Flavor": "Google"}
        if path == "/computeMetadata/v1/instance/id":
            return 200, "4711", flavor
        if path == "/computeMetadata/v1/instance/preempted":
            return 200, "FALSE" if self._polled() is None else "TRUE", flavor
        return 404, "", flavor

    def _azure(self, method, path):
        if self.headers.get("Metadata") != "true":
            return 400, "", {}
        if path == "/metadata/instance/compute/name":
            return 200, VM, {}
        if path == "/metadata/scheduledevents":
            stops_at = self._polled()
            return 200, json.dumps(_events([] if stops_at is None else [stops_at])), {}
        return 404, "", {}


def _events(ours):
    """Scheduled events: another VM's preemption always (not ours), and ours once posted."""
    other = {"EventId": "A", "EventType": "Preempt", "ResourceType": "VirtualMachine",
             "Resources": ["vm-other"], "EventStatus": "Scheduled",
             "NotBefore": "Mon, 19 Sep 2016 18:29:47 GMT"}
    return {"DocumentIncarnation": 2, "Events": [other] + [
        {"EventId": "B", "EventType": "Preempt", "ResourceType": "VirtualMachine",
         "Resources": [VM], "EventStatus": "Scheduled",
         "NotBefore": email.utils.formatdate(when, usegmt=True)} for when in ours]}


@pytest.fixture
def metadata(monkeypatch):
    """``metadata(provider, after_polls=None)``: a server, set as the metadata address."""
    made = []

    def start(provider, after_polls=None):
        server = Metadata(provider, after_polls)
        made.append(server)
        monkeypatch.setenv(preemption.METADATA_URL_ENV, server.url)
        return server

    monkeypatch.setattr(notices, "POLL_SECS", POLL)
    # Detected once per kernel and address: a port of an earlier test's server may come again.
    monkeypatch.setattr(shutdown._HOOKS.notices, "_detected", {})  # pylint: disable=W0212
    yield start
    late = run_module.stop_all(timeout=DEADLINE)
    assert not late, f"runs did not stop: {late}"
    for server in made:
        server.close()


# ------------------------------------------------------------------------------ providers

@pytest.mark.parametrize("provider, source", [
    ("AWS", "AWS spot instance-action: terminate"),
    ("GCP", "Google Cloud instance/preempted: TRUE"),
    ("Azure", "Azure scheduled event: Preempt"),
])
def test_each_providers_notice_is_read_as_it_documents_it(metadata, provider, source):
    server = metadata(provider)
    watcher = preemption.detect()
    assert watcher is not None and watcher.provider == {"GCP": "Google Cloud"}.get(
        provider, provider)
    assert watcher.poll() is None and not watcher()
    server.post()
    notice = watcher.poll()
    assert notice.source == source and watcher() and watcher.notice is notice
    if provider == "GCP":   # 30 s of soft-off, from the notice
        assert notice.stops_at == pytest.approx(notice.seen_at + 30)
    else:
        assert notice.stops_at == server.stops_at
    assert notice.text().startswith(f"preemption notice at {preemption.clock(notice.seen_at)} "
                                    f"({source}); the machine stops at ")


def test_a_watcher_reads_at_most_every_poll_interval(metadata):
    server = metadata("GCP")
    watcher = preemption.detect()
    watcher.poll_secs = 3600.0
    before = len(server.requests)
    assert [watcher() for _ in range(5)] == [False] * 5
    assert len(server.requests) == before + 1


@pytest.mark.parametrize("answering", [True, False], ids=["404 to everything", "closed port"])
def test_no_provider_answering_is_one_look_each(monkeypatch, answering):
    if answering:
        server = Metadata("none")
        url = server.url
    else:
        server, url = None, "http://127.0.0.1:1"
    try:
        assert preemption.detect(url) is None
        if server is not None:   # each provider asked once; no answer at all ends it sooner
            assert [(m, p) for _, m, p in server.requests] == [
                ("PUT", "/latest/api/token"), ("GET", "/computeMetadata/v1/instance/id"),
                ("GET", "/metadata/instance/compute/name")]
    finally:
        if server is not None:
            server.close()


def test_the_outcome_line_says_what_was_written():
    why = preemption.Notice("AWS spot instance-action: terminate", 0.0, 120.0).text()
    assert preemption.is_notice(why) and not preemption.is_notice("the kernel received SIGTERM")
    head = f"Preemption notice at {preemption.clock(0.0)} (AWS spot instance-action: terminate)"
    stops = f"the machine stops at {preemption.clock(120.0)}."
    assert preemption.outcome(why, 81234, 81234) == (
        f"{head}: checkpoint of step 81,234 written; {stops}")
    assert preemption.outcome(why, None, 80000) == (
        f"{head}: no checkpoint written on it; the newest complete one is of step 80,000; "
        f"{stops}")
    assert preemption.outcome(why, None, None, saves=False) == (
        f"{head}: the run stopped (it saves no checkpoint); {stops}")


# ----------------------------------------------------------------------------------- runs

BODY = """
sv.track(w=w)
while not sv.should_stop():
    w.assign_add(1.0)
    sv.step()
"""


def _start(namespace, logdir, **options):
    with context.eager_mode():
        run = run_module.TrainingRun(
            run_module.RunConfig(logdir=str(logdir), save_model_secs=3600,
                                 save_summaries_secs=0, **options), BODY, namespace)
        run.start()
    return run


def _stop_record(logdir):
    newest = sorted(glob.glob(os.path.join(logdir, "events.out.tfevents.*")))[-1]
    stops = [e.session_log.msg for e in tf.compat.v1.train.summary_iterator(newest)
             if e.HasField("session_log") and e.session_log.status == e.session_log.STOP]
    return stops[-1] if stops else None


def _training(run, beyond=10):
    wait_for(lambda: (run.global_step or 0) > beyond, DEADLINE, what=f"{run.name} training")


def _check_stopped_on_the_notice(run, server, source):
    """The run stopped on the notice: its final checkpoint holds its last step, written
    within one poll interval (and a step) of the notice, before the announced time; the
    panel, its output and the event file say so."""
    assert run.wait(DEADLINE) and run.status == "stopped"
    ended = time.time()
    snap = run.history.snapshot()
    newest = snap.checkpoints[0]
    assert newest.step == run.global_step == int(tf.train.latest_checkpoint(
        run.logdir).rsplit("-", 1)[1])
    assert server.noticed_at - server.posted_at <= POLL + 1.0   # read within one interval
    # Google Cloud names no time: its soft-off gives 30 s from the notice.
    stops_at = (server.noticed_wall + 30 if server.provider == "GCP" else server.stops_at)
    assert ended < stops_at - notices.MARGIN_SECS
    why = run.stop_reason
    assert why.startswith("preemption notice at ") and f"({source})" in why
    if server.provider != "GCP":
        assert why.endswith(f"; the machine stops at {preemption.clock(stops_at)}")
    line = preemption.outcome(why, newest.step, newest.step)
    assert f"checkpoint of step {newest.step:,} written" in line
    wait_for(lambda: line in run.history.snapshot().output, DEADLINE, what="the run's output")
    timeline = [entry for _, entry in text.timeline(run, run.history.snapshot())]
    assert line[:1].lower() + line[1:].rstrip(".") in timeline    # the panel
    assert _stop_record(run.logdir) == why                          # the event file


@pytest.mark.parametrize("provider, source", [
    ("AWS", "AWS spot instance-action: terminate"),
    ("GCP", "Google Cloud instance/preempted: TRUE"),
    ("Azure", "Azure scheduled event: Preempt"),
])
def test_a_notice_checkpoints_and_stops_the_run_before_the_machine_stops(
        metadata, tmp_path, provider, source):
    server = metadata(provider)
    namespace = {"w": tf.Variable(0.0)}
    run = _start(namespace, tmp_path / "fit")
    _training(run)
    assert shutdown._HOOKS.notices.thread is not None   # pylint: disable=protected-access
    server.post()
    _check_stopped_on_the_notice(run, server, source)


def test_every_listening_run_stops_graph_code_too_and_off_is_left_alone(metadata, tmp_path):
    server = metadata("AWS")
    eager = _start({"w": tf.Variable(0.0)}, tmp_path / "eager")
    left = _start({"w": tf.Variable(0.0)}, tmp_path / "left", preemption_notice="off")
    graph_model = build_model(new_graph=True)
    graph = run_module.TrainingRun(
        run_module.RunConfig(logdir=str(tmp_path / "graph"), save_model_secs=3600,
                             save_summaries_secs=0),
        "while not sv.should_stop():\n    sess.run(train_op)\n",
        {"train_op": graph_model.train_op})
    graph.start(graph=graph_model.graph)
    for run in (eager, left, graph):
        _training(run)
    server.post()
    _check_stopped_on_the_notice(eager, server, "AWS spot instance-action: terminate")
    assert graph.wait(DEADLINE) and graph.status == "stopped"
    assert preemption.is_notice(graph.stop_reason) and preemption.is_notice(
        _stop_record(graph.logdir))
    step = graph.global_step
    assert step == int(tf.train.latest_checkpoint(graph.logdir).rsplit("-", 1)[1])
    assert left.status == "running"
    _training(left, beyond=left.global_step + 10)   # it trains on
    assert left.stop(timeout=DEADLINE) and left.stop_reason is None


def test_a_run_resumed_after_the_notice_is_stopped_again(metadata, tmp_path):
    server = metadata("GCP")
    run = _start({"w": tf.Variable(0.0)}, tmp_path / "fit")
    _training(run)
    server.post()
    assert run.wait(DEADLINE) and run.status == "stopped"
    first = run.global_step
    with context.eager_mode():
        run.resume()
    assert run.wait(DEADLINE) and run.status == "stopped"
    assert preemption.is_notice(run.stop_reason) and run.global_step >= first
    assert run.history.snapshot().output.count(
        "The last session on this logdir stopped: preemption notice at ") == 1


def test_no_notice_no_polling_beyond_the_detection(metadata, tmp_path):
    server = metadata("none")
    run = _start({"w": tf.Variable(0.0)}, tmp_path / "fit")
    _training(run)
    wait_for(lambda: shutdown._HOOKS.notices.thread is None,  # pylint: disable=protected-access
             DEADLINE, what="the watcher to end")
    asked = list(server.requests)
    assert len(asked) == 3
    _training(run, beyond=run.global_step + 50)
    with context.eager_mode():   # a second run: the detection is not made again
        other = _start({"w": tf.Variable(0.0)}, tmp_path / "other")
    _training(other)
    wait_for(lambda: shutdown._HOOKS.notices.thread is None,  # pylint: disable=protected-access
             DEADLINE, what="the watcher to end")
    assert server.requests == asked
    assert run.status == other.status == "running"


def test_a_users_watcher_is_polled_instead(metadata, tmp_path, caplog):
    metadata("none")
    preempted = threading.Event()
    calls = []

    def spot_watcher():
        calls.append(time.monotonic())
        if len(calls) == 1:
            raise OSError("the first call fails: counted as no notice, said once")
        return preempted.is_set()

    run = _start({"w": tf.Variable(0.0)}, tmp_path / "fit", preemption_notice=spot_watcher)
    _training(run)
    wait_for(lambda: len(calls) >= 3, DEADLINE, what="the watcher's calls")
    assert run.status == "running"
    posted = time.monotonic()
    preempted.set()
    assert run.wait(DEADLINE) and run.status == "stopped"
    assert [t for t in calls if t >= posted][0] - posted <= POLL + 1.0
    assert run.stop_reason.startswith("preemption notice at ")
    assert "(the watcher test_a_users_watcher_is_polled_instead.<locals>.spot_watcher)" in \
        run.stop_reason
    assert "the machine stops" not in run.stop_reason   # a watcher announces no time
    newest = run.history.snapshot().checkpoints[0]
    assert newest.step == run.global_step
    wait_for(lambda: f"checkpoint of step {newest.step:,} written." in
             run.history.snapshot().output, DEADLINE, what="the run's output")
    assert sum("failed; it counts as no notice" in r.getMessage()
               for r in caplog.records) == 1


def test_a_notice_is_an_option_of_the_magic(ip):
    with pytest.raises(Exception, match="invalid choice: 'on'"):
        ip.run_cell_magic("supervise", "--preemption-notice on", "x = 1\n")
    with pytest.raises(ValueError, match="Expected 'auto' or 'off', or a function"):
        run_module.RunConfig(preemption_notice=3)


# ---------------------------------------------------------------------- TensorFlow's handler

HANDLER_SCRIPT = textwrap.dedent("""
    import sys
    import tensorflow as tf
    from jupyter_supervisor import preemption

    class Exited(Exception):
        pass

    def exit_fn():
        raise Exited()

    strategy = tf.distribute.MultiWorkerMirroredStrategy()   # one worker: no TF_CONFIG
    watcher = preemption.termination_watcher()
    assert watcher is not None and watcher.provider == "AWS", watcher
    watcher.poll_secs = 0.2
    with strategy.scope():
        w = tf.Variable(0.0)
    checkpoint = tf.train.Checkpoint(w=w)
    handler = tf.distribute.experimental.PreemptionCheckpointHandler(
        strategy.cluster_resolver, checkpoint, sys.argv[1],
        tf.distribute.experimental.TerminationConfig(termination_watcher_fn=watcher,
                                                     exit_fn=exit_fn))

    @tf.function
    def train_step():
        w.assign_add(1.0)

    steps = 0
    try:
        while steps < 1_000_000:
            handler.run(train_step)
            steps += 1
    except Exited:
        print("exited", steps, float(w.numpy()), watcher.notice.source)
""")


@pytest.mark.cluster
def test_the_watcher_serves_tensorflows_preemption_checkpoint_handler(tmp_path):
    server = Metadata("AWS", after_polls=5)
    try:
        script = tmp_path / "handler.py"
        script.write_text(HANDLER_SCRIPT)
        # TensorFlow asks its own Google Cloud address too: the loopback server, which is no
        # Google Cloud (404).
        env = child_env(JUPYTER_SUPERVISOR_METADATA_URL=server.url,
                        GCE_METADATA_IP=server.url[len("http://"):], CUDA_VISIBLE_DEVICES="")
        done = subprocess.run([sys.executable, str(script), str(tmp_path / "ckpt")], env=env,
                              capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stderr[-3000:]
        exited = [line for line in done.stdout.splitlines() if line.startswith("exited")]
        assert exited, done.stdout + done.stderr[-3000:]
        _, steps, value, *_ = exited[0].split()
        assert exited[0].endswith("AWS spot instance-action: terminate")
        path = tf.train.latest_checkpoint(str(tmp_path / "ckpt"))
        assert path is not None
        assert tf.train.load_variable(path, "w/.ATTRIBUTES/VARIABLE_VALUE") == float(value)
        assert float(value) == int(steps) > 0
    finally:
        server.close()


# --------------------------------------------------------------------------- in a kernel

@pytest.mark.kernel
def test_in_a_kernel_the_sigterm_after_a_notice_finds_nothing_left_to_save(tmp_path):
    from helpers import Kernel   # pylint: disable=import-outside-toplevel
    server = Metadata("GCP")
    kernel = Kernel(tmp_path, JUPYTER_SUPERVISOR_METADATA_URL=server.url)
    try:
        kernel.ok("import jupyter_supervisor.notebook.notices\n"
                  f"jupyter_supervisor.notebook.notices.POLL_SECS = {POLL}\n"
                  "w = tf.Variable(0.0)")
        kernel.ok("%%supervise --logdir fit --save-model-secs 600\n" + BODY)
        kernel.wait_until("(get_run('fit').global_step or 0) > 10", "training")
        server.post()
        kernel.wait_until("'the machine stops at' in get_run('fit').history.snapshot().output",
                          "the stop on the notice")
        output = kernel.value("get_run('fit').history.snapshot().output")
        step = kernel.value("get_run('fit').global_step")
        assert f"checkpoint of step {step:,} written; the machine stops at " in output
        kernel.wait_until("not jupyter_supervisor.runs()[0].is_live", "the run's end")
        files = {path: os.stat(path).st_mtime_ns
                 for path in glob.glob(str(tmp_path / "fit" / "*"))}
        process = kernel.km.provisioner.process
        process.send_signal(signal.SIGTERM)
        process.wait(DEADLINE)
        assert process.returncode == -signal.SIGTERM   # ended at once, as SIGTERM ends a process
    finally:
        kernel.kc.stop_channels()
        kernel.km.shutdown_kernel(now=True)
        server.close()
    assert {path: os.stat(path).st_mtime_ns
            for path in glob.glob(str(tmp_path / "fit" / "*"))} == files
    assert int(tf.train.latest_checkpoint(str(tmp_path / "fit")).rsplit("-", 1)[1]) == step
    assert preemption.is_notice(_stop_record(str(tmp_path / "fit")))
