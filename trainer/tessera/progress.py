"""Progress of long work: a live line on a terminal, JSON lines in pods, nothing with --quiet.

Every long-running command reports through a `Reporter`, so the three output styles stay
consistent and the operator can parse what pods print. Listeners (the Prometheus metrics)
get every record as a JSON line would hold it, whatever the style and unthrottled: progress
advances once per bucket, so that costs nothing.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, Any, Literal

from .config.redaction import without_url_credentials
from .log_records import event_record, is_number, json_line, progress_record

Mode = Literal["auto", "human", "json", "quiet"]
Listener = Callable[[dict[str, Any]], None]

# Minimum seconds between two progress updates, so output never slows the work down.
HUMAN_INTERVAL = 0.5
JSON_INTERVAL = 10.0
# Seconds of work after the first unit before its pace replaces the whole task's rate.
MIN_PACE_SECONDS = 1.0


class Reporter:
    """Writes events and progress updates in the chosen style."""

    def __init__(self, mode: Mode = "auto", stream: IO[str] | None = None) -> None:
        self.stream = stream or sys.stderr
        if mode == "auto":
            mode = "human" if self.stream.isatty() else "json"
        self.mode = mode
        self.listeners: list[Listener] = []
        # Events whose fields the human style leaves out, because the command prints them
        # as its result on stdout (`tessera eval`'s metrics): shown once, not twice.
        self.fields_printed_as_result: set[str] = set()
        # Events the human style on a terminal folds into the live line, each naming the
        # one field shown there, rather than giving each a line of its own (one `checkpoint
        # committed` per epoch would push the live line out of view); JSON keeps them all.
        self.folded_events: dict[str, str] = {}
        self._live = ""  # the live line last written on a terminal, without `_folded`
        self._folded = ""  # the last folded event, shown at the end of the live line
        # Progress comes from a polling thread and checkpoints from a background writer:
        # one line (and one listener call) at a time.
        self._lock = threading.RLock()

    def event(self, message: str, **fields: Any) -> None:
        """One line for something that happened (`imported 10 edges`)."""
        if self._handed_on(event_record(message, **fields)):
            return
        if message in self.fields_printed_as_result:
            fields = {}
        shown = self.folded_events.get(message)
        if shown is not None and self._live and self.stream.isatty():
            self._folded = f"{message}: {shown}={_human_field(shown, fields.get(shown))}"
            self._write_line(self._live, transient=True)
        else:
            self._write_line(f"{message}  {_details(fields)}".rstrip())

    def summary(self, title: str, rows: dict[str, Any]) -> None:
        """A final summary: an aligned table on a terminal, one JSON record otherwise."""
        if self._handed_on(event_record(title, **rows)):
            return
        width = max(map(len, rows), default=0)
        lines = [title] + [f"  {key:<{width}}  {_human_field(key, value)}"
                           for key, value in rows.items()]
        self._write_line("\n".join(lines))

    def _handed_on(self, record: dict[str, Any]) -> bool:
        """Give `record` to the listeners, and print it as JSON in that mode; whether that
        is all (quiet or JSON: no text line follows)."""
        self._notify(record)
        if self.mode == "json":
            self._write_json(record)
        return self.mode in ("quiet", "json")

    @contextmanager
    def task(self, name: str, total: float | None = None, unit: str = "items") -> Iterator[Task]:
        """Track one long task; a summary line is written when it ends."""
        task = Task(self, name, total, unit)
        yield task
        task.finish()

    def notify(self, message: str, **fields: Any) -> None:
        """An event for the listeners only, never printed: figures too many for a log line
        (a checkpoint's bucket stats, for experiment tracking)."""
        self._notify(event_record(message, **fields))

    def _notify(self, record: dict[str, Any]) -> None:
        with self._lock:
            for listener in self.listeners:
                listener(record)

    def _write_json(self, record: dict[str, Any]) -> None:
        with self._lock:
            self.stream.write(without_url_credentials(json_line(record, time.time())) + "\n")
            self.stream.flush()

    def _write_line(self, line: str, *, transient: bool = False) -> None:
        line = without_url_credentials(line)  # paths are shown, a URL's password never
        with self._lock:
            if transient:  # overwrite the current terminal line
                self._live = line
                self.stream.write("\r\x1b[2K" + line
                                  + (f"  | {self._folded}" if self._folded else ""))
            else:
                self._live = self._folded = ""  # a line of its own ends the live line
                self.stream.write("\r\x1b[2K" + line + "\n" if self.stream.isatty()
                                  else line + "\n")
            self.stream.flush()


class ReporterLogHandler(logging.Handler):
    """Writes log records as Reporter events, so that warnings such as "waiting for storage"
    come out in the same style as everything else (JSON lines in pods).

    A record's structured details travel in `extra={"fields": {...}}`.
    """

    def __init__(self, reporter: Reporter) -> None:
        super().__init__()
        self.reporter = reporter

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.reporter.event(record.getMessage(), **getattr(record, "fields", {}))
        except Exception:  # logging must never break the work it reports on
            self.handleError(record)


def report_logs(reporter: Reporter) -> None:
    """Send the warnings of Tessera's loggers to `reporter` (replacing an earlier one)."""
    logger = logging.getLogger("tessera")
    for handler in list(logger.handlers):
        if isinstance(handler, ReporterLogHandler):
            logger.removeHandler(handler)
    logger.addHandler(ReporterLogHandler(reporter))


class Task:
    """Counts work done and reports rate and ETA at a bounded frequency."""

    def __init__(self, reporter: Reporter, name: str, total: float | None, unit: str) -> None:
        self.reporter = reporter
        self.name = name
        self.total = total
        self.unit = unit
        self.done = 0.0
        self.fields: dict[str, Any] = {}
        self.started = time.monotonic()
        self._last_report = 0.0
        self._first_done: tuple[float, float] | None = None  # (when, done) at the first unit

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    @property
    def rate(self) -> float:
        """Units a second over the whole task, start-up included (the final summary's)."""
        return self.done / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def pace(self) -> float:
        """Units a second since the first unit was done: what the live line and the ETA
        show. The start-up before it (workers, the first partitions) does not recur, and
        counting it made the ETA of a long run fall for minutes."""
        if self._first_done is None:
            return self.rate
        when, done = self._first_done
        seconds = time.monotonic() - when
        return (self.done - done) / seconds if seconds >= MIN_PACE_SECONDS else self.rate

    def eta(self) -> float | None:
        pace = self.pace
        if not self.total or pace <= 0:
            return None
        return max(self.total - self.done, 0) / pace

    def advance(self, amount: float = 1, **fields: Any) -> None:
        """Record `amount` more units done; `fields` (epoch, loss...) are shown with the rate."""
        self.done += amount
        if self._first_done is None and self.done > 0:
            self._first_done = (time.monotonic(), self.done)
        self.fields.update(fields)
        if self.reporter.listeners:
            self.reporter._notify(self._record())
        mode = self.reporter.mode
        interval = JSON_INTERVAL if mode == "json" else HUMAN_INTERVAL
        now = time.monotonic()
        if mode != "quiet" and now - self._last_report >= interval:
            self._last_report = now
            self._report()

    def _record(self) -> dict[str, Any]:
        return progress_record(self.name, self.done, self.total, round(self.pace, 1),
                               _round(self.eta()), **self.fields)

    def _report(self) -> None:
        if self.reporter.mode == "json":
            self.reporter._write_json(self._record())
            return
        share = f" {100 * self.done / self.total:5.1f}%" if self.total else ""
        eta = self.eta()
        extra = "".join(f"  {k}={_human_field(k, v)}" for k, v in self.fields.items())
        line = (f"{self.name}{share}  {_amount(self.done, self.unit)}  "
                f"{_amount(self.pace, self.unit)}/s"
                f"{f'  ETA {_duration(eta)}' if eta is not None else ''}{extra}")
        self.reporter._write_line(line, transient=self.reporter.stream.isatty())

    def finish(self) -> None:
        self.reporter.event(f"{self.name} done", **{self.unit: self.done,
                                                    "seconds": round(self.elapsed, 2),
                                                    f"{self.unit}_per_s": round(self.rate, 1),
                                                    **self.fields})


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _human(value: Any) -> str:
    if isinstance(value, (list, tuple)):  # `keys=lr,workers`, not a Python list's repr
        return ",".join(map(_human, value))
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e15:
            value = int(value)
        elif abs(value) >= 10_000 and abs(value) < 1e15:
            return f"{value:,.0f}"  # 11,360, never 1.136e+04
        else:
            return f"{value:.4g}"
    if isinstance(value, int) and abs(value) >= 10_000:
        return f"{value:,}"
    return str(value)


def _details(fields: dict[str, Any]) -> str:
    """An event's fields as people read them: `key=value`, a rate as `11.4k edges/s`."""
    return "  ".join(_human_field(key, value) if key.endswith(PER_SECOND) and is_number(value)
                     else f"{key}={_human_field(key, value)}" for key, value in fields.items())


# Keys that name a rate (`edges_per_s`) or a size (`bytes_received`, `bytes_per_swap`).
PER_SECOND = "_per_s"
BYTES = "bytes"


def _human_field(key: str, value: Any) -> str:
    """A field's value in readable units: its key says whether it is a rate or a size."""
    if not is_number(value):
        return _human(value)
    if key.endswith(PER_SECOND):
        return f"{_amount(value, key[:-len(PER_SECOND)])}/s"
    if key.startswith(BYTES) or key.endswith(BYTES):
        return _amount(value, BYTES)
    return _human(value)


_SCALES = (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3))


def _amount(value: float, unit: str) -> str:
    """A quantity in readable units: `4.4 MB` of bytes, `11.4k edges` of anything else
    (scientific notation such as `1.136e+04` is for machines, not people)."""
    prefix, scale = next(((prefix, scale) for prefix, scale in _SCALES if abs(value) >= scale),
                         ("", 1.0))
    if prefix:
        number = f"{value / scale:.1f}"
    else:
        number = f"{value:.0f}" if unit == BYTES else _human(round(value, 1))
    return f"{number} {prefix}B" if unit == BYTES else f"{number}{prefix} {unit}"


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
