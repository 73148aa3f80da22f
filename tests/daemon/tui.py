#!/usr/bin/env python3
"""A small deterministic full-screen TUI for the terminal tests (tests/daemon/terminal.rs).

It runs on the alternate screen and redraws all of it in one write whenever something
changes: its first argument (the conversation it was started on), its size, and the
keys typed so far. `F` writes a flood of lines first. `q` or Ctrl-D quits (leaving the alternate screen); with TUI_HANG=1 it
never quits and ignores SIGHUP and SIGTERM, as a hung TUI would. It starts a child that
sleeps, which must not outlive it. Nothing here sleeps to synchronise: it reacts to keys
and to SIGWINCH only.
"""

import fcntl
import os
import select
import signal
import struct
import subprocess
import sys
import termios
import tty

SESSION = sys.argv[1] if len(sys.argv) > 1 else "-"
HANG = os.environ.get("TUI_HANG") == "1"


def size():
    packed = fcntl.ioctl(sys.stdout.fileno(), termios.TIOCGWINSZ, b"\0" * 8)
    rows, cols, _, _ = struct.unpack("HHHH", packed)
    return cols, rows


def write(text):
    os.write(sys.stdout.fileno(), text.encode())


def draw(typed):
    cols, rows = size()
    write(
        "\x1b[H\x1b[2J"
        f"\x1b[1mTUI {SESSION}\x1b[0m\r\n"
        f"size {cols}x{rows}\r\n"
        f"\x1b[7mkeys {typed}\x1b[0m\r\n"
    )


def main():
    if HANG:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = subprocess.Popen(["sleep", "1000"])
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGWINCH, lambda *_: None)
    stdin = sys.stdin.fileno()
    tty.setraw(stdin)
    write("\x1b[?1049h")
    typed = ""
    draw(typed)
    while True:
        ready, _, _ = select.select([stdin, wake_r], [], [])
        if wake_r in ready:
            os.read(wake_r, 64)
            draw(typed)
        if stdin in ready:
            keys = os.read(stdin, 1024).decode(errors="replace")
            if not keys:
                break
            for key in keys:
                if key in ("q", "\x04") and not HANG:
                    write("\x1b[?1049l")
                    child.kill()
                    child.wait()
                    return
                if key == "F":
                    # A flood of output, for a client that does not read.
                    for line in range(int(os.environ.get("TUI_FLOOD_LINES", "20000"))):
                        write(f"line {line}\r\n")
                    typed += "flooded"
                elif key.isprintable():
                    typed += key
            draw(typed)


main()
