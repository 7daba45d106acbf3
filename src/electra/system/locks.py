"""One process at a time per output directory: a lock file that names its holder.

``electra pretrain`` (its run directory), ``electra prepare`` (its output) and
``electra finetune`` (its output) hold ``DIR/.electra.lock`` while they run. The
file says who holds it, as JSON: ``{"pid", "host", "started", "command"}``. A
second process on the same directory refuses at once, naming the holder:

* the holder runs on this host: the lock is an ``fcntl.flock`` on the file,
  which the kernel drops when the holder exits, however it exits (a crash, a
  SIGKILL, an out-of-memory kill); a lock no process holds any more is taken
  over, with a message saying whose it was;
* the file was written on another host (a shared file system): this host can
  not tell whether that process is alive, so it refuses and says how to remove
  the file if that host is down.

The lock is released, and the file removed, when the block ends, on an
exception too. Processes forked while it is held (data loaders, worker pools)
close their copy of it, so one left running can not keep it. Without
``fcntl`` (Windows) the file is created exclusively and a holder on this host
is checked by its pid where the platform allows. Torch-free.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import json
import os
import shlex
import socket
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from types import TracebackType

from electra.system.errors import RunError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

LOCK_NAME = ".electra.lock"
_HELD: set[int] = set()  # file descriptors of the locks this process holds


class DirectoryLocked(RunError):
    """Another process holds the directory (or held it, on a host this one cannot check)."""


@dataclass
class Holder:
    """Who holds a lock: what its file says."""

    pid: int
    host: str
    started: str
    command: str

    @classmethod
    def me(cls, command: str | None = None) -> Holder:
        """This process, now."""
        started = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
        if command is None:
            command = shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]])
        return cls(os.getpid(), socket.gethostname(), started, command)

    @classmethod
    def parse(cls, text: str) -> Holder | None:
        """The holder a lock file's text names (None: empty or unreadable)."""
        try:
            d = json.loads(text)
            return cls(int(d["pid"]), str(d["host"]), str(d["started"]), str(d["command"]))
        except (ValueError, KeyError, TypeError):
            return None

    def describe(self) -> str:
        return f"pid {self.pid} on host {self.host}, started {self.started} (`{self.command}`)"


def _close_in_child() -> None:
    """After a fork: the child closes its copies of the held locks (closing a copy, unlike
    unlocking it, leaves the parent's lock in place)."""
    for fd in list(_HELD):
        with contextlib.suppress(OSError):
            os.close(fd)
    _HELD.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_in_child)


def _pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs on this host (True where that cannot be told)."""
    if os.name != "posix":
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


class DirectoryLock:
    """The lock of one directory; ``with DirectoryLock(path):`` holds it for the block.

    Raises :class:`DirectoryLocked` when another live process holds it, or when a
    process on another host left it. :attr:`taken_over` describes the holder of a
    stale lock this one replaced (also printed to stderr), else None.
    """

    def __init__(self, directory: str | os.PathLike[str], command: str | None = None) -> None:
        self.directory = Path(directory)
        self.path = self.directory / LOCK_NAME
        self.me = Holder.me(command)
        self.fd: int | None = None
        self.taken_over: Holder | None = None
        self._owner = os.getpid()  # a forked child never releases its parent's lock

    def __enter__(self) -> DirectoryLock:
        self.acquire()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()

    def acquire(self) -> None:
        """Take the lock, or raise :class:`DirectoryLocked` naming its holder."""
        self.directory.mkdir(parents=True, exist_ok=True)
        take = self._take_flock if fcntl is not None else self._take_exclusive
        for _ in range(100):  # another process may remove or replace the file meanwhile
            if take():
                break
        else:
            raise DirectoryLocked(f"{self.path}: could not take the lock (it keeps changing)")
        if self.taken_over is not None:
            print(
                f"{self.directory}: took over the lock of {self.taken_over.describe()}: "
                "that process is gone",
                file=sys.stderr,
            )

    def _take_flock(self) -> bool:
        """One try with ``flock``: True once held, False if the file changed under us."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise DirectoryLocked(self._in_use(self._read())) from None
            print(  # ENOLCK, EOPNOTSUPP: a network file system without locks
                f"{self.directory}: cannot lock {self.path} ({exc.strerror}); a second process "
                "on this directory will not be stopped",
                file=sys.stderr,
            )
            return True
        try:
            same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False  # its holder removed it after we opened it
        if not same:
            os.close(fd)
            return False
        try:
            self._claim(fd, Holder.parse(os.read(fd, 1 << 16).decode("utf-8", "replace")))
        except BaseException:
            os.close(fd)
            raise
        return True

    def _take_exclusive(self) -> bool:
        """One try without ``flock``: create the file exclusively, or judge its holder."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            holder = self._read()
            if holder is None or holder.host != self.me.host or _pid_alive(holder.pid):
                raise DirectoryLocked(self._in_use(holder)) from None
            self.taken_over = holder
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
            return False
        self._write(fd)
        return True

    def _claim(self, fd: int, previous: Holder | None) -> None:
        """Holding the flock: refuse another host's lock, else (re)write the file as ours."""
        if previous is not None and previous.host != self.me.host:
            raise DirectoryLocked(self._other_host(previous))
        if previous is not None:
            self.taken_over = previous  # its process is gone: the kernel dropped its flock
        self._write(fd)

    def _write(self, fd: int) -> None:
        os.lseek(fd, 0, os.SEEK_SET)
        os.ftruncate(fd, 0)
        os.write(fd, (json.dumps(asdict(self.me)) + "\n").encode("utf-8"))
        os.fsync(fd)
        self.fd = fd
        _HELD.add(fd)

    def _read(self) -> Holder | None:
        try:
            return Holder.parse(self.path.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            return None

    def _in_use(self, holder: Holder | None) -> str:
        """The refusal when the lock is held (or, without flock, looks held)."""
        if holder is None:
            return f"{self.directory}: in use by another process (lock file {self.path})"
        if holder.host != self.me.host:
            return self._other_host(holder)
        return (
            f"{self.directory}: in use by {holder.describe()}; wait for it to end or stop it "
            "(one process per directory)"
        )

    def _other_host(self, holder: Holder) -> str:
        return (
            f"{self.directory}: locked by {holder.describe()}, which this host "
            f"({self.me.host}) cannot check. If that process is no longer running (its host "
            f"is down or was restarted), remove the lock and run again: rm {shlex.quote(str(self.path))}"
        )

    def release(self) -> None:
        """Remove the file and drop the lock (a no-op when not held, or in a forked child)."""
        fd, self.fd = self.fd, None
        if fd is None or os.getpid() != self._owner:
            return
        _HELD.discard(fd)
        try:
            if os.stat(self.path).st_ino == os.fstat(fd).st_ino:
                os.unlink(self.path)  # while still locked: the next process makes a new file
        except OSError:
            pass
        finally:
            os.close(fd)
