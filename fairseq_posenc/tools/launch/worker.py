"""``python -m fairseq_posenc.tools.launch.worker TASK.pkl``: one task of the local launcher, in a
process of its own. The parent (:mod:`.local`) gave it its environment (the GPUs it sees,
its CPU threads), its log (stdout and stderr) and its end with the parent
(:mod:`.lifetime`); the worker holds its run's lock while it works (:func:`.lock.run`:
an earlier command's process still on the run is waited for first). A failure prints why
and exits 1."""

from __future__ import annotations

import pickle
import sys
import traceback
from pathlib import Path

from . import lock


def say(message: str) -> None:
    print(f"[launch] {message}", file=sys.stderr, flush=True)


def main(path: str) -> int:
    task = pickle.loads(Path(path).read_bytes())
    try:
        with lock.run(task.home, task.label, f"the local worker of {task.label}", say):
            task.call(*task.args)
    except SystemExit as e:  # the tools' own errors say what to do
        if e.code not in (None, 0):
            print(e.code, file=sys.stderr, flush=True)
            return 1
    except BaseException:  # noqa: BLE001  (anything else: its traceback, for the log)
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
