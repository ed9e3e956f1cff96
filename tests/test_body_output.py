"""The body is a cell: IPython's syntax works in it, and what it and its threads print or display
goes to its run's panel, never into another cell (notebook/routing.py, notebook/magics.py,
view/output_area.py).

The kernel-level test drives a real kernel through jupyter_client and reads every iopub message:
which request's parent header each output carries, and which widget's state carries what the
body showed. The others run the magic in an InteractiveShell (no kernel).
"""
import json

import pytest
from IPython.core.error import UsageError

import jupyter_supervisor
from jupyter_supervisor.notebook import run as run_module
from jupyter_supervisor.notebook.magics import RunFailedError

DEADLINE = 90.0   # seconds; generous for a loaded 2-core machine, never reached when passing

# What Jupyter sends as a cell's output (everything else on iopub is state: status, comms).
OUTPUT_MESSAGES = {"stream", "display_data", "update_display_data", "execute_result", "error",
                   "clear_output"}

SETUP = """
import matplotlib.pyplot as plt
import tqdm.auto
from IPython.display import HTML, display
go, done, hold = threading.Event(), threading.Event(), threading.Event()
"""
# Each way a cell shows something, started once the other cell below runs (`go`); the run then
# stays live until the test is done with it (`hold`).
BODY = """\
%%supervise --name shows
go.wait(60)
%time squares = [i * i for i in range(10)]
!echo shell-line
plt.plot([1, 4, 9]); plt.show()
display(HTML("<b>shown-html</b>"))
for _ in tqdm.auto.tqdm(range(3), desc="auto-bar"):
    pass
worker = threading.Thread(target=print, args=("child-line",))
worker.start(); worker.join()
plt.plot([2, 3, 5])   # left open: shown in the run when the body ends, as a cell's
done.set()
hold.wait(120)
"""
# What each of them leaves in the run's outputs (the figure: its text form).
MARKERS = ("Wall time", "shell-line", "<Figure size", "shown-html", "child-line")
OUTPUTS = "jupyter_supervisor.view.panel._shown['shows'].widgets['output']"


def _comm_states(messages, comm_id):
    return [m["content"]["data"].get("state", {}) for m in messages
            if m["msg_type"] == "comm_msg" and m["content"]["comm_id"] == comm_id]


@pytest.mark.kernel
def test_everything_a_body_shows_while_another_cell_runs_goes_to_its_panel(kernel):
    kernel.ok(SETUP)
    start = len(kernel.iopub)
    started = kernel.ok(BODY)
    other = kernel.ok("go.set()\nassert done.wait(60)")   # the body shows all while this runs
    output_id = kernel.value(f"{OUTPUTS}.model_id")
    # The panel's output area shows it all (the refresher sets it within a second).
    kernel.wait_until(f"all(m in json.dumps({OUTPUTS}.outputs) for m in "
                      f"{list(MARKERS) + ['application/vnd.jupyter.widget-view+json']!r})",
                      "the body's outputs in the panel")
    shown = kernel.value(f"{OUTPUTS}.outputs")
    kernel.ok("hold.set()")
    kernel.ok("%supervise wait shows")
    messages = kernel.iopub[start:]

    # The other cell shows nothing of the body's: it has no output at all.
    assert [m["msg_type"] for m in messages
            if m["parent_header"].get("msg_id") == other.msg_id
            and m["msg_type"] in OUTPUT_MESSAGES] == []
    # No output message of any cell carries what the body showed.
    bars = [o["data"]["application/vnd.jupyter.widget-view+json"]["model_id"] for o in shown
            if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert bars, shown
    for message in messages:
        if message["msg_type"] in OUTPUT_MESSAGES:
            text = json.dumps(message["content"])
            assert not [m for m in MARKERS + tuple(bars) if m in text], message
    # It reached the browser as the state of the run's display: the panel's output widget,
    # displayed by the %%supervise cell.
    panel_displays = [m for m in started.messages if m["msg_type"] == "display_data"]
    assert panel_displays and all(m["parent_header"]["msg_id"] == started.msg_id
                                  for m in panel_displays)
    sent = json.dumps(_comm_states(messages, output_id))
    for marker in MARKERS + tuple(bars) + ("image/png",):
        assert marker in sent, marker
    # As a cell shows them: %time's lines, the shell's, the child thread's as text; the figure
    # as a PNG; the HTML as HTML; the tqdm bar as a widget's view.
    text = "".join(o.get("text", "") for o in shown if o["output_type"] == "stream")
    assert "Wall time" in text and "shell-line\n" in text and "child-line\n" in text
    data = [o["data"] for o in shown if o["output_type"] == "display_data"]
    assert any("image/png" in d and d["text/plain"].startswith("<Figure size") for d in data)
    assert any("<b>shown-html</b>" in d.get("text/html", "") for d in data)
    assert kernel.value("squares") == [i * i for i in range(10)]   # %time bound it
    # The figure left open: not flushed into the other cell when it ended, but into the run
    # when the body did.
    figures = kernel.value("[o['data']['text/plain'] for o in get_run('shows').history.outputs"
                           ".outputs(displays=10) if 'image/png' in o.get('data', {})]")
    assert len(figures) == 2, figures


# -- in an InteractiveShell ---------------------------------------------------------------------

def supervise(ip, line, body):
    return ip.run_cell_magic("supervise", line, body)


@pytest.fixture
def runs():
    yield
    assert not run_module.stop_all(timeout=DEADLINE)


def test_three_thousand_tqdm_frames_store_one_line(ip, runs):
    supervise(ip, "--name frames --wait",
              "from tqdm import tqdm\n"
              "for _ in tqdm(range(3000), mininterval=0, miniters=1, ascii=True):\n"
              "    pass\n"
              "print('after the bar')\n")
    output = jupyter_supervisor.get_run("frames").history.snapshot().output
    bar, after = output.splitlines()
    assert bar.startswith("100%|##########| 3000/3000") and after == "after the bar"
    assert "\r" not in output


@pytest.mark.parametrize("body, refused", [
    ("%%supervise --name inner\nx = 1\n", "%%supervise cannot be used in a %%supervise body"),
    ("%%capture out\nx = 1\n", "%%capture cannot be used in a %%supervise body"),
    ("x = 1\n%debug\n", "%debug cannot be used in a %%supervise body"),
    ("%%time\nx = 1\n%%capture\n", "%%capture cannot be used in a %%supervise body"),
])
def test_magics_that_cannot_work_in_a_background_run_are_refused(ip, runs, body, refused):
    with pytest.raises(UsageError, match=refused):
        supervise(ip, "--name refused --wait", body)
    assert "refused" not in [r.name for r in jupyter_supervisor.runs()]   # nothing started


def test_ipython_syntax_in_a_body_works_as_in_a_cell(ip, runs):
    ip.user_ns["base"] = 20
    with pytest.raises(RunFailedError):  # its last line
        supervise(ip, "--name syntax --wait",
                  "\n"                                # blank lines first: lines stay the cell's
                  "%time doubled = base * 2\n"
                  "listing = !echo one; echo two\n"
                  "import asyncio\n"
                  "await asyncio.sleep(0)\n"
                  "print('after await', doubled, listing)\n"
                  "base.bit_length?\n"
                  "1 / 0\n")
    run = jupyter_supervisor.get_run("syntax")
    assert ip.user_ns["doubled"] == 40 and list(ip.user_ns["listing"]) == ["one", "two"]
    output = run.history.snapshot().output
    assert "Wall time" in output and "after await 40 ['one', 'two']" in output
    assert "Number of bits necessary to represent self in binary" in output   # the help
    assert run.status == "failed" and "line 9" in run.error_text    # the cell's own line


def test_a_cell_magic_on_the_bodys_first_line_runs_on_the_rest(ip, runs):
    """`%%time` first in the body times the body in the run's thread, as it times a cell."""
    supervise(ip, "--name timed --wait", "%%time\ntotal = sum(range(1000))\n")
    run = jupyter_supervisor.get_run("timed")
    assert run.status == "finished" and ip.user_ns["total"] == 499500
    assert "Wall time" in run.history.snapshot().output


def test_capture_above_the_cell_takes_what_the_cell_shows_not_what_the_body_prints(ip, runs):
    ip.run_cell("%%capture shown\n%%supervise --name captured --wait\nprint('body-print')\n")
    assert "captured: finished" in ip.user_ns["shown"].stdout
    assert "body-print" not in ip.user_ns["shown"].stdout
    assert jupyter_supervisor.get_run("captured").history.snapshot().output == "body-print\n"
