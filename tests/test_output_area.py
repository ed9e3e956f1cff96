"""A run's outputs kept as a cell keeps them (view/output_area.py): text as a terminal shows it,
displays updated and cleared as Jupyter does, bounded; no kernel, no widget."""
import pytest

from jupyter_supervisor.view.output_area import OutputLog


def png(name, display_id=None):
    content = {"data": {"image/png": "iVBOR", "text/plain": name}, "metadata": {}}
    if display_id:
        content["transient"] = {"display_id": display_id}
    return content


@pytest.mark.parametrize("written, shown", [
    (["abc\rde\n"], "dec\n"),                          # overwrites from the line's start
    (["abc\r", "\n"], "abc\n"),                        # \r\n keeps the line
    (["x\b\byz\n"], "yz\n"),                           # backspace stops at the line's start
    (["10%|#  |\r", "20%|## |\r", "100%|###|\n"], "100%|###|\n"),   # across writes
    (["a\nbc\rd"], "a\ndc"),                           # only the cursor's line changes
])
def test_text_is_kept_as_a_terminal_shows_it(written, shown):
    log = OutputLog()
    for text in written:
        log.write("stdout", text)
    assert log.text() == shown
    assert log.outputs() == ({"output_type": "stream", "name": "stdout", "text": shown},)


def test_streams_and_displays_keep_their_order_and_consecutive_writes_merge():
    log = OutputLog()
    log.write("stdout", "one\n")
    log.write("stdout", "two\n")
    log.write("stderr", "warn\n")
    log.publish("display_data", png("<Figure 1>"))
    log.write("stdout", "three\n")
    assert [(o["output_type"], o.get("name")) for o in log.outputs()] == [
        ("stream", "stdout"), ("stream", "stderr"), ("display_data", None),
        ("stream", "stdout")]
    assert log.text() == "one\ntwo\nwarn\n<Figure 1>\nthree\n"


def test_a_display_updates_by_its_id_and_clear_output_clears():
    log = OutputLog()
    log.publish("display_data", png("first", display_id="d1"))
    log.publish("update_display_data", png("second", display_id="d1"))
    log.publish("update_display_data", png("unknown", display_id="nowhere"))   # ignored
    assert log.text() == "second\n"
    log.publish("clear_output", {"wait": True})        # cleared by the next output
    assert log.text() == "second\n"
    log.publish("display_data", png("third"))
    assert log.text() == "third\n"
    log.publish("clear_output", {"wait": False})
    assert log.text() == "" and log.outputs() == ()


def test_bounded_to_the_newest_text_and_displays():
    log = OutputLog(max_chars=50, max_displays=2)
    for i in range(100):
        log.write("stdout", f"line {i}\n")
        log.publish("display_data", png(f"fig {i}"))
    text = log.text()
    assert "fig 97" not in text and text.endswith("line 98\nfig 98\nline 99\nfig 99\n")
    assert sum(len(o["text"]) for o in log.outputs() if "text" in o) <= 50


def test_what_the_panel_shows_is_the_newest_with_a_mark_where_older_was_left_out():
    log = OutputLog()
    for i in range(100):
        log.write("stdout", f"line {i}\n")
    log.publish("display_data", png("fig a"))
    log.publish("display_data", png("fig b"))
    log.write("stderr", "last\n")
    shown = log.outputs(lines=5, chars=1000, displays=1)
    assert shown == ({"output_type": "stream", "name": "stdout", "text": "...\n"},
                     {"output_type": "display_data", "data": png("fig b")["data"],
                      "metadata": {}},
                     {"output_type": "stream", "name": "stderr", "text": "last\n"})
    shown = log.outputs(lines=5, chars=1000, displays=2)
    assert shown[0]["text"] == "...\n"
    assert shown[1]["text"] == "line 96\nline 97\nline 98\nline 99\n"


def test_a_sessions_end_ends_the_line_it_cut():
    """A progress bar cut by a stop: the next session's text starts a line of its own; a
    line already ended gets no blank line."""
    log = OutputLog()
    log.write("stdout", "Epoch 83\n1/8 ━━ loss: 0.3\r2/8 ━━")
    log.end_line()
    log.write("stdout", "Epoch 83\n")
    log.end_line()
    assert log.text() == "Epoch 83\n2/8 ━━ loss: 0.3\nEpoch 83\n"


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="Invalid value for argument `max_chars`"):
        OutputLog(max_chars=-1)
    with pytest.raises(TypeError, match="`text`"):
        OutputLog().write("stdout", b"bytes")
    with pytest.raises(ValueError, match="`msg_type`"):
        OutputLog().publish("execute_result", {})
