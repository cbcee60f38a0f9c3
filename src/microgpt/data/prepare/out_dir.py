"""Where a prepare writes, so that nothing is lost and nothing is half-written.

`Output(out, overwrite).claim()` takes a lock on `.<name>.lock` beside --out (fcntl.flock, released by the
kernel when the process dies, and the file removed when prepare ends: a second prepare into the same --out is
refused while the first runs, naming it) and refuses an --out that exists, unless --overwrite (which replaces only a
prepared dataset, a manifest with the format key and nothing beside it but shards, or an empty directory).
`begin()` makes the directory the shards go into, `<out>.partial-<random>` beside it; `commit` writes the manifest
into it last and renames it to --out (an --out being replaced is renamed away first and removed after), so a
directory named --out is always complete; `abort` removes the partial directory. Partial directories left by a
killed prepare are removed by the next one into the same --out, whose lock proves them dead: only those named
exactly `<out>.partial-<8 hex digits>` (or that and `-replaced`) and holding nothing but shards and a manifest.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import secrets
import shutil
import signal
from pathlib import Path

from microgpt.core.errors import ConfigError, DataError
from microgpt.core.stops import STOP_SIGNALS
from microgpt.data.dataset import MANIFEST, VERSION_KEY

PARTIAL = ".partial-"
PARTIAL_SUFFIX = re.compile(r"\.partial-[0-9a-f]{8}(-replaced)?")  # begin()'s and commit()'s names
SHARD_FILE = re.compile(r"(train|val)-\d{5,}\.bin")  # writer.py's names


class Output:
    def __init__(self, out: str | Path, overwrite: bool = False):
        self.out = Path(out)
        self.overwrite = overwrite
        self.partial: Path | None = None
        self.committed = False  # whether --out now holds the new dataset
        self.lock_path = self.out.parent / f".{self.out.name}.lock"
        self._lock = None

    def claim(self) -> Output:
        """Lock --out and check it may be written; a ConfigError naming the problem otherwise."""
        self._check()
        try:
            self.out.parent.mkdir(parents=True, exist_ok=True)
            while self._lock is None:
                self._lock = self._take_lock()
        except OSError as exc:
            raise ConfigError(f"cannot use the lock file {self.lock_path} ({exc.strerror or exc}); pick another "
                              "--out") from None
        self._check()  # again, now that no other prepare can change it
        for stale in self.out.parent.iterdir():
            if is_partial(stale.name, self.out.name) and stale.is_dir() and _only_ours(stale):
                shutil.rmtree(stale, ignore_errors=True)
        return self

    def _take_lock(self):
        """The lock file, locked and holding this process's id; None where a releasing prepare removed it
        meanwhile (try again); a ConfigError naming the prepare that holds it."""
        lock = open(self.lock_path, "a+")  # noqa: SIM115 - held open while the prepare lives
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            lock.seek(0)
            holder = lock.read().strip() or "another process"
            lock.close()
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            raise ConfigError(f"{self.out} is being prepared by process {holder}; wait for it to finish, or pick "
                              "another --out") from None
        try:
            same = os.stat(self.lock_path).st_ino == os.fstat(lock.fileno()).st_ino
        except FileNotFoundError:
            same = False
        if not same:
            lock.close()
            return None
        lock.seek(0)
        lock.truncate()
        lock.write(f"{os.getpid()}\n")
        lock.flush()
        return lock

    def _check(self) -> None:
        out = self.out
        resolved = out.resolve()
        if resolved == Path.cwd().resolve() or resolved in Path.cwd().resolve().parents:
            raise ConfigError(f"--out {out} is the current directory or one above it, which prepare would replace; "
                              "give a new directory, e.g. --out data/corpus")
        if out.is_symlink():
            raise ConfigError(f"--out {out} is a symlink; prepare replaces the directory, so give a real one")
        if out.exists() and not out.is_dir():
            raise ConfigError(f"--out {out} is a file; give a directory for the dataset")
        if not out.exists():
            return
        dataset, empty = _prepared(out), not any(out.iterdir())
        if not dataset and not empty:
            raise ConfigError(f"--out {out} exists and is not a prepared dataset (it holds other files), and prepare "
                              "replaces the whole directory; pick another --out or empty it")
        if not self.overwrite:
            what = "holds a prepared dataset" if dataset else "exists"
            raise ConfigError(f"--out {out} {what}; give --overwrite to replace it (only once the new one is "
                              "complete), or pick another --out")

    def begin(self) -> Path:
        """The new partial directory, where the shards are written."""
        self.partial = self.out.parent / f"{self.out.name}{PARTIAL}{secrets.token_hex(4)}"
        try:
            self.partial.mkdir()
        except OSError as exc:
            raise DataError(f"cannot make {self.partial} ({exc.strerror or exc}); pick another --out") from None
        return self.partial

    def commit(self, manifest: dict) -> None:
        """Write the manifest into the partial directory, then put the directory in --out's place."""
        path = self.partial / MANIFEST
        with open(path, "w", encoding="utf-8") as f:
            json.dump(manifest, f, indent=1)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        _sync_directory(self.partial)
        old = None
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)  # no stop between the two renames
        try:
            if self.out.exists():
                old = self.out.parent / f"{self.out.name}{PARTIAL}{secrets.token_hex(4)}-replaced"
                os.rename(self.out, old)
            try:
                os.rename(self.partial, self.out)
            except OSError:
                if old is not None:
                    os.rename(old, self.out)
                raise
            self.partial, self.committed = None, True
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)  # a stop asked meanwhile comes now, after
        _sync_directory(self.out.parent)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)

    def abort(self) -> None:
        if self.partial is not None:
            shutil.rmtree(self.partial, ignore_errors=True)
            self.partial = None

    def release(self) -> None:
        """Remove the lock file and unlock it (a prepare waiting on the old file sees it gone, and retries)."""
        if self._lock is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.lock_path)
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None


def is_partial(name: str, out_name: str) -> bool:
    """Whether `name` is one prepare gives a partial directory of the --out named `out_name` (or the dataset it
    replaces, renamed away): a name, never a pattern."""
    return name.startswith(out_name) and PARTIAL_SUFFIX.fullmatch(name, len(out_name)) is not None


def _prepared(directory: Path) -> bool:
    """Whether `directory` is a prepared dataset and nothing else: a manifest with the format key, and only
    shard files beside it (a directory that holds anything more is someone else's, and never replaced)."""
    try:
        manifest = json.loads((directory / MANIFEST).read_text(encoding="utf-8")) if _only_ours(directory) else None
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and VERSION_KEY in manifest


def _only_ours(directory: Path) -> bool:
    """Whether every entry of `directory` is a file prepare writes there: the manifest or a shard."""
    return all(entry.is_file() and (entry.name == MANIFEST or SHARD_FILE.fullmatch(entry.name))
               for entry in directory.iterdir())


def _sync_directory(path: Path) -> None:
    """Flush a directory's entries to disk (where the platform allows it)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
