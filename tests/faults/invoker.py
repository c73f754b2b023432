"""A child process that runs `kiqbeat run-once` many times in-process, racing its siblings.

Run as `python -m tests.faults.invoker SPEC` with SPEC a JSON document:
`{"config": FILE, "url": URL, "nows": [ISO or null, ...], "start_at": EPOCH_S,
"skew_s": SECONDS}`. It waits for the shared start instant (so siblings collide), optionally
shifts its own host clock by `skew_s` (time-machine, this process only), calls the real CLI
entry point once per `now` (null: no --now, the Redis clock decides), and prints
`{"rcs": [...], "seconds": [...]}` as its last stdout line. One process serves many
invocations because importing kiqbeat costs ~0.3 s; every invocation still builds its own
client and reads the config file, as a fresh process would.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import time
from datetime import timedelta


def main() -> None:
    """Run the invocations described by argv[1]; report exit codes and wall times."""
    spec = json.loads(sys.argv[1])
    from kiqbeat.entrypoints.cli import main as cli

    travel: contextlib.AbstractContextManager[object] = contextlib.nullcontext()
    if spec.get("skew_s"):
        import time_machine

        travel = time_machine.travel(timedelta(seconds=spec["skew_s"]), tick=True)
    delay_s = spec.get("start_at", 0) - time.time()
    if delay_s > 0:
        time.sleep(delay_s)
    rcs, seconds = [], []
    with travel:
        for now in spec["nows"]:
            argv = ["run-once", "--config", spec["config"], "--redis-url", spec["url"]]
            if now is not None:
                argv += ["--now", now]
            started = time.perf_counter()
            with contextlib.redirect_stdout(io.StringIO()):
                rcs.append(cli(argv))
            seconds.append(time.perf_counter() - started)
    print(json.dumps({"rcs": rcs, "seconds": seconds}), flush=True)


if __name__ == "__main__":
    main()
