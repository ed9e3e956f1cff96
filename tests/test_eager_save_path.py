"""What a periodic eager save leaves to the training thread: one copy of the variables, nothing
else. The files, their serialization and the object graph's are the writer thread's, and the
copy is in memory of its own, so that the step after the save pays nothing for it."""
import os
import threading
import weakref

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.checkpoint import save_util

from jupyter_supervisor import events
from jupyter_supervisor.eager.snapshot import Snapshot
from jupyter_supervisor.eager.variables import IdentityMap

from eager_models import data, make_model
from helpers import FakeClock, before_each_write, training_waits_for_a_write, wait_for

pytestmark = pytest.mark.internals

DEADLINE = 60
INTERVAL = 10.0   # save_model_secs, on a clock the tests move


def loop_setup():
    """(model, optimizer, train_step): a Keras MLP of about 200 KB with Adam's slots, trained
    one batch a step."""
    model = make_model(features=64, units=256)
    x, y = data(n=32, features=64)
    model.optimizer.build(model.trainable_variables)
    return model, model.optimizer, lambda: model.train_on_batch(x, y)


def saving_loop(tmp_path, backends):
    """(sv, its timer's clock, model, optimizer, step, saves): a supervised loop whose saves
    fall due when the test moves the clock by INTERVAL; ``step()`` trains one step;
    ``saves``: the steps of the checkpoints written, as reported."""
    model, opt, train_step = loop_setup()
    sv = backends(tmp_path, save_model_secs=INTERVAL)
    clock = FakeClock()
    sv._checkpointer.timer._clock = clock  # pylint: disable=protected-access
    saves = []
    sv.add_listener(lambda r: saves.append(r.step) if isinstance(r, events.CheckpointSaved)
                    else None)

    def step():
        return sv.step(loss=train_step())
    return sv, clock, model, opt, step, saves


def written(sv, saves, step):
    """Waits until the checkpoint of ``step`` is written and its writer thread ended (a save
    that falls due while a write runs is put off)."""
    wait_for(lambda: step in saves and not sv._checkpointer.threads,  # pylint: disable=W0212
             DEADLINE, what=f"the checkpoint of step {step}")


def written_bytes() -> int:
    """The bytes the calling thread has passed to write calls (Linux's task I/O accounting)."""
    with open("/proc/thread-self/io", encoding="ascii") as f:
        fields = dict(line.split(": ") for line in f.read().splitlines())
    return int(fields["wchar"])


def test_a_periodic_save_leaves_the_files_and_their_serialization_to_the_writer_thread(
        tmp_path, backends, monkeypatch):
    """Periodic saves of a custom loop, after the first (which traces the snapshot's write in
    the training thread, once per model structure): the training thread serializes no object
    graph (what every eager ``tf.train.Checkpoint.write`` does), passes no byte of the
    checkpoints to a file, and does not wait for the write of the files, which runs in
    another thread: held there until the training thread has trained two steps more."""
    serializers = []
    serialize = save_util.serialize_graph_view

    def recorded_serialize(*args, **kwargs):
        serializers.append(threading.current_thread())
        return serialize(*args, **kwargs)

    monkeypatch.setattr(save_util, "serialize_graph_view", recorded_serialize)
    writes = []     # (the thread that wrote the files, whether it waited as told)
    holds = []      # an Event per write to hold until it is set
    policies = []   # the writing thread's scheduling policy, per write
    own_policy = os.sched_getscheduler(threading.get_native_id())

    def held(path):
        hold = holds.pop(0) if holds else None
        policies.append(os.sched_getscheduler(threading.get_native_id()))
        writes.append((threading.current_thread(), hold is None or hold.wait(DEADLINE)))

    before_each_write(monkeypatch, held)
    sv, clock, model, opt, step, saves = saving_loop(tmp_path, backends)
    with sv.session():
        training = threading.current_thread()
        sv.track(model=model, optimizer=opt)
        clock.now += INTERVAL
        step()  # the first save: its write is traced here
        written(sv, saves, 1)
        del serializers[:], writes[:]
        before = written_bytes()
        for _ in range(2):
            hold = threading.Event()
            holds.append(hold)
            clock.now += INTERVAL
            saved_at = step()       # a periodic save: its write is held...
            step()
            step()                  # ...while this thread trains on
            hold.set()
            written(sv, saves, saved_at)
        wrote = written_bytes() - before
        watched, serialized, periodic = list(writes), list(serializers), list(policies)
        sv.request_stop()
    assert not any(thread is training for thread, _ in watched)
    assert [waited for _, waited in watched] == [True, True]
    # The writer yields the cores to training (Linux: a thread's own scheduling policy);
    # training keeps its own.
    assert periodic[-2:] == [os.SCHED_IDLE] * 2, periodic
    assert own_policy != os.SCHED_IDLE
    assert os.sched_getscheduler(threading.get_native_id()) == own_policy
    assert not any(thread is training for thread in serialized)
    assert sv.flush_events(DEADLINE)
    assert saves == [1, 2, 5, 7]  # 7: the final checkpoint
    data = os.path.getsize(str(tmp_path / "model.ckpt-5.data-00000-of-00001"))
    assert wrote < data / 10, (wrote, data)


def test_a_write_that_training_waits_for_keeps_training_s_priority(tmp_path, backends,
                                                                     monkeypatch):
    """A checkpoint the training thread waits for, asked for now (``sv.save_now()``) or the
    final one, is written at the training thread's priority, not under the periodic writes'
    ``SCHED_IDLE``: training waits for it, and a process that keeps the cores busy would
    starve it."""
    policies = {}   # the step of each write: its thread's scheduling policy

    def recorded(path):
        policies[int(path.rsplit("-", 1)[1])] = os.sched_getscheduler(threading.get_native_id())

    before_each_write(monkeypatch, recorded)
    own_policy = os.sched_getscheduler(threading.get_native_id())
    sv, clock, model, opt, step, saves = saving_loop(tmp_path, backends)
    with sv.session():
        sv.track(model=model, optimizer=opt)
        clock.now += INTERVAL
        step()              # the first save (its copy traced here), periodic
        written(sv, saves, 1)
        clock.now += INTERVAL
        step()              # a periodic save
        written(sv, saves, 2)
        step()
        sv.save_now()       # asked for, waited for
        step()
        sv.request_stop()   # the final checkpoint, which the session's end waits for
    assert sv.flush_events(DEADLINE)
    assert saves == [1, 2, 3, 4]
    assert own_policy != os.SCHED_IDLE
    assert policies == {1: os.SCHED_IDLE, 2: os.SCHED_IDLE, 3: own_policy, 4: own_policy}, \
        policies


def test_the_final_checkpoint_waits_for_a_periodic_write_in_flight_and_reuses_its_memory(
        tmp_path, backends, monkeypatch):
    """Training ends while a periodic write runs (held until the training thread waits for
    it): the final checkpoint waits for that write, then is copied into the memory that write
    read (a copy into new memory costs more than the rest of the write), and listed after it;
    each checkpoint holds the variables of its own step."""
    from jupyter_supervisor.eager import snapshot as snapshots  # pylint: disable=C0415
    training = []
    waiting = training_waits_for_a_write(monkeypatch, training)
    released = []   # whether the periodic write saw the training thread wait for it

    def held(path):
        if path.endswith("-2"):
            released.append(waiting.wait(DEADLINE))

    before_each_write(monkeypatch, held)
    allocations = []
    host_arrays = snapshots._host_arrays  # pylint: disable=protected-access

    def counted(*args):
        allocations.append(args)
        return host_arrays(*args)

    monkeypatch.setattr(snapshots, "_host_arrays", counted)
    sv, clock, model, opt, step, saves = saving_loop(tmp_path, backends)
    with sv.session():
        training.append(threading.current_thread())
        sv.track(model=model, optimizer=opt)
        clock.now += INTERVAL
        step()              # the first save: its copy's memory is allocated here
        written(sv, saves, 1)
        first = len(allocations)
        clock.now += INTERVAL
        step()              # a periodic save, held until training waits for it
        values = {2: [v.numpy() for v in model.variables + opt.variables]}
        step()
        values[3] = [v.numpy() for v in model.variables + opt.variables]
        sv.request_stop()   # the final checkpoint, of step 3
    assert first > 0 and len(allocations) == first
    assert released == [True]
    assert sv.flush_events(DEADLINE)
    assert saves == [1, 2, 3]
    state = tf.train.get_checkpoint_state(str(tmp_path))
    assert [os.path.basename(p) for p in state.all_model_checkpoint_paths] == [
        "model.ckpt-1", "model.ckpt-2", "model.ckpt-3"]
    for step_number in (2, 3):
        tf.train.Checkpoint(model=model, optimizer=opt).read(
            str(tmp_path / f"model.ckpt-{step_number}")).assert_existing_objects_matched()
        for variable, value in zip(model.variables + opt.variables, values[step_number]):
            np.testing.assert_array_equal(variable.numpy(), value, err_msg=variable.path)


def address(value) -> int:
    """Where ``value`` (a tf.Variable, or a tensor in host memory) is in memory now: a read of
    a variable shares its memory, and so does a NumPy view of a tensor in host memory."""
    return np.asarray(value.value() if isinstance(value, tf.Variable) else value).ctypes.data


def test_a_save_copies_the_variables_into_memory_of_their_own():
    """The snapshot a save writes holds copies in memory of their own, equal to the variables
    at the save: none shares a variable's memory. One that did would make the step after the
    save pay the copy: TensorFlow copies a variable whose memory is shared into new memory
    before it updates it in place (copy on write)."""
    model, opt, train_step = loop_setup()
    train_step()
    flags = tf.Variable([True, False])   # a dtype copied into new memory at each save
    snapshot = Snapshot({"model": model, "optimizer": opt, "flags": flags})
    variables = [v if isinstance(v, tf.Variable) else v.value
                 for v in model.variables + opt.variables] + [flags]
    for _ in range(2):
        assert snapshot.copy()
        copies = snapshot.copies_of(variables)
        assert address(variables[0]) == address(variables[0])  # a read copies nothing
        for variable, copy in zip(variables, copies):
            assert address(copy) != address(variable), variable.name
            np.testing.assert_array_equal(copy.numpy(), variable.numpy())
        train_step()
        flags.assign(tf.logical_not(flags))
    snapshot.release()


def test_a_save_copies_into_the_memory_of_the_copy_before_unless_it_is_in_use():
    """The copies are made in the same host memory save after save (new memory costs a page
    fault per page touched: more than the copy), once nothing holds the copy before. A copy
    still held at the next save (a write in flight) is never written over: that save's copy
    goes to memory of its own, and each copy equals the variables at its save."""
    model, opt, train_step = loop_setup()
    train_step()
    snapshot = Snapshot({"model": model, "optimizer": opt})
    variables = [v if isinstance(v, tf.Variable) else v.value
                 for v in model.variables + opt.variables]

    def copy():
        assert snapshot.copy()
        copies = snapshot.copies_of(variables)
        for variable, value in zip(variables, copies):
            np.testing.assert_array_equal(value.numpy(), variable.numpy())
        return copies, [address(value) for value in copies], [c.numpy() for c in copies]

    _, first, _ = copy()
    train_step()
    held, second, held_values = copy()
    assert second == first     # nothing held the first copy: its memory took the second
    train_step()
    _, third, _ = copy()       # the second is held
    assert not set(third) & set(second)
    for value, before in zip(held, held_values):
        np.testing.assert_array_equal(value.numpy(), before)
    del held
    train_step()
    _, fourth, _ = copy()
    assert fourth == third
    snapshot.release()


def test_a_large_copy_is_split_across_threads_and_covers_every_element_once(monkeypatch):
    """A copy of many bytes is split across the cores (the training thread waits for it: the
    cores are free): each part copied in a thread of its own, about the same bytes each, and
    together every element of every array, of any dtype and size, once."""
    from jupyter_supervisor.eager import snapshot as snapshots  # pylint: disable=C0415
    rng = np.random.default_rng(0)
    sources = [rng.standard_normal((1000, 333)).astype(np.float32),
               rng.integers(1, 100, 7, dtype=np.int8), np.array(5, np.int64),
               (rng.standard_normal(50001) + 1j).astype(np.complex128),
               rng.integers(1, 2**40, (3, 3, 3), dtype=np.uint64)]
    total = sum(source.nbytes for source in sources)
    for parts in (1, 2, 3, 7):
        split = snapshots._split(  # pylint: disable=protected-access
            [(np.zeros_like(s), s) for s in sources], parts)
        sizes = [sum(array.nbytes for array, _ in part) for part in split]
        assert len(split) == parts and sum(sizes) == total
        assert max(sizes) - min(sizes) <= 2 * 16, sizes   # each cut moves by under an element
    copy_part = snapshots._copy_part  # pylint: disable=protected-access
    threads = []

    def recorded(part, errors):
        threads.append(threading.current_thread())
        copy_part(part, errors)

    monkeypatch.setattr(snapshots, "_copy_part", recorded)
    monkeypatch.setattr(snapshots, "_cores", lambda: 3)
    monkeypatch.setattr(snapshots, "_PART_BYTES", total // 3)
    arrays = [np.zeros_like(source) for source in sources]
    snapshots._copy(list(zip(arrays, sources)))  # pylint: disable=protected-access
    assert len(threads) == len(set(threads)) == 3
    assert threading.current_thread() in threads   # the calling thread copies a part too
    for array, source in zip(arrays, sources):
        np.testing.assert_array_equal(array, source)


def test_the_copy_of_the_save_before_is_freed_before_the_next_copy(tmp_path, backends):
    """Host memory holds one copy of the variables at a time: once the write of a save ended
    and its verdict is taken, nothing holds its copies (not the snapshot, not the check that
    gave the verdict), so they are freed before the next save's copy is made, not after."""
    sv, clock, model, opt, step, saves = saving_loop(tmp_path, backends)
    alive_at_copy = []   # per copy made: how many copies of the save before were alive
    with sv.session():
        sv.track(model=model, optimizer=opt)
        variables = [v if isinstance(v, tf.Variable) else v.value
                     for v in model.variables + opt.variables]
        clock.now += INTERVAL
        step()
        written(sv, saves, 1)
        snapshot = sv._checkpointer.writer._snapshot  # pylint: disable=protected-access
        traced = snapshot._traced                    # pylint: disable=protected-access
        copy_function = traced.copy_function
        before = [weakref.ref(c) for c in snapshot.copies_of(variables)]
        assert before and all(ref() is not None for ref in before)

        def watched(*handles):
            alive_at_copy.append(sum(ref() is not None for ref in before))
            return copy_function(*handles)

        traced.copy_function = watched
        try:
            clock.now += INTERVAL
            step()      # its boundary takes the verdict of save 1, then copies for save 2
            written(sv, saves, 2)
        finally:
            traced.copy_function = copy_function
        sv.request_stop()
    assert alive_at_copy[:1] == [0], alive_at_copy


def test_variables_of_every_kind_are_copied_and_written(tmp_path):
    """Variables the snapshot copies into its own memory (float, integer and complex dtypes)
    and those it copies into new memory at each save (bool, bfloat16, empty, of a shape left
    open) are each written with the value they held at their save."""
    variables = {
        "kernel": tf.Variable(tf.random.normal([8, 4])),
        "count": tf.Variable(3, dtype=tf.int64),
        "phase": tf.Variable([1 + 2j], dtype=tf.complex64),
        "mask": tf.Variable([True, False]),
        "half": tf.Variable(tf.ones([4], tf.bfloat16)),
        "empty": tf.Variable(tf.zeros([0, 3])),
        "grows": tf.Variable([1.0], shape=tf.TensorShape(None)),
    }
    module = tf.Module()
    for name, variable in variables.items():
        setattr(module, name, variable)
    snapshot = Snapshot({"module": module})
    for number in range(2):
        assert snapshot.copy()
        expected = {name: variable.numpy() for name, variable in variables.items()}
        write, _ = snapshot.write_function([])
        for variable in variables.values():   # changed after the copy, before the write
            variable.assign(tf.logical_not(variable) if variable.dtype == tf.bool
                            else tf.zeros_like(variable))
        path = str(tmp_path / f"ckpt-{number}")
        write(path)
        reader = tf.train.load_checkpoint(path)
        for name, value in expected.items():
            np.testing.assert_array_equal(
                reader.get_tensor(f"module/{name}/.ATTRIBUTES/VARIABLE_VALUE"), value,
                err_msg=name)
        variables["grows"].assign(tf.range(number + 2, dtype=tf.float32))
        variables["kernel"].assign(tf.random.normal([8, 4]))
    snapshot.release()


def test_slots_that_come_after_a_copy_in_the_same_object_graph_stop_the_next_copy():
    """A tf.compat.v1 optimizer makes its slots at its first update, outside the object graph
    (the objects and edges stay the same): a copy taken before them copies, the next one
    refuses (the caller then saves synchronously, with the slots), as it would have if the
    slots were there at the first copy."""
    variable = tf.Variable([1.0, 2.0])
    opt = tf.compat.v1.train.MomentumOptimizer(0.1, momentum=0.9)
    snapshot = Snapshot({"v": variable, "opt": opt})
    try:
        assert snapshot.copy(), snapshot.why_not
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(variable * variable)
        opt.apply_gradients([(tape.gradient(loss, variable), variable)])
        assert opt.get_slot_names() == ["momentum"]
        assert not snapshot.copy()
        assert "slot variables" in snapshot.why_not
    finally:
        snapshot.release()


def test_an_identity_map_keys_the_objects_themselves():
    """What the snapshot's and the restore's walks of the object graph key by: unhashable
    variables, and objects that compare equal without being one."""
    a, b = tf.Variable(1.0), tf.Variable(1.0)
    first, second = [1], [1]
    found = IdentityMap([a])
    assert a in found and b not in found and found.get(a) is None
    found[b], found[first] = "b", "first"
    assert found[b] == "b" and second not in found and found.get(second, 0) == 0
    assert found.values() == [None, "b", "first"]
