"""Where a logdir's files live: a disk that vanishes with the runtime, said once at a run's start.

On hosted notebooks a relative ``--logdir`` lands on the runtime's own disk, deleted with the
runtime (an idle timeout, the session's time limit) without any signal: every checkpoint goes
at once. No error can help there, so a run says it once, at its first start, in the cell and the
panel, with what to do; a logdir on a normal disk gets no note. Told only where the package can
tell:

- Google Colab (``COLAB_RELEASE_TAG`` set): a logdir under ``/content`` but not under its
  Google Drive mount, ``/content/drive``.
- Kaggle (``KAGGLE_KERNEL_RUN_TYPE``): a logdir under ``/kaggle/working`` in an interactive
  session (a saved version's run keeps ``/kaggle/working`` as its output).
- A tmpfs (or ramfs) anywhere: the file system of the longest mount point that holds the
  logdir, from ``/proc/self/mountinfo`` (or ``/proc/mounts``). Its files live in memory.

Nothing here raises: a mount table that cannot be read gives no note. No TensorFlow.
"""
import os
import posixpath
import re
from typing import List, Mapping, Optional, Tuple

COLAB_ENV, KAGGLE_ENV = "COLAB_RELEASE_TAG", "KAGGLE_KERNEL_RUN_TYPE"
COLAB_DISK, COLAB_DRIVE = "/content", "/content/drive"
KAGGLE_DISK = "/kaggle/working"
# File systems whose files live in memory: gone at a reboot, an unmount, a container's end.
MEMORY_FILE_SYSTEMS = ("tmpfs", "ramfs")

_ESCAPED = re.compile(r"\\([0-7]{3})")   # mountinfo writes a space as \040


def start_notes(logdir: Optional[str], environ: Optional[Mapping[str, str]] = None,
                mounts: Optional[List[Tuple[str, str]]] = None) -> List[str]:
    """The note on a logdir whose disk vanishes with the runtime, as a list (empty: none).

    Args:
        logdir: the run's logdir (None: nothing is saved; a URL such as ``gs://``: no note).
        environ: the environment to read (default ``os.environ``).
        mounts: ``[(mount point, file system type)]`` in the mount table's order (default:
            this process's, ``mount_table()``).

    Returns:
        ``[note]`` or ``[]``.
    """
    note = disk_note(logdir, environ, mounts)
    return [note] if note else []


def disk_note(logdir: Optional[str], environ: Optional[Mapping[str, str]] = None,
              mounts: Optional[List[Tuple[str, str]]] = None) -> Optional[str]:
    """What to tell a user whose ``logdir`` is on a disk that vanishes (see the module
    docstring), or None; arguments as ``start_notes``."""
    if not logdir or "://" in logdir:
        return None
    environ = os.environ if environ is None else environ
    path = os.path.realpath(os.path.abspath(logdir))
    if environ.get(COLAB_ENV) is not None and _under(path, COLAB_DISK) \
            and not _under(path, COLAB_DRIVE):
        inside = posixpath.relpath(path, COLAB_DISK)
        keep = posixpath.join(COLAB_DRIVE, "MyDrive", "runs" if inside == "." else inside)
        return (f"The logdir {path} is on the Colab runtime's own disk, which is deleted with "
                "the runtime (when it has idled a while, or at its time limit), every "
                "checkpoint with it, without a signal. Mount Google Drive (from google.colab "
                "import drive; drive.mount('/content/drive')) and use --logdir "
                f"{keep} (docs/colab-vscode.md).")
    run_type = environ.get(KAGGLE_ENV)
    if run_type is not None and run_type.lower() != "batch" and _under(path, KAGGLE_DISK):
        return (f"The logdir {path} is on the Kaggle session's own disk: an interactive "
                "session's files are deleted when it ends (idle, or at its time limit), every "
                "checkpoint with them, without a signal. To keep them, run the notebook as a "
                "saved version (Save Version, Save & Run All), whose /kaggle/working becomes "
                "its output; to resume, add that output to the next session and copy the "
                f"logdir from /kaggle/input back to {path} (docs/preemption.md).")
    mount = memory_mount(path, mounts)
    if mount is not None:
        point, kind = mount
        return (f"The logdir {path} is on a {kind} (mounted at {point}): its files live in "
                "memory and are gone when the machine restarts or the file system is "
                "unmounted, every checkpoint with them. Use a directory on a disk for "
                "--logdir (docs/preemption.md).")
    return None


def memory_mount(path: str, mounts: Optional[List[Tuple[str, str]]] = None
                 ) -> Optional[Tuple[str, str]]:
    """(mount point, type) when the file system holding ``path`` (an absolute, resolved path)
    keeps its files in memory (``MEMORY_FILE_SYSTEMS``), else None."""
    mounts = mount_table() if mounts is None else mounts
    found = None
    for point, kind in mounts:
        # A later mount on the same point covers the earlier one: the last longest wins.
        if _under(path, point) and (found is None or len(point) >= len(found[0])):
            found = (point, kind)
    return found if found is not None and found[1] in MEMORY_FILE_SYSTEMS else None


def mount_table() -> List[Tuple[str, str]]:
    """This process's mounts as ``[(mount point, file system type)]``, in the kernel's order;
    [] where neither ``/proc/self/mountinfo`` nor ``/proc/mounts`` can be read."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            return parse_mountinfo(f.read())
    except OSError:
        pass
    try:
        with open("/proc/mounts", encoding="utf-8", errors="replace") as f:
            return parse_mounts(f.read())
    except OSError:
        return []


def parse_mountinfo(text: str) -> List[Tuple[str, str]]:
    """``/proc/self/mountinfo``'s lines as ``[(mount point, type)]``: the fifth field, and the
    first after the ``-`` that ends the optional fields."""
    out = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 7 or "-" not in fields[6:]:
            continue
        kind = fields[fields.index("-", 6) + 1] if fields.index("-", 6) + 1 < len(fields) \
            else ""
        out.append((_unescape(fields[4]), kind))
    return out


def parse_mounts(text: str) -> List[Tuple[str, str]]:
    """``/proc/mounts``'s lines (device, mount point, type, ...) as ``[(mount point, type)]``."""
    return [(_unescape(fields[1]), fields[2]) for fields in
            (line.split() for line in text.splitlines()) if len(fields) >= 3]


def _unescape(field: str) -> str:
    return _ESCAPED.sub(lambda m: chr(int(m.group(1), 8)), field)


def _under(path: str, directory: str) -> bool:
    """True when ``path`` is ``directory`` or inside it."""
    directory = directory.rstrip("/") or "/"
    return path == directory or path.startswith(directory if directory == "/"
                                                else directory + "/")
