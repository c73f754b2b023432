"""Redis URLs: read strictly, named without secrets, TLS verified unless deliberately not."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiqbeat.errors import ConfigError
from kiqbeat.redis.connection import connect
from kiqbeat.redis.urls import UNPARSABLE, describe, parse_url

MARK = "Zq9MARKzq"


@pytest.mark.parametrize(("url", "where"), [
    ("redis://user:p%40ss@h:6379/0", "h:6379/0"),
    ("rediss://token@h", "h:6379/0"),
    ("redis://h?password=s3cret&db=2", "h:6379/2"),
    ("redis+sentinel://u:pw@h1:1,h2:2/svc", "sentinel h1:1,h2:2/svc/0"),
    ("redis+sentinel://h1:1/svc/4", "sentinel h1:1/svc/4"),
    ("unix://kb:pw@/run/redis.sock?db=3", "unix:/run/redis.sock/3"),
    ("redis://[::1]:7000/1", "::1:7000/1"),
])
def test_a_url_is_named_by_host_port_and_db_only(url: str, where: str) -> None:
    assert describe(url) == where


@pytest.mark.parametrize("url", [
    f"redis://kb:{MARK}?X@host",       # a ? in the password: the rest looked like a query
    f"kb:{MARK}@host",                 # no scheme
    f"redis:/kb:{MARK}@host",          # one slash
    f"redis:kb:{MARK}@host",           # no slash
    f"redis://kb:{MARK[:4]}@{MARK[4:]}/ET@host",  # an @ and a / in the password
    f"redis://kb:{MARK}#frag@host",
    f"redis://kb:{MARK}@host:port/0",  # not a port
    f"redis://kb:{MARK}@host:0/0",
    f"redis://kb:{MARK}@h1:1,h2:2/0",  # several hosts without Sentinel
    f"http://kb:{MARK}@host",
    f"redis://kb@host/0?pasword={MARK}",  # a typo: not silently ignored
])
def test_an_unparsable_url_is_refused_without_any_part_of_it(url: str) -> None:
    assert describe(url) == UNPARSABLE
    with pytest.raises(ConfigError) as caught:
        connect(url)
    text = str(caught.value)
    assert text.startswith(UNPARSABLE)
    assert MARK not in text and MARK[:4] not in text and MARK[4:] not in text


def test_an_unparsable_url_is_refused_before_any_dns_lookup(monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    import socket

    looked_up: list[object] = []
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: looked_up.append(a) or [])
    with pytest.raises(ConfigError):
        connect("redis://kb:SE@CR/ET@host").ping()
    assert looked_up == []


@settings(max_examples=300, deadline=None)
@given(password=st.text(alphabet=st.sampled_from("ab@/?#:%&=[] .\\!$\u00e9"), min_size=1,
                        max_size=12),
       shape=st.sampled_from(["redis://kb:{p}@h:1/0", "rediss://{p}@h", "unix://kb:{p}@/s.sock",
                              "redis+sentinel://kb:{p}@h:1/svc", "kb:{p}@h", "redis:{p}@h",
                              "redis://h:1/0?password={p}"]))
def test_whatever_the_password_holds_no_message_shows_it(password: str, shape: str) -> None:
    secret = f"{MARK}{password}"
    url = shape.format(p=secret)
    shown = describe(url)
    try:
        parse_url(url)
    except ConfigError as exc:
        shown += str(exc)
    assert MARK not in shown


def test_settings_reach_the_client_and_tls_is_verified_with_the_host_name_checked(
    tmp_path: Path,
) -> None:
    client = connect("unix:///tmp/kiqbeat-none.sock?db=3")
    assert client.connection_pool.connection_kwargs["db"] == 3
    ca = tmp_path / "ca.pem"  # it must exist: connect checks it before any connection
    ca.write_text("")
    kwargs = connect(f"rediss://h:6380/0?ssl_ca_certs={ca}").connection_pool.connection_kwargs
    assert kwargs["ssl_ca_certs"] == str(ca)
    assert kwargs["ssl_cert_reqs"] == "required" and kwargs["ssl_check_hostname"] is True


@pytest.mark.parametrize("query", ["ssl_cert_reqs=none", "ssl_cert_reqs=optional",
                                   "ssl_check_hostname=false"])
def test_turning_tls_verification_off_needs_the_insecure_setting(query: str) -> None:
    url = f"rediss://h:6380/0?{query}"
    with pytest.raises(ConfigError, match="KIQBEAT_REDIS_INSECURE_TLS=true"):
        connect(url)
    kwargs = connect(url, insecure_tls=True).connection_pool.connection_kwargs
    assert kwargs["ssl_cert_reqs"] != "required" or kwargs["ssl_check_hostname"] is False
    assert parse_url(url).insecure


def test_tls_settings_on_a_plain_url_are_refused() -> None:
    with pytest.raises(ConfigError, match="use rediss://"):
        connect("redis://h:6379/0?ssl_ca_certs=/x/ca.pem")
