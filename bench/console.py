"""The console's benchmarks (issue 19): prints figures (never asserts them).

Run: PYTHONPATH=lib:. .venv/bin/python bench/console.py [--schedules 1000000] [--requests 20]

One private redis-server (free loopback port, `save ""`) holding `--schedules` definitions
written as another language writes them (docs/store.md, pipelined), 10 % paused, 0.1 %
invalid (set aside by an invocation), 1 % with a recorded missed range; then a real
console (`create_app`, uvicorn in a thread, as `kiqbeat web` serves it):

1. The name index: how long the console's sweep takes to index every name (one pass), and
   the Redis memory it adds, in bytes per schedule (INFO used_memory before and after).
2. Page times, server side: each request's time measured inside the app (a middleware
   around the handler, so the client's own parsing is left out), median and max of
   `--requests` requests each: the schedules page by prefix (50 rows), by state (paused,
   set aside, with missed), the overview, a schedule's page, and the API's list.
3. SLOWLOG: every Redis command of the console (sweep included) logged (threshold 0),
   the longest one, in µs, and the count above 5 ms.

Figures on the 2-core machine, shared: run `redis-benchmark` beside it for a ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Awaitable, Callable

import httpx
import redis
from starlette.requests import Request
from starlette.responses import Response
from tests.web.conftest import serve

from kiqbeat.demo.server import RedisServer
from kiqbeat.engine import Engine
from kiqbeat.redis import keys
from kiqbeat.settings import Settings
from kiqbeat.web.app import create_app
from kiqbeat.web.auth import Auth, Token

TOKEN = "bench-Jt5Xq2Wn8Rc4Lp7Vz1Hk9Gd3"  # weak tokens are refused (web.auth)
ZONES = ("UTC", "Europe/Paris", "America/New_York", "Asia/Kolkata")


def name_of(n: int) -> str:
    return f"tenant-{n // 1000:04}/job-{n % 1000:03}"


def load(client: redis.Redis, count: int) -> None:
    started = time.perf_counter()
    for first in range(0, count, 5000):
        chunk = range(first, min(first + 5000, count))
        pipe = client.pipeline(transaction=False)
        pipe.hset(keys.definitions(""), mapping={name_of(n): json.dumps({
            "cron": f"{n % 60} {n % 24} * * *", "tz": ZONES[n % 4], "class": "ReportWorker",
            "args": [n], "queue": ("reports", "mail", "low")[n % 3],
            **({"enabled": False} if n % 10 == 7 else {})}) for n in chunk})
        pipe.zadd(keys.due(""), {name_of(n): 1 for n in chunk})
        rejected = {name_of(n): "schedule: field 'cron': bench" for n in chunk if n % 1000 == 999}
        if rejected:
            pipe.hset(keys.rejected(""), mapping=rejected)
        missed = {name_of(n): "1700000000000 1700003600000 window" for n in chunk
                  if n % 100 == 13}
        pipe.hset(keys.missed(""), mapping=missed)
        pipe.execute()
    print(f"loaded {count:,} definitions in {time.perf_counter() - started:.1f} s")


def timed(times: list[float]) -> Callable[[Request, Callable[[Request], Awaitable[Response]]],
                                          Awaitable[Response]]:
    async def middleware(request: Request, call_next: Callable[[Request], Awaitable[Response]]
                         ) -> Response:
        started = time.perf_counter()
        response = await call_next(request)
        body = b""
        async for chunk in response.body_iterator:  # type: ignore[attr-defined]
            body += chunk if isinstance(chunk, bytes) else chunk.encode()
        times.append(time.perf_counter() - started)
        return Response(body, status_code=response.status_code, headers=dict(response.headers))
    return middleware


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--schedules", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=20)
    args = parser.parse_args()
    with RedisServer() as server:
        client = redis.Redis.from_url(server.url)
        load(client, args.schedules)
        before = int(client.info("memory")["used_memory"])
        engine = Engine(Settings(redis_url=server.url))
        times: list[float] = []
        app = create_app(engine, Auth([Token("bench", "operator", TOKEN)]))
        from starlette.middleware.base import BaseHTTPMiddleware
        app.add_middleware(BaseHTTPMiddleware, dispatch=timed(times))
        client.config_set("slowlog-log-slower-than", 0)
        client.config_set("slowlog-max-len", 1_000_000)
        client.slowlog_reset()
        started = time.perf_counter()
        uvicorn_server, thread, url = serve(app)
        while not client.exists(keys.names_built("")):
            time.sleep(0.5)
        swept = time.perf_counter() - started
        added = int(client.info("memory")["used_memory"]) - before
        index_bytes = sum(int(client.memory_usage(key, samples=0) or 0) for key in
                          client.scan_iter(match=keys.name_ranges("") + "*", count=10_000))
        client.slowlog_reset()  # the console's commands from here on, not the bench's
        print(f"name index: one sweep pass indexed {args.schedules:,} names in {swept:.1f} s; "
              f"Redis memory added: {added / args.schedules:.1f} bytes per schedule "
              f"(MEMORY USAGE of its buckets: {index_bytes / args.schedules:.1f})")
        middle = name_of(args.schedules // 2)
        pages = {
            "schedules by prefix (50 rows)": f"/schedules?prefix={middle[:12]}",
            "schedules by state=paused": "/schedules?state=paused",
            "schedules by state=set_aside": "/schedules?state=set_aside",
            "schedules by state=missed": "/schedules?state=missed",
            "schedules by queue=low": "/schedules?queue=low",
            "overview": "/",
            "a schedule's page": f"/schedule?name={middle.replace('/', '%2F')}",
            "API list by prefix (50)": f"/api/v1/schedules?prefix={middle[:12]}&limit=50",
            "API status": "/api/v1/status",
        }
        with httpx.Client(base_url=url, timeout=60,
                          headers={"authorization": f"Bearer {TOKEN}"}) as http:
            login = http.get("/login")
            csrf = login.text.split('name="csrf" value="')[1].split('"')[0]
            http.post("/login", data={"token": TOKEN, "csrf": csrf})
            for label, path in pages.items():
                times.clear()
                rows = 0
                for _ in range(args.requests):
                    answer = http.get(path)
                    assert answer.status_code == 200, (path, answer.status_code)
                    rows = answer.text.count("<tr>") if "/api/" not in path else len(
                        answer.json().get("items", []))
                print(f"{label:32} median {statistics.median(times) * 1000:7.1f} ms, "
                      f"max {max(times) * 1000:7.1f} ms ({rows} rows)")
        entries = [e for e in client.slowlog_get(1_000_000)  # the bench's own left out
                   if not str(e["command"]).lstrip("b'").upper().startswith("SLOWLOG")]
        longest = max(entries, key=lambda e: e["duration"])
        over = sum(1 for e in entries if e["duration"] > 5000)
        command = longest["command"]
        shown = (command.decode(errors="replace") if isinstance(command, bytes)
                 else str(command))[:80]
        print(f"SLOWLOG: {len(entries):,} console commands; longest {longest['duration']} µs "
              f"({shown}); {over} over 5 ms")
        for entry in sorted(entries, key=lambda e: -e["duration"])[:5]:
            command = entry["command"]
            text = (command.decode(errors="replace") if isinstance(command, bytes)
                    else str(command))
            print(f"  {entry['duration']:6} µs  {text[:60]} ({len(text.split())} words)")
        uvicorn_server.should_exit = True
        thread.join(timeout=10)
        engine.close()


if __name__ == "__main__":
    main()
