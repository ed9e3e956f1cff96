"""A logdir on a disk that vanishes with the runtime: the note at a run's start, for each hosted
runtime the package knows (emulated by the environment variables it sets) and for a tmpfs;
no note on a normal disk, never an error."""
import os
import pathlib
import shutil
import uuid

import pytest
from tensorflow.python.eager import context

from jupyter_supervisor import storage
from jupyter_supervisor.notebook import run as run_module

DEADLINE = 60.0   # seconds; generous for a loaded 2-core machine, never reached when passing
ROOT = str(pathlib.Path(__file__).resolve().parent.parent)   # the checkout: a normal disk

# A mount table as a container shows it: / on overlay, /dev/shm a tmpfs, a space escaped, and
# /scratch mounted twice (the later mount, ext4, covers the tmpfs).
MOUNTINFO = r"""22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 254:0 / / rw,relatime shared:1 - overlay overlay rw,lowerdir=/a
25 24 0:23 / /dev/shm rw,relatime - tmpfs tmpfs rw,size=65536k
40 27 0:40 / /my\040ram rw master:2 - tmpfs tmpfs rw
41 27 0:41 / /scratch rw - tmpfs tmpfs rw
42 27 0:42 / /scratch rw - ext4 /dev/sdb rw
43 27 0:43 / /content/drive rw - fuse.drive drive rw
"""
MOUNTS = storage.parse_mountinfo(MOUNTINFO)


def test_the_mount_table_is_read_with_its_escapes_and_optional_fields():
    assert ("/", "overlay") in MOUNTS and ("/my ram", "tmpfs") in MOUNTS
    assert storage.parse_mounts("tmpfs /dev/shm tmpfs rw 0 0\nnone\n") == [("/dev/shm",
                                                                            "tmpfs")]


@pytest.mark.parametrize("path, expected", [
    ("/dev/shm/runs/fit", ("/dev/shm", "tmpfs")),
    ("/my ram/fit", ("/my ram", "tmpfs")),
    ("/dev/shmx/fit", None),            # a prefix of a name is no mount point of it
    ("/scratch/fit", None),             # covered by the later ext4 mount
    ("/home/me/runs", None),
])
def test_the_longest_mount_point_holding_the_path_decides(path, expected):
    assert storage.memory_mount(path, MOUNTS) == expected


@pytest.mark.parametrize("environ, logdir, says", [
    ({"COLAB_RELEASE_TAG": "release-colab_20250101-060000_RC00"}, "/content/runs/fit",
     ["Colab runtime's own disk", "drive.mount('/content/drive')",
      "--logdir /content/drive/MyDrive/runs/fit"]),
    ({"COLAB_RELEASE_TAG": "x"}, "/content", ["--logdir /content/drive/MyDrive/runs "]),
    ({"KAGGLE_KERNEL_RUN_TYPE": "Interactive"}, "/kaggle/working/runs/fit",
     ["Kaggle session's own disk", "Save Version", "/kaggle/input",
      "/kaggle/working/runs/fit"]),
])
def test_a_hosted_runtimes_own_disk_is_said_with_what_to_do(environ, logdir, says):
    note = storage.disk_note(logdir, environ, MOUNTS)
    for words in says:
        assert words in note, words


@pytest.mark.parametrize("environ, logdir", [
    ({"COLAB_RELEASE_TAG": "x"}, "/content/drive/MyDrive/runs/fit"),   # on Drive
    ({"COLAB_RELEASE_TAG": "x"}, "/contents/fit"),
    ({}, "/content/runs/fit"),                                          # not Colab
    ({"KAGGLE_KERNEL_RUN_TYPE": "Batch"}, "/kaggle/working/runs"),      # a saved version
    ({"KAGGLE_KERNEL_RUN_TYPE": "Interactive"}, "/kaggle/temp/runs"),
    ({"COLAB_RELEASE_TAG": "x"}, "gs://bucket/runs/fit"),
    ({"COLAB_RELEASE_TAG": "x"}, None),
])
def test_no_note_elsewhere(environ, logdir):
    assert storage.disk_note(logdir, environ, MOUNTS) is None


def test_a_relative_logdir_is_judged_where_it_lands(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    mounts = [("/", "ext4"), (str(tmp_path), "tmpfs")]
    assert f"on a tmpfs (mounted at {tmp_path})" in storage.disk_note("runs/fit", {}, mounts)


def test_this_machines_dev_shm_is_a_tmpfs_and_the_checkout_is_not():
    if storage.memory_mount("/dev/shm") is None:
        pytest.skip("/dev/shm is no tmpfs here")
    note = storage.disk_note("/dev/shm/runs/fit", {})
    assert note.startswith("The logdir /dev/shm/runs/fit is on a tmpfs (mounted at /dev/shm)")
    assert storage.disk_note(os.path.join(ROOT, "runs", "fit"), {}) is None


def test_an_unreadable_mount_table_gives_no_note(monkeypatch):
    def refused(*args, **kwargs):
        raise PermissionError("no /proc here")
    monkeypatch.setattr("builtins.open", refused)
    assert storage.mount_table() == []
    assert storage.disk_note("/dev/shm/runs/fit", {}) is None


@pytest.fixture
def shm_logdir():
    if not os.path.isdir("/dev/shm") or storage.memory_mount("/dev/shm") is None:
        pytest.skip("/dev/shm is no tmpfs here")
    logdir = f"/dev/shm/jsv-test-{uuid.uuid4().hex[:8]}"
    yield logdir
    shutil.rmtree(logdir, ignore_errors=True)


def test_the_note_is_said_once_in_the_cell_and_the_panel(ip, shm_logdir, capsys):
    with context.eager_mode():
        ip.run_cell_magic("supervise", f"--logdir {shm_logdir} --wait", "x = 1\n")
    printed = capsys.readouterr().out
    run = run_module.get_run(os.path.basename(shm_logdir))
    assert run.status == "finished"
    assert printed.count(f"The logdir {shm_logdir} is on a tmpfs") == 1
    output = run.history.snapshot().output
    assert output.count(f"Note: The logdir {shm_logdir} is on a tmpfs") == 1
    run.resume()    # a resume of the same run says nothing more
    assert run.wait(DEADLINE)
    assert run.history.snapshot().output.count("is on a tmpfs") == 1


def test_a_colab_runtime_is_told_in_the_runs_notes(monkeypatch, ip, tmp_path):
    monkeypatch.setenv("COLAB_RELEASE_TAG", "test")
    tmp_path = tmp_path.resolve()
    monkeypatch.setattr(storage, "COLAB_DISK", str(tmp_path))
    monkeypatch.setattr(storage, "COLAB_DRIVE", str(tmp_path / "drive"))
    with context.eager_mode():
        on_disk = run_module.TrainingRun(run_module.RunConfig(logdir=str(tmp_path / "fit")),
                                         "x = 1\n", ip.user_ns)
        on_disk.start()
        on_drive = run_module.TrainingRun(
            run_module.RunConfig(logdir=str(tmp_path / "drive" / "MyDrive" / "fit2")),
            "x = 1\n", ip.user_ns)
        on_drive.start()
        assert on_disk.wait(DEADLINE) and on_drive.wait(DEADLINE)
    assert [note for note in on_disk.notes if "Colab runtime's own disk" in note]
    assert not [note for note in on_drive.notes if "own disk" in note]
