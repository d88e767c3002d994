"""What an example run shows while it trains: log lines (stdout and log.txt) and the tqdm
progress bar (stderr) with the latest loss and throughput."""

import os
import sys
import time

from tqdm import tqdm


class Log:
    """Lines for stdout (written around the progress bar) and for log.txt; silent off the lead rank."""

    def __init__(self, path):
        self.file = None
        if path:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            self.file = open(path, "w")
        self.enabled = path is not None

    def __call__(self, line):
        if not self.enabled:
            return
        if sys.stderr.isatty():  # around the bar; into a log file the bar is not redrawn
            tqdm.write(line, file=sys.stdout)
        else:
            print(line)
        sys.stdout.flush()
        self.file.write(line + "\n")
        self.file.flush()

    def close(self):
        if self.file:
            self.file.close()


class _OneLinePerRedraw:
    """tqdm's stream outside a terminal: each redraw becomes a line of its own (a log file gets
    no carriage returns, and stdout lines are never glued to a half-drawn bar)."""

    def __init__(self, stream):
        self.stream = stream
        self.encoding = getattr(stream, "encoding", None)  # lets tqdm draw its unicode bar

    def write(self, text):
        text = text.replace("\r", "").strip()
        if text:
            self.stream.write(text + "\n")

    def flush(self):
        self.stream.flush()


class ProgressBar:
    """A tqdm bar over the steps with the latest loss and items/s. Reading the loss waits for the
    device, so it is read only when the bar redraws: every 0.5 s in a terminal; elsewhere every
    30 s and once at the end."""

    def __init__(self, example, steps):
        self.unit, self.items = example.unit, example.items_per_step
        self.terminal = sys.stderr.isatty()
        interval = 0.5 if self.terminal else 30.0
        stream = sys.stderr if self.terminal else _OneLinePerRedraw(sys.stderr)
        self.bar = tqdm(total=steps, desc=example.name, unit="step", file=stream, dynamic_ncols=True,
                        mininterval=interval, maxinterval=max(interval, 10.0), delay=0 if self.terminal else interval,
                        leave=self.terminal)
        self.shown_at, self.shown_step = time.perf_counter(), -1

    def update(self, step, loss):
        now = time.perf_counter()
        if now - self.shown_at >= self.bar.mininterval or step == self.bar.total - 1:
            value = loss.item()
            now = time.perf_counter()
            rate = (step - self.shown_step) * self.items / max(now - self.shown_at, 1e-9)
            self.bar.set_postfix_str(f"loss {value:.4f}, {rate:,.0f} {self.unit}/s", refresh=False)
            self.shown_at, self.shown_step = now, step
        self.bar.update(1)

    def restart_rate(self, step):
        """Counts items/s from here (called after the warm-up steps, once the device is idle)."""
        self.shown_at, self.shown_step = time.perf_counter(), step

    def close(self):
        final = str(self.bar)
        self.bar.close()
        if not self.terminal:
            sys.stderr.write(final + "\n")
