"""The launchers' processes end with the command, and a run is never worked on twice at
once (fairseq_posenc.tools.launch.lifetime and the run locks of .lock), with real processes:
a command that dispatches two stand-in runs (each a child process that sleeps, started as
fairseq-train is), killed in each way a user or a batch system kills it. The references are
the processes that live afterwards, read from /proc (tests/support/processes.py), and, for
the children, a sibling started without the request, which lives on. The same with
posenc-compare and fairseq-train: tests/tools/test_compare_launch.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from fairseq_posenc.tools.launch import lock
from tests.support.cli_utils import subprocess_env
from tests.support.processes import alive, at_default, live, wait_for, working_on

ROOT = Path(__file__).resolve().parents[2]
linux = pytest.mark.skipif(not sys.platform.startswith("linux"),
                           reason="PR_SET_PDEATHSIG and /proc are Linux's")

#: A command: two stand-in runs in OUT/a and OUT/b, N at once or in turn (then its own loop
#: runs them, as posenc-compare's does); "done" once they have ended.
COMMAND = """
import sys, time
from pathlib import Path
from fairseq_posenc.tools.launch import dispatch
from fairseq_posenc.tools.launch.launcher_flags import Launcher
from fairseq_posenc.tools.launch.tasks import Task
from tests.support.processes import sleeping_run

out, parallel, seconds = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
tasks = [Task(n, out / n, sleeping_run, (out / n, seconds)) for n in ("a", "b")]

def in_turn(todo):
    for task in todo:
        sleeping_run(*task.args)

dispatch.dispatch(tasks, [False, False], Launcher("local", parallel, 0), tool="tool",
                  folder=out, say=lambda m: print(m, flush=True), in_turn=in_turn)
print("done", flush=True)
"""


#: The signals the tests send the command (SIGKILL cannot be ignored).
SENT = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


def start(out: Path, parallel: int, seconds: float = 120) -> subprocess.Popen:
    """The command in a process group (a session) of its own, as a terminal starts it: with
    the signals the tests send at their default even when the tests run as a background job
    (SIGINT ignored) or under ``nohup`` (SIGHUP ignored), which the command would keep
    ignored, as it should (:func:`tests.support.processes.at_default`)."""
    return subprocess.Popen([sys.executable, "-c", COMMAND, str(out), str(parallel),
                             str(seconds)], cwd=ROOT, env=subprocess_env(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, preexec_fn=at_default(*SENT))


@pytest.fixture
def leftovers(tmp_path):
    """Whatever a failed test leaves working on its directory is killed (by its pid)."""
    yield
    (tmp_path / "stop").touch()
    for proc in working_on(tmp_path):
        os.kill(proc.pid, signal.SIGKILL)


def children(run: Path) -> list[int]:
    """The stand-in trainings of ``run``: the sleeping children (not the workers)."""
    return [p.pid for p in working_on(run) if "time.sleep" in " ".join(p.args)]


@linux
def test_a_child_that_asks_to_die_with_its_parent_does():
    parent = subprocess.Popen([sys.executable, "-c", """
import subprocess, sys, time
from fairseq_posenc.tools.launch.lifetime import die_with_parent
sleep = [sys.executable, "-c", "import time; time.sleep(120)"]
tied = subprocess.Popen(sleep, preexec_fn=die_with_parent())
free = subprocess.Popen(sleep)
print(tied.pid, free.pid, flush=True)
time.sleep(120)
"""], cwd=ROOT, env=subprocess_env(), stdout=subprocess.PIPE, text=True)
    tied, free = map(int, parent.stdout.readline().split())
    try:
        parent.kill()
        parent.wait()
        seconds = wait_for("the tied child's end", lambda: not alive(tied), 5)
        assert alive(free)  # the reference: without the request, a child outlives its parent
        print(f"\nthe tied child ended {seconds:.2f} s after its parent's SIGKILL")
    finally:
        for pid in (tied, free):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


@linux
@pytest.mark.parametrize("parallel, how", [
    *[(2, how) for how in ("SIGKILL to the group", "SIGKILL to the command")],
    # in turn, the command's training is in its group: only a kill of the command alone
    # leaves it without its parent
    (1, "SIGKILL to the command"),
    *[(n, how) for n in (2, 1) for how in ("SIGTERM to the command", "SIGHUP to the command",
                                           "SIGINT to the group (Ctrl-C)")]])
def test_a_killed_command_leaves_no_run_behind(tmp_path, leftovers, parallel, how):
    out = tmp_path / "out"
    command = start(out, parallel)
    runs = [out / "a", out / "b"] if parallel == 2 else [out / "a"]
    wait_for("the runs' trainings", lambda: all(children(r) for r in runs), 20)
    before = {r.name: len(working_on(r)) for r in runs}
    # a worker and its training each, or the command's one training at a time
    assert before == ({"a": 2, "b": 2} if parallel == 2 else {"a": 1})
    sig = getattr(signal, how.split()[0])
    if "group" in how:
        os.killpg(command.pid, sig)
    else:
        command.send_signal(sig)
    command.wait(timeout=20)
    seconds = wait_for("no process left", lambda: not any(working_on(out / n) for n in "ab"),
                       5)
    if how.startswith(("SIGTERM", "SIGHUP")):  # stopped cleanly, with the shell's status
        assert command.returncode == 128 + sig
        assert f"tool: stopped by {sig.name}; what it started has stopped too" in \
            command.stderr.read()
    else:
        assert command.returncode != 0
    assert lock.busy(out / "a") is None  # the next command finds the run free
    print(f"\n{how}, {parallel} at once: {before} process(es) before, none {seconds:.2f} s "
          "after")


def test_a_run_lock_lives_in_the_child_given_it_and_is_waited_for(tmp_path, leftovers):
    run, stop = tmp_path / "run", tmp_path / "stop"
    subprocess.run([sys.executable, "-c", f"""
import subprocess, sys
from pathlib import Path
from fairseq_posenc.tools.launch import lock
run = Path({str(run)!r})
with lock.run(run, "r", "the parent", print):
    child = subprocess.Popen([sys.executable, "-c", "import os, time\\n"
                              "while not os.path.exists({str(stop)!r}): time.sleep(0.05)"],
                             pass_fds=lock.held_for(run / "train.log"),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    lock.note(run / "train.log", child.pid, "the child")
print(child.pid)
"""], cwd=ROOT, env=subprocess_env(), check=True, capture_output=True, text=True,
                   timeout=30)
    # the parent has ended, its child (as a fairseq-train left behind) holds the run
    child = [p.pid for p in live() if str(stop) in " ".join(p.args)]
    assert len(child) == 1
    assert lock.busy(run) == f"pid {child[0]} (the child)"
    said: list[str] = []

    def wait() -> None:
        with lock.run(run, "r", "the waiter", said.append):
            pass

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    wait_for("the waiting line", lambda: said, 5)
    assert said[0].startswith(f"r: waiting for pid {child[0]} (the child) to end: it still "
                              f"works on {run}")
    waiter.join(0.5)
    assert waiter.is_alive()  # still waiting
    stop.touch()
    waiter.join(5)
    assert not waiter.is_alive() and said[-1].startswith(f"r: pid {child[0]} (the child) "
                                                         "ended after 0m")
    assert "the waiter" in (run / lock.NAME).read_text()


@linux
@pytest.mark.parametrize("parallel", [2, 1])
def test_a_command_waits_for_a_run_still_worked_on(tmp_path, leftovers, parallel):
    out, stop = tmp_path / "out", tmp_path / "stop"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys; from pathlib import Path; from tests.support.processes import hold\n"
        "hold(Path(sys.argv[1]), Path(sys.argv[2]))"), str(out / "a"), str(stop)],
        cwd=ROOT, env=subprocess_env(), stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip().endswith("held")
    command = start(out, parallel, seconds=0.5)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(command.stdout), daemon=True)
    reader.start()
    # the worker says it in its log, the command that runs the runs in turn on its output
    said = (lambda: (out / "a" / "job.log").read_text()) if parallel == 2 else (
        lambda: "".join(lines))
    wait_for("the waiting line", lambda: (out / "a" / "job.log").exists() and "waiting for pid"
             in said() if parallel == 2 else "waiting for pid" in said(), 10)
    assert lines[0].startswith(f"a: still worked on by pid {holder.pid} (the test's holder), "
                               "not by this command: waited for, then continued"), lines
    assert f"a: waiting for pid {holder.pid} (the test's holder) to end" in said()
    if parallel == 2:  # the other run goes on meanwhile
        wait_for("b's end", lambda: (out / "b" / "train.log").exists() and not children(
            out / "b"), 10)
    assert not children(out / "a")  # nothing trains a while it is held
    stop.touch()
    holder.wait(5)
    command.wait(20)
    reader.join(5)
    assert command.returncode == 0 and lines[-1].strip() == "done", (lines,
                                                                     command.stderr.read())
    assert f"a: pid {holder.pid} (the test's holder) ended after 0m" in said()
    assert (out / "a" / "train.log").exists()  # then a ran
