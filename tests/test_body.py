"""A cell body runs as a function of the run's own names when it can, as module code when it
cannot, and means the same either way (notebook/body.py)."""
import traceback

import pytest

from jupyter_supervisor.notebook.body import Body

# Bodies exercising every way a cell binds and reads names. `sv` and `sess` are the run's own.
BODIES = {
    "loop": "total = 0\nfor i in range(5):\n    total += sess(i)\nlast = i\n",
    "augmented": "counter += sess(1)\n",
    "delete": "gone = 1\ndel gone\ndel doomed\n",
    "with": "import contextlib\nwith contextlib.nullcontext(sv) as held:\n    pass\n",
    "def and class": ("def twice(x):\n    return x * 2\n"
                      "class Box:\n    value = 3\nresult = twice(sess(3)), sv\n"),
    "comprehension": "squares = [i ** 2 for i in range(4)]\nlookup = {sv: len(squares)}\n",
    "walrus and try": ("try:\n    (n := sess(7))\n    1 / 0\nexcept ZeroDivisionError as error:"
                       "\n    caught = type(error).__name__\n"),
    "live read": "seen = flag\n",
    "module global": "global declared\ndeclared = sv\n",
}


def run(source, *, force_module=False):
    namespace = {"counter": 10, "doomed": 1, "flag": "notebook's", "__builtins__": __builtins__}
    own = {"sv": "the run's sv", "sess": lambda x: x + 1}
    if force_module:  # a star import keeps a body module code
        source += "from string import *\n"
    Body(source, namespace, "test").execute(own, repeat=False, should_stop=lambda: True)
    return namespace, own


@pytest.mark.parametrize("name", sorted(BODIES))
def test_a_body_means_the_same_as_a_function_and_as_module_code(name):
    as_function, own = run(BODIES[name])
    as_module, _ = run(BODIES[name], force_module=True)
    import string  # pylint: disable=import-outside-toplevel
    star = {n for n in dir(string) if not n.startswith("_")}
    def comparable(namespace):  # a def or class is made anew by each run: its name counts
        return {k: getattr(v, "__qualname__", v) if callable(v) else v
                for k, v in namespace.items() if k not in star}
    assert comparable(as_module) == comparable(as_function)
    assert "sv" not in as_function and "sess" not in as_function  # own names stay the run's
    assert own["sv"] == "the run's sv"


def test_what_each_body_leaves_in_the_notebook():
    assert run(BODIES["loop"])[0]["total"] == 15 and run(BODIES["loop"])[0]["last"] == 4
    assert run(BODIES["augmented"])[0]["counter"] == 12
    namespace = run(BODIES["delete"])[0]
    assert "gone" not in namespace and "doomed" not in namespace
    assert run(BODIES["def and class"])[0]["result"] == (8, "the run's sv")
    assert run(BODIES["comprehension"])[0]["squares"] == [0, 1, 4, 9]
    assert run(BODIES["comprehension"])[0]["lookup"] == {"the run's sv": 4}
    assert run(BODIES["walrus and try"])[0]["caught"] == "ZeroDivisionError"
    assert run(BODIES["live read"])[0]["seen"] == "notebook's"
    assert run(BODIES["module global"])[0]["declared"] == "the run's sv"


def test_own_names_reach_nested_functions_classes_and_comprehensions():
    """As module code they did not: a nested scope reads exec's globals (the notebook), not its
    locals, so `[sess(i) for i in ...]` raised NameError."""
    namespace, _ = run("def twice(x):\n    return sess(x) * 2\n"
                       "class Box:\n    value = sv\n"
                       "result = twice(3), Box.value, [sess(i) for i in range(3)]\n")
    assert namespace["result"] == (8, "the run's sv", [1, 2, 3])


def test_a_loop_using_its_own_names_at_top_level_runs_as_a_function():
    """The usual body (sv and sess read at top level, names bound): the function path, which
    a comprehension over an own name shows (module code would raise NameError there)."""
    namespace, _ = run("steps = []\nwhile len(steps) < 3:\n    steps.append(sess(len(steps)))"
                       "\nshifted = [sess(s) for s in steps]\nwho = sv\n")
    assert namespace["steps"] == [1, 2, 3] and namespace["shifted"] == [2, 3, 4]
    assert namespace["who"] == "the run's sv"


def test_a_body_that_rebinds_an_own_name_runs_and_the_notebook_sees_it():
    namespace, _ = run("sess = sess(1)\nafter = sess\n")
    assert namespace["sess"] == 2 and namespace["after"] == 2


def test_repeat_calls_the_body_until_the_stop():
    namespace = {"__builtins__": __builtins__, "n": 0}
    Body("n += 1\n", namespace, "test").execute({"sv": None}, repeat=True,
                                               should_stop=lambda: namespace["n"] >= 3)
    assert namespace["n"] == 3


def test_an_error_is_shown_from_the_body_with_the_cells_line_numbers():
    body = Body("x = 1\ny = sess(x)\nraise ValueError(y)\n", {"__builtins__": __builtins__},
                "test")
    with pytest.raises(ValueError) as raised:
        body.execute({"sess": lambda x: x + 1}, repeat=False, should_stop=lambda: True)
    shown = body.format(raised.value)
    frames = traceback.extract_tb(raised.value.__traceback__)
    assert frames[-1].lineno == 3 and frames[-1].filename == "<supervise test>"
    assert shown.startswith("Traceback") and "line 3" in shown and "ValueError: 2" in shown
    assert "body.py" not in shown  # our machinery is trimmed


@pytest.mark.parametrize("first", [
    "@staticmethod\ndef f():\n    pass\n",            # a decorated def first
    "values = [\n    1,\n    2,\n]\n",                 # a statement over several lines first
    "global g\ng = 1\n",                               # a global statement first
])
def test_line_numbers_are_the_cells_whatever_comes_first(first):
    """As the magic compiles a body: one line in front (the %%supervise line)."""
    source = first + "who = sess\nraise ValueError(who)\n"
    line = source.count("\n") + 1  # the raise, counting the %%supervise line
    body = Body(source, {"__builtins__": __builtins__}, "test",
                compile_source=lambda text, name: compile("\n" + text, "<cell>", "exec"))
    with pytest.raises(ValueError) as raised:
        body.execute({"sess": 1}, repeat=False, should_stop=lambda: True)
    assert traceback.extract_tb(raised.value.__traceback__)[-1].lineno == line


def test_exec_eval_and_locals_see_the_notebook_as_in_any_cell():
    namespace, _ = run("exec('def helper():\\n    return 5\\ndef main():\\n    return helper()')\n"
                       "result = main(), eval('sv'), 'sess' in locals()\n")
    assert namespace["result"] == (5, "the run's sv", True)
