"""The name index read from Redis as docs/store.md describes it, independently of kiqbeat's
reader (redis/names.py): `kiqbeat:name_ranges` holds each bucket's lower bound, bucket BOUND
is `kiqbeat:name_ranges:BOUND`, and each member is NAME "\\0" FACETS."""

from __future__ import annotations

import redis

BUCKET_MOST = 120  # members a bucket holds at most (docs/store.md)


def indexed(client: redis.Redis, namespace: str = "") -> dict[bytes, bytes]:
    """Every indexed name -> its FACETS, failing unless every bucket lies within its bounds
    (byte order), holds at most BUCKET_MOST members, scores every member and bound 0 and is
    not empty (but the first), and Redis keeps it compact when its members allow."""
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
        members = client.zrange(key, 0, -1, withscores=True)
        assert bound == b"" or members, f"{key!r}: an empty bucket kept"
        assert len(members) <= BUCKET_MOST, f"{key!r}: {len(members)} members"
        if members and all(len(m) <= 64 for m, _ in members):
            assert client.object("encoding", key) in (b"listpack", b"ziplist"), key
        for member, score in members:
            assert score == 0, (key, member, score)
            name, zero, facets = member.partition(b"\0")
            assert zero, f"{member!r}: no NUL between the name and the facets"
            assert name >= bound and (k + 1 == len(names) or name < names[k + 1]), (
                f"{name!r} lies outside bucket {bound!r}")
            assert name not in out, f"{name!r} indexed twice"
            out[name] = facets
    client.close()
    return out


def facets(queue: str, enabled: bool, source: str = "") -> bytes:
    """The FACETS docs/store.md gives a definition with these fields."""
    return (b"1" if enabled else b"0") + queue.encode() + b"\0" + source.encode()
