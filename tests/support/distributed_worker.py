"""One rank of several ``fairseq-train`` runs in a row, for tests/integration/test_binaries.py.

``python distributed_worker.py JOBS.json RANK`` where the file holds ``{"world_size": N,
"port": P, "jobs": [[name, [fairseq-train args...]], ...]}``. Each job is fairseq-train's
own ``main`` under ``distributed_utils.call_main`` with the CPU multi-process flags of
docs/fairseq-notes.md, exactly what the console script does, but the interpreter, fairseq's
import and the process group are paid for once instead of once per job (fairseq
reuses an initialized process group). Every job's output starts with ``=== JOB name``.
"""

from __future__ import annotations

import json
import os
import sys
import traceback


def main() -> None:
    spec = json.loads(open(sys.argv[1], encoding="utf-8").read())
    rank = int(sys.argv[2])
    from fairseq import distributed_utils, options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq_cli import train

    for name, argv in spec["jobs"]:
        print(f"=== JOB {name}", flush=True)
        argv = argv + [
            "--distributed-world-size", str(spec["world_size"]),
            "--distributed-rank", str(rank),
            "--distributed-init-method", f"tcp://localhost:{spec['port']}",
            "--distributed-no-spawn", "--distributed-backend", "gloo",
            "--ddp-backend", "legacy_ddp", "--device-id", "0", "--cpu",
        ]
        try:
            args = options.parse_args_and_arch(options.get_training_parser(), argv)
            distributed_utils.call_main(convert_namespace_to_omegaconf(args), train.main)
        except BaseException:  # the other ranks would wait forever in a collective
            traceback.print_exc()
            sys.stdout.flush()
            os._exit(1)
        print(f"=== DONE {name}", flush=True)


if __name__ == "__main__":
    main()
