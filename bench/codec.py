"""One codec? (issue 28, item 3): kiqbeat's hand codec beside msgpack, inside Redis.

Run: .venv/bin/python bench/codec.py [--groups 50] [--rounds 400] [--repeat 5]

Runs bench/codec.lua on a private redis-server `--repeat` times and prints its figures
(microseconds inside Redis: reading a push request's groups of one 330-byte job each with
struct.unpack as frames.lua does, and with cmsgpack.unpack; reading a progress record's
head as progress.lua does, and unpacking / packing the same record as msgpack), then
redis-benchmark's pipelined LPUSH of 330 bytes measured in the same run, as the unit the
issue's targets use. Figures, never assertions.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import redis
from bench import redis_benchmark_lpush  # bench/bench.py, beside this file

from kiqbeat.demo.server import RedisServer

LUA = (Path(__file__).resolve().parent / "codec.lua").read_text()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--groups", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with RedisServer() as server:
        client = redis.Redis.from_url(server.url, decode_responses=True)
        for _ in range(args.repeat):
            print("; ".join(client.eval(LUA, 0, args.groups, args.rounds)))
        lpush = redis_benchmark_lpush(server.port, 200_000)
        print(f"redis-benchmark -P 64 LPUSH of 330 bytes, same run: {1e6 / lpush:.2f} us")
        client.close()


if __name__ == "__main__":
    main()
