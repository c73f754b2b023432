"""The name index read from Redis as docs/store.md describes it, independently of kiqbeat's
reader (redis/names.py): `kiqbeat:name_ranges` holds each bucket's lower bound, and bucket
BOUND, the hash `kiqbeat:name_ranges:BOUND`, each name from BOUND to the next -> FACETS."""

from __future__ import annotations

import redis

BUCKET_MOST = 120  # members a bucket holds at most (docs/store.md)


def indexed(client: redis.Redis, namespace: str = "") -> dict[bytes, bytes]:
    """Every indexed name -> its FACETS, failing unless every bucket lies within its bounds
    (byte order), holds at most BUCKET_MOST names and is not empty (but the first), every
    bound is scored 0, and Redis keeps each bucket compact when its names and facets allow."""
    given = client.connection_pool.connection_kwargs
    client = redis.Redis(**{k: given.get(k) for k in ("host", "port", "db", "username",
                                                      "password")})  # names as bytes
    ranges = f"{namespace}kiqbeat:name_ranges".encode()
    bounds = client.zrange(ranges, 0, -1, withscores=True)
    assert all(score == 0 for _, score in bounds), bounds
    names = [bound for bound, _ in bounds]
    assert names == sorted(names), "the bounds are not in byte order"
    out: dict[bytes, bytes] = {}
    for k, bound in enumerate(names):
        key = ranges + b":" + bound
        bucket = client.hgetall(key)
        assert bound == b"" or bucket, f"{key!r}: an empty bucket kept"
        assert len(bucket) <= BUCKET_MOST, f"{key!r}: {len(bucket)} names"
        if bucket and all(len(n) <= 64 and len(f) <= 64 for n, f in bucket.items()):
            assert client.object("encoding", key) in (b"listpack", b"ziplist"), key
        for name, facets in bucket.items():
            assert name >= bound and (k + 1 == len(names) or name < names[k + 1]), (
                f"{name!r} lies outside bucket {bound!r}")
            assert name not in out, f"{name!r} indexed twice"
            out[name] = facets
    client.close()
    return out


def facets(queue: str, enabled: bool, source: str = "") -> bytes:
    """The FACETS docs/store.md gives a definition with these fields."""
    return (b"1" if enabled else b"0") + queue.encode() + b"\0" + source.encode()
