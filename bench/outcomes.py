"""The fold's cost (issue 27): prints figures beside a same-run baseline (never asserts them).

Run: .venv/bin/python bench/outcomes.py [--schedules 10000] [--outcomes 10000]

One private redis-server; `--schedules` definitions stored (plain HSET, as a writer would);
`--outcomes` worker-protocol entries (`succeeded`, one tick each, spread over the
schedules) LPUSHed as workers would; then `fold_outcomes` as an invocation calls it. Figures:
the fold's wall time, its script calls and the longest one (SLOWLOG), entries per second;
beside them, the same run's time to LPUSH the entries (pipelined) and `redis-benchmark -P 64
LPUSH` on the same server (µs a command), for scale: this machine's speed drifts.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import time

import redis

from kiqbeat.core.limits import FOLD_SLICE, FOLD_SLICES
from kiqbeat.core.payload import jid_ms
from kiqbeat.demo.server import RedisServer
from kiqbeat.outcomes.records import Folded, fold_outcomes
from kiqbeat.redis import keys

T0 = 1_790_000_040_000


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--schedules", type=int, default=10_000)
    parser.add_argument("--outcomes", type=int, default=10_000)
    args = parser.parse_args(argv)
    with RedisServer() as server:
        admin = redis.Redis.from_url(server.url)
        before = lpush_us(server.port)
        names = [f"schedule-{i:07d}" for i in range(args.schedules)]
        pipe = admin.pipeline(transaction=False)
        for name in names:
            pipe.hset(keys.definitions(""), name, '{"class":"W","cron":"* * * * *"}')
        pipe.execute()
        for rnd in range(2):  # a cold fold (records created), then a warm one (updated)
            entries = []
            for k in range(args.outcomes):
                name = names[k % args.schedules]
                tick = T0 + (rnd * 1000 + k // args.schedules) * 60_000
                entries.append(json.dumps({"s": name, "t": tick, "j": jid_ms(name, tick),
                                           "e": "succeeded", "at": tick + 900, "a": 1,
                                           "d": 1200 + k % 700}, separators=(",", ":")))
            began = time.perf_counter()
            pipe = admin.pipeline(transaction=False)
            for k in range(0, len(entries), 1000):
                pipe.lpush(keys.outcomes_inbox(""), *entries[k:k + 1000])
            pipe.execute()
            pushed_s = time.perf_counter() - began
            admin.slowlog_reset()
            admin.config_set("slowlog-log-slower-than", 0)
            folded = Folded()
            began = time.perf_counter()
            changed = fold_outcomes(admin, history=10, folded=folded)
            fold_s = time.perf_counter() - began
            slow = [e for e in admin.slowlog_get(10_000)
                    if e["command"].startswith(b"EVALSHA")]
            longest = max((e["duration"] for e in slow), default=0) / 1000
            admin.config_set("slowlog-log-slower-than", 10_000)
            print(f"{'cold' if rnd == 0 else 'warm'}: {folded.taken:,} entries for "
                  f"{args.schedules:,} schedules folded in {fold_s * 1000:,.0f} ms "
                  f"({folded.taken / fold_s:,.0f}/s; {folded.calls} calls of up to "
                  f"{FOLD_SLICE} (at most {FOLD_SLICES} an invocation), longest "
                  f"{longest:.1f} ms in Redis; {len(changed):,} health changes; "
                  f"{folded.left:,} left) | baseline: LPUSH of the same entries, pipelined: "
                  f"{pushed_s * 1000:,.0f} ms; {fold_s * 1e6 / max(1, folded.taken):,.0f} µs "
                  "an entry")
        after = lpush_us(server.port)
        print(f"baseline redis-benchmark -P 64 LPUSH: {before or 0:.2f} µs before, "
              f"{after or 0:.2f} µs after")


def lpush_us(port: int) -> float | None:
    """µs per LPUSH of `redis-benchmark -P 64` against the private server (None: absent)."""
    program = shutil.which("redis-benchmark")
    if program is None:
        return None
    done = subprocess.run([program, "-p", str(port), "-q", "-n", "200000", "-P", "64", "-t",
                           "lpush", "--csv"], capture_output=True, text=True, check=False)
    for line in done.stdout.splitlines():
        if line.startswith('"LPUSH"'):
            return 1e6 / float(line.split(",")[1].strip('"'))
    return None


if __name__ == "__main__":
    main()
