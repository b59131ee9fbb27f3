"""The output directory: Parquet files per (topic, offset range), and the run's bookkeeping.

A run writes every (topic, offset) once, even when it is killed at any point and rerun:

1. ``_pending.json`` names the ranges about to be written (durably, before any data);
2. Spark writes them under ``_staging/``;
3. each staged file moves to ``topic=T/commit_date=D/part-<start>-<end>-<k>.parquet``,
   a name fixed by its range;
4. ``_checkpoint.json`` (each topic's next offset) is replaced atomically, and only then
   is the pending record removed.

A run that finds a pending record first deletes the files of its ranges that the
checkpoint does not cover, so a range is replaced, never appended to. Bookkeeping names
start with ``_`` or ``.``, which Parquet readers skip. The directory is a local (or
shared, e.g. NFS) file system path, the same on the driver and the executors.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from spark_outbox.errors import IngestError
from spark_outbox.plan import TopicRange

CHECKPOINT = "_checkpoint.json"
PENDING = "_pending.json"
STAGING = "_staging"
LOCK = ".lock"
TOPIC_DIR = "topic="
DATE_DIR = "commit_date="


def range_prefix(r: TopicRange) -> str:
    # zero-padded to int64's 19 digits: files list in offset order
    return f"part-{r.start:019d}-{r.end:019d}-"


def range_file_name(r: TopicRange, k: int) -> str:
    return f"{range_prefix(r)}{k:05d}.parquet"


class OutputDir:
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).resolve()

    @property
    def staging(self) -> Path:
        # Spark skips paths named "_..." when reading, so the staged dataset itself is not
        return self.root / STAGING / "data"

    @contextmanager
    def locked(self) -> Iterator[None]:
        """One run at a time per directory."""
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / LOCK, "a+b") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise IngestError(f"another txmsg ingest is running on {self.root}") from None
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def checkpoint(self) -> dict[str, int]:
        """Each topic's next offset to ingest (0 for topics never ingested)."""
        data = self._read_json(CHECKPOINT)
        return {t: int(o) for t, o in (data or {}).get("topics", {}).items()}

    def pending(self) -> list[TopicRange]:
        data = self._read_json(PENDING)
        return [TopicRange(r["topic"], int(r["start"]), int(r["end"]))
                for r in (data or {}).get("ranges", [])]

    def recover(self) -> list[TopicRange]:
        """Undo what an interrupted run left: its uncommitted ranges' files, its staging."""
        checkpoint = self.checkpoint()
        undone = [r for r in self.pending() if checkpoint.get(r.topic, 0) <= r.start]
        for r in undone:
            self._remove_range(r)
        self._remove_staging()
        self._remove(PENDING)
        return undone

    def begin(self, ranges: Sequence[TopicRange]) -> None:
        """Record the ranges about to be written, before writing any of them."""
        self._remove_staging()
        self._write_json(PENDING, {"ranges": [
            {"topic": r.topic, "start": r.start, "end": r.end} for r in ranges]})

    def staged_files(self) -> list[tuple[str, Path]]:
        """The data files Spark wrote under staging, with their topic, in name order."""
        files: list[tuple[str, Path]] = []
        for topic_dir in _subdirs(self.staging, TOPIC_DIR):
            topic = unquote(topic_dir.name[len(TOPIC_DIR):])
            for date_dir in _subdirs(topic_dir, DATE_DIR):
                files.extend((topic, f) for f in sorted(date_dir.iterdir())
                             if f.is_file() and f.name.startswith("part-"))
        return files

    def publish(self, ranges: Sequence[TopicRange]) -> int:
        """Move the staged files of ``ranges`` to their final names, durably; how many."""
        by_topic = {r.topic: r for r in ranges}
        counters: dict[Path, int] = {}
        for topic, f in self.staged_files():
            if topic not in by_topic:
                raise IngestError(f"staged data of topic {topic!r}, which this run did not read")
            # same directory names as staged: topic=T/commit_date=D
            target = self.root / f.parent.parent.name / f.parent.name
            target.mkdir(parents=True, exist_ok=True)
            k = counters.get(target, 0)
            counters[target] = k + 1
            _fsync_file(f)
            os.replace(f, target / range_file_name(by_topic[topic], k))
        for d in (*sorted({*counters, *(t.parent for t in counters)}), self.root):
            _fsync_dir(d)
        return sum(counters.values())

    def commit(self, ranges: Sequence[TopicRange]) -> None:
        """Move the checkpoint past ``ranges`` (atomically), then forget the pending record."""
        topics = self.checkpoint()
        topics.update({r.topic: r.end for r in ranges})
        self._write_json(CHECKPOINT, {"topics": dict(sorted(topics.items())),
                                      "updated_at": datetime.now(UTC).isoformat()})
        self._remove(PENDING)
        self._remove_staging()

    def _remove_range(self, r: TopicRange) -> None:
        prefix = range_prefix(r)
        for topic_dir in _subdirs(self.root, TOPIC_DIR):
            if unquote(topic_dir.name[len(TOPIC_DIR):]) != r.topic:
                continue
            for date_dir in _subdirs(topic_dir, DATE_DIR):
                for f in date_dir.iterdir():
                    if f.name.startswith(prefix):
                        f.unlink()
                if not any(date_dir.iterdir()):
                    date_dir.rmdir()
                _fsync_dir(topic_dir)

    def _remove_staging(self) -> None:
        if (self.root / STAGING).exists():
            shutil.rmtree(self.root / STAGING)

    def _read_json(self, name: str) -> Any:  # the file's JSON, or None when there is no file
        path = self.root / name
        if not path.exists():
            return None
        try:
            return json.loads(path.read_text())
        except ValueError as exc:
            raise IngestError(f"{path} is not valid JSON: {exc}") from exc

    def _write_json(self, name: str, data: object) -> None:
        path = self.root / name
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "w") as f:
            json.dump(data, f, indent=1)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(self.root)

    def _remove(self, name: str) -> None:
        path = self.root / name
        if path.exists():
            path.unlink()
            _fsync_dir(self.root)


def _subdirs(parent: Path, prefix: str) -> Iterable[Path]:
    if not parent.is_dir():
        return []
    return sorted(d for d in parent.iterdir() if d.is_dir() and d.name.startswith(prefix))


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
