"""A child process that runs `kiqbeat run-once` many times in-process, racing its siblings.

Run as `python -m tests.faults.invoker SPEC` with SPEC a JSON document:
`{"config": FILE or null, "url": URL, "nows": [ISO or null, ...], "start_at": EPOCH_S,
"skew_s": SECONDS, "shard": "I/N" or null}`. It waits for the shared start instant (so
siblings collide), optionally shifts its own host clock by `skew_s` (time-machine, this
process only), calls the real CLI entry point once per `now` (null: no --now, the Redis
clock decides) with `--shard` when given and without `--config` when the config is null
(the store alone), and prints `{"rcs": [...], "seconds": [...], "pushed": {NAME: N}}` as its
last stdout line, `pushed` counting the jobs its invocations reported pushing per schedule.
One process serves many invocations because importing kiqbeat costs ~0.3 s; every
invocation still builds its own client and reads the config file, as a fresh process would.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import time
from collections import Counter
from datetime import timedelta


def main() -> None:
    """Run the invocations described by argv[1]; report exit codes, wall times and pushes."""
    spec = json.loads(sys.argv[1])
    from kiqbeat.entrypoints.cli import main as cli

    travel: contextlib.AbstractContextManager[object] = contextlib.nullcontext()
    if spec.get("skew_s"):
        import time_machine

        travel = time_machine.travel(timedelta(seconds=spec["skew_s"]), tick=True)
    base = ["run-once", "--json", "--jobs", "--redis-url", spec["url"]]
    if spec.get("config"):
        base += ["--config", spec["config"]]
    if spec.get("shard"):
        base += ["--shard", spec["shard"]]
    delay_s = spec.get("start_at", 0) - time.time()
    if delay_s > 0:
        time.sleep(delay_s)
    rcs, seconds = [], []
    pushed: Counter[str] = Counter()
    with travel:
        for now in spec["nows"]:
            argv = base + (["--now", now] if now is not None else [])
            out = io.StringIO()
            started = time.perf_counter()
            with contextlib.redirect_stdout(out):
                rcs.append(cli(argv))
            seconds.append(time.perf_counter() - started)
            if rcs[-1] == 0:
                pushed.update(job["schedule"] for job in json.loads(out.getvalue())["jobs"])
    print(json.dumps({"rcs": rcs, "seconds": seconds, "pushed": pushed}), flush=True)


if __name__ == "__main__":
    main()
